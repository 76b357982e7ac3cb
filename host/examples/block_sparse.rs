//! Block-sparse attention: a long-context layer whose queries attend a causal band of recent
//! blocks plus the first block (attention sinks in the StreamingLLM sense), built on the host
//! as a FlexAttention-style block mask, run on the GPU and checked against the CPU reference
//! with the same blocks: `cargo run --release --example block_sparse`.
mod common;

use cust::memory::DeviceBuffer;
use flashrs::{AttentionParams, Block, DeviceArray, HostBlockMask};
use flashrs_reference::{Blocks, Variants};
use half::f16;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gpu = common::open_gpu();
    let (b, s, hq, hkv, d, band) = (1, 2048, 4, 2, 128, 3);
    // Query block `qb` visits key blocks 0 and `qb - band ..= qb`; causal masking masks inside
    // the diagonal block, so those are partial and the others full.
    let mask = HostBlockMask::from_fn(1, 1, s, s, |_, _, qb, kb| match kb {
        _ if kb == qb => Block::Partial,
        _ if kb == 0 || (kb < qb && kb + band >= qb) => Block::Full,
        _ => Block::Skip,
    })?;
    let up = |v: &[i32]| DeviceBuffer::from_slice(v);
    let (counts, indices, full_counts, full_indices) = (up(&mask.counts)?, up(&mask.indices)?, up(&mask.full_counts)?, up(&mask.full_indices)?);
    let device_mask = mask.on_device(DeviceArray::new(&counts), DeviceArray::new(&indices), DeviceArray::new(&full_counts), DeviceArray::new(&full_indices))?;
    let params = AttentionParams::builder().batch(b).seqlen(s).heads_q(hq).heads_kv(hkv).head_dim(d).causal(true).block_mask(device_mask).build()?;
    let ([q, k, v, out], lse) = common::random_forward_lse::<f16>(&gpu, &params)?;

    // The reference, told which blocks each query block visits.
    let visits = mask.visits();
    let blocks = Blocks { visits: &visits, batch: 1, heads: 1, q_blocks: mask.q_blocks, kv_blocks: mask.kv_blocks };
    let variants = Variants { blocks: Some(blocks), ..Variants::NONE };
    let errors = common::check_variants_against_reference(&params, &variants, [&q, &k, &v], &out, &lse, 2e-3);
    println!("{:.0}% of the key blocks visited; matches the CPU f64 reference: {errors}", 100.0 * mask.density());
    Ok(())
}
