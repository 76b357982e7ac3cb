//! A local-attention layer of a model like Gemma 2 or gpt-oss: causal, a sliding window of 128
//! keys, softcapped scores and a learnable sink per head, GQA, bf16, checked against the CPU
//! reference with the same modifications: `cargo run --release --example sliding_window`.
mod common;

use cust::memory::{CopyDestination, DeviceBuffer};
use cust::stream::{Stream, StreamFlags};
use flashrs::{AttentionParams, DeviceArray};
use flashrs_reference::{Problem, RefInputs, Variants, reference_forward_with};
use half::bf16;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gpu = common::open_gpu();
    let (b, s, hq, hkv, d, window, cap) = (2, 1500, 8, 2, 64, 128, 30.0f32);
    // One sink logit per query head, on the GPU as a model keeps its parameters.
    let sinks: Vec<f32> = (0..hq).map(|h| 0.5 * h as f32 - 1.0).collect();
    let sinks_d = DeviceBuffer::from_slice(&sinks)?;
    let params = AttentionParams::builder()
        .batch(b)
        .seqlen(s)
        .heads_q(hq)
        .heads_kv(hkv)
        .head_dim(d)
        .causal(true)
        .window(Some(window), None) // causal masking closes the right side
        .softcap(cap)
        .sinks(DeviceArray::new(&sinks_d))
        .build()?;
    let n = params.contiguous_lens()?;
    let (q, k, v) = (common::random::<bf16>(n.q), common::random::<bf16>(n.k), common::random::<bf16>(n.v));

    let stream = Stream::new(StreamFlags::NON_BLOCKING, None)?;
    let (q_d, k_d, v_d) = (DeviceBuffer::from_slice(&q)?, DeviceBuffer::from_slice(&k)?, DeviceBuffer::from_slice(&v)?);
    let mut out_d = DeviceBuffer::from_slice(&vec![bf16::ZERO; n.out])?;
    let mut lse_d = DeviceBuffer::<f32>::zeroed(n.lse)?;
    gpu.attention_forward(&stream, &params, &q_d, &k_d, &v_d, &mut out_d, Some(&mut lse_d))?;
    stream.synchronize()?;
    let mut out = vec![bf16::ZERO; n.out];
    out_d.copy_to(&mut out[..])?;
    let lse = lse_d.as_host_vec()?;

    // The reference, with the same window, cap and sinks.
    let f = |x: &[bf16]| x.iter().map(|v| v.to_f32()).collect::<Vec<f32>>();
    let (qf, kf, vf) = (f(&q), f(&k), f(&v));
    let sinks64: Vec<f64> = sinks.iter().map(|&x| x as f64).collect();
    let variants = Variants { window: (Some(window), None), softcap: Some(cap as f64), alibi: None, sinks: Some(&sinks64), blocks: None };
    let (r_out, r_lse) = reference_forward_with(&Problem::from(&params), &variants, &RefInputs { q: &qf, k: &kf, v: &vf });
    let err = out.iter().zip(&r_out).map(|(o, r)| (o.to_f32() as f64 - r).abs()).fold(0.0, f64::max);
    let lse_err = lse.iter().zip(&r_lse).map(|(&g, &r)| (g as f64 - r).abs()).fold(0.0, f64::max);
    // bf16 outputs: the stored rounding alone is up to 2^-9 of each value.
    if !(err <= 1.5e-2 && lse_err <= 1e-3) {
        eprintln!("error: max abs error {err:.3e} (output), {lse_err:.3e} (log-sum-exp) against the CPU reference");
        std::process::exit(1);
    }
    println!("matches the CPU f64 reference: max abs error {err:.3e} (output), {lse_err:.3e} (log-sum-exp)");
    Ok(())
}
