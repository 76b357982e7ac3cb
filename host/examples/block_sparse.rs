//! Block-sparse attention: a long-context layer whose queries attend a causal band of recent
//! blocks plus the first block (attention sinks in the StreamingLLM sense), built on the host
//! as a FlexAttention-style block mask, run on the GPU and checked against the CPU reference
//! with the same blocks; its gradients (the backward pass over the same blocks) against the
//! reference's analytic ones; then the same mask built on the GPU from the dense boolean mask
//! it stands for: `cargo run --release --example block_sparse`.
mod common;

use cust::memory::DeviceBuffer;
use cust::memory::CopyDestination;
use cust::stream::{Stream, StreamFlags};
use flashrs::{AttentionParams, Block, DenseMaskShape, DeviceArray, HostBlockMask};
use flashrs_reference::{Blocks, Problem, RefInputs, Variants, reference_backward_with};
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

    // The backward pass over the same blocks, from the forward's output and log-sum-exp and a
    // loss gradient dO.
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None)?;
    let n = params.contiguous_lens()?;
    let dout = common::random::<f16>(n.out);
    let up = |x: &[f16]| DeviceBuffer::from_slice(x);
    let (q_d, k_d, v_d, out_d, dout_d, lse_d) = (up(&q)?, up(&k)?, up(&v)?, up(&out)?, up(&dout)?, DeviceBuffer::from_slice(&lse)?);
    let (mut dq_d, mut dk_d, mut dv_d) = (up(&vec![f16::ZERO; n.q])?, up(&vec![f16::ZERO; n.k])?, up(&vec![f16::ZERO; n.v])?);
    gpu.attention_backward(&stream, &params, &q_d, &k_d, &v_d, &out_d, &lse_d, &dout_d, &mut dq_d, &mut dk_d, &mut dv_d)?;
    stream.synchronize()?;
    let f = |x: &[f16]| x.iter().map(|v| v.to_f32()).collect::<Vec<f32>>();
    let (qf, kf, vf, df) = (f(&q), f(&k), f(&v), f(&dout));
    let want = reference_backward_with(&Problem::from(&params), &variants, &RefInputs { q: &qf, k: &kf, v: &vf }, &df);
    for (name, got, want) in [("dQ", &dq_d, &want.dq), ("dK", &dk_d, &want.dk), ("dV", &dv_d, &want.dv)] {
        let mut h = vec![f16::ZERO; got.len()];
        got.copy_to(&mut h[..])?;
        let scale = want.iter().fold(0f64, |m, x| m.max(x.abs()));
        let err = h.iter().zip(want.iter()).fold(0f64, |m, (g, w)| m.max((g.to_f64() - w).abs()));
        println!("{name}: max |gpu - reference| = {err:.3e} (largest gradient {scale:.3e})");
        // f16's bar on unit-scale outputs, relative to the gradient's size.
        assert!(err <= 2e-3 * scale, "{name} differs from the reference");
    }

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
