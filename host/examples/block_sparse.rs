//! Block-sparse attention: a long-context layer whose queries attend a causal band of recent
//! blocks plus the first block (attention sinks in the StreamingLLM sense), built on the host
//! as a FlexAttention-style block mask, run on the GPU and checked against the CPU reference
//! with the same blocks: `cargo run --release --example block_sparse`.
mod common;

use cust::memory::{CopyDestination, DeviceBuffer};
use cust::stream::{Stream, StreamFlags};
use flashrs::{AttentionParams, Block, DeviceArray, HostBlockMask};
use flashrs_reference::{Blocks, Problem, RefInputs, Variants, reference_forward_with};
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
    let n = params.contiguous_lens()?;
    let (q, k, v) = (common::random::<f16>(n.q), common::random::<f16>(n.k), common::random::<f16>(n.v));

    let stream = Stream::new(StreamFlags::NON_BLOCKING, None)?;
    let (q_d, k_d, v_d) = (DeviceBuffer::from_slice(&q)?, DeviceBuffer::from_slice(&k)?, DeviceBuffer::from_slice(&v)?);
    let mut out_d = DeviceBuffer::from_slice(&vec![f16::ZERO; n.out])?;
    let mut lse_d = DeviceBuffer::<f32>::zeroed(n.lse)?;
    gpu.attention_forward(&stream, &params, &q_d, &k_d, &v_d, &mut out_d, Some(&mut lse_d))?;
    stream.synchronize()?;
    let mut out = vec![f16::ZERO; n.out];
    out_d.copy_to(&mut out[..])?;
    let lse = lse_d.as_host_vec()?;

    // The reference, told which blocks each query block visits.
    let visits = mask.visits();
    let blocks = Blocks { visits: &visits, batch: 1, heads: 1, q_blocks: mask.q_blocks, kv_blocks: mask.kv_blocks };
    let f = |x: &[f16]| x.iter().map(|v| v.to_f32()).collect::<Vec<f32>>();
    let (qf, kf, vf) = (f(&q), f(&k), f(&v));
    let variants = Variants { blocks: Some(blocks), ..Variants::NONE };
    let (r_out, r_lse) = reference_forward_with(&Problem::from(&params), &variants, &RefInputs { q: &qf, k: &kf, v: &vf });
    let err = out.iter().zip(&r_out).map(|(o, r)| (o.to_f32() as f64 - r).abs()).fold(0.0, f64::max);
    let lse_err = lse.iter().zip(&r_lse).map(|(&g, &r)| (g as f64 - r).abs()).fold(0.0, f64::max);
    if !(err <= 2e-3 && lse_err <= 1e-3) {
        eprintln!("error: max abs error {err:.3e} (output), {lse_err:.3e} (log-sum-exp) against the CPU reference");
        std::process::exit(1);
    }
    println!(
        "{:.0}% of the key blocks visited; matches the CPU f64 reference: max abs error {err:.3e} (output), {lse_err:.3e} (log-sum-exp)",
        100.0 * mask.density()
    );
    Ok(())
}
