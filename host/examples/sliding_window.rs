//! A local-attention layer of a model like Gemma 2 or gpt-oss: causal, a sliding window of 128
//! keys, softcapped scores and a learnable sink per head, GQA, bf16, checked against the CPU
//! reference with the same modifications: `cargo run --release --example sliding_window`.
mod common;

use cust::memory::DeviceBuffer;
use flashrs::{AttentionParams, DeviceArray};
use flashrs_reference::Variants;
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
    let ([q, k, v, out], lse) = common::random_forward_lse::<bf16>(&gpu, &params)?;

    // The reference, with the same window, cap and sinks; bf16 outputs: the stored rounding
    // alone is up to 2^-9 of each value.
    let sinks64: Vec<f64> = sinks.iter().map(|&x| x as f64).collect();
    let variants = Variants { window: (Some(window), None), softcap: Some(cap as f64), alibi: None, sinks: Some(&sinks64), blocks: None, bias: None };
    let errors = common::check_variants_against_reference(&params, &variants, [&q, &k, &v], &out, &lse, 1.5e-2);
    println!("matches the CPU f64 reference: {errors}");
    Ok(())
}
