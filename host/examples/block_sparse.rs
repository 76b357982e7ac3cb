//! Block-sparse attention: a long-context layer whose queries attend a causal band of recent
//! blocks plus the first block (attention sinks in the StreamingLLM sense), built on the host
//! as a FlexAttention-style block mask, run on the GPU and checked against the CPU reference
//! with the same blocks; then the same mask built on the GPU from the dense boolean mask it
//! stands for: `cargo run --release --example block_sparse`.
mod common;

use cust::memory::DeviceBuffer;
use cust::memory::CopyDestination;
use cust::stream::{Stream, StreamFlags};
use flashrs::{AttentionParams, Block, DenseMaskShape, DeviceArray, HostBlockMask};
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

    // The same lists from the dense mask (one byte per query row and key) on the GPU: what a
    // model that computes its mask on the GPU would do.
    let sees = |r: usize, k: usize| {
        let (qb, kb) = (r / 128, k / 128);
        (kb == qb && k <= r) || kb == 0 && qb > 0 || (kb < qb && kb + band >= qb)
    };
    let dense: Vec<u8> = (0..s * s).map(|i| sees(i / s, i % s) as u8).collect();
    let shape = DenseMaskShape::new(1, 1, s, s)?;
    let list = |n: usize| DeviceBuffer::from_slice(&vec![0i32; n]);
    let (mut c, mut i, mut fc, mut fi) = (list(shape.counts_len())?, list(shape.indices_len())?, list(shape.counts_len())?, list(shape.indices_len())?);
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None)?;
    gpu.block_mask_from_dense(&stream, &DeviceBuffer::from_slice(&dense)?, shape, &mut c, &mut i, &mut fc, &mut fi)?;
    stream.synchronize()?;
    let host = |d: &DeviceBuffer<i32>| -> Result<Vec<i32>, cust::error::CudaError> {
        let mut v = vec![0; d.len()];
        d.copy_to(&mut v[..])?;
        Ok(v)
    };
    let built = [host(&c)?, host(&i)?, host(&fc)?, host(&fi)?];
    assert_eq!(built, [mask.counts.clone(), mask.indices.clone(), mask.full_counts.clone(), mask.full_indices.clone()], "the GPU-built lists differ");
    println!("built on the GPU from the {} MB dense mask: the same lists", dense.len() >> 20);
    Ok(())
}
