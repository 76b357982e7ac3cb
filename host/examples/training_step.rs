//! One training step of an attention layer, bf16, causal GQA: forward (keeping the
//! log-sum-exp), the gradient of a loss with respect to the output, backward, and an SGD
//! update of Q, checked against the CPU f64 reference's analytic gradients:
//! `cargo run --release --example training_step`.
mod common;

use cust::memory::{CopyDestination, DeviceBuffer};
use cust::stream::{Stream, StreamFlags};
use flashrs::AttentionParams;
use flashrs_reference::{Problem, RefInputs, reference_backward};
use half::bf16;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gpu = common::open_gpu();
    // 2 sequences of 384 tokens, 8 query heads sharing 2 K/V heads, head_dim 128, causal.
    let params = AttentionParams::builder().batch(2).seqlen(384).heads_q(8).heads_kv(2).head_dim(128).causal(true).build()?;
    let n = params.contiguous_lens()?;
    let (q, k, v) = (common::random::<bf16>(n.q), common::random::<bf16>(n.k), common::random::<bf16>(n.v));
    // The loss: L = sum(out * target), so dL/dout = target.
    let target = common::random::<bf16>(n.out);

    let stream = Stream::new(StreamFlags::NON_BLOCKING, None)?;
    let up = |x: &[bf16]| DeviceBuffer::from_slice(x);
    let (q_d, k_d, v_d, dout_d) = (up(&q)?, up(&k)?, up(&v)?, up(&target)?);
    let mut out_d = up(&vec![bf16::ZERO; n.out])?;
    let mut lse_d = DeviceBuffer::<f32>::zeroed(n.lse)?;
    let (mut dq_d, mut dk_d, mut dv_d) = (up(&vec![bf16::ZERO; n.q])?, up(&vec![bf16::ZERO; n.k])?, up(&vec![bf16::ZERO; n.v])?);

    // Forward, keeping the log-sum-exp the backward pass needs; then backward, same stream.
    gpu.attention_forward(&stream, &params, &q_d, &k_d, &v_d, &mut out_d, Some(&mut lse_d))?;
    gpu.attention_backward(&stream, &params, &q_d, &k_d, &v_d, &out_d, &lse_d, &dout_d, &mut dq_d, &mut dk_d, &mut dv_d)?;
    stream.synchronize()?;

    let host = |d: &DeviceBuffer<bf16>| -> Result<Vec<f32>, cust::error::CudaError> {
        let mut h = vec![bf16::ZERO; d.len()];
        d.copy_to(&mut h[..])?;
        Ok(h.iter().map(|x| x.to_f32()).collect())
    };
    let (dq, dk, dv) = (host(&dq_d)?, host(&dk_d)?, host(&dv_d)?);

    // The reference's analytic gradients from the same inputs (f64).
    let f = |x: &[bf16]| x.iter().map(|v| v.to_f32()).collect::<Vec<f32>>();
    let (qf, kf, vf, tf) = (f(&q), f(&k), f(&v), f(&target));
    let want = reference_backward(&Problem::from(&params), &RefInputs { q: &qf, k: &kf, v: &vf }, &tf);
    for (name, got, want) in [("dQ", &dq, &want.dq), ("dK", &dk, &want.dk), ("dV", &dv, &want.dv)] {
        let scale = want.iter().fold(0f64, |m, x| m.max(x.abs()));
        let err = got.iter().zip(want.iter()).fold(0f64, |m, (g, w)| m.max((*g as f64 - w).abs()));
        println!("{name}: max |gpu - reference| = {err:.3e} (largest gradient {scale:.3e})");
        // bf16's bar on unit-scale outputs, relative to the gradient's size.
        assert!(err <= 1.5e-2 * scale, "{name} differs from the reference");
    }

    // An SGD step on Q (the other parameters' updates are the same loop).
    let lr = 1e-2;
    let q_next: Vec<bf16> = q.iter().zip(&dq).map(|(x, g)| bf16::from_f32(x.to_f32() - lr * g)).collect();
    let moved = q.iter().zip(&q_next).filter(|(a, b)| a != b).count();
    println!("SGD step: {moved} of {} elements of Q moved", q.len());
    Ok(())
}
