//! Attention with a learned relative-position bias (T5, Swin) that flashrs does not ship: the
//! device crate `relative_bias_kernels` (next to this file) implements it as a `ScoreMod` of
//! its own and instantiates kernels-gpu's forward bodies (and the backward's main body, which
//! `Gpu::attention_backward_custom` launches) with it; this program loads that PTX and runs the
//! forward through flashrs's planner, checked against the CPU reference given the same bias.
//! Build the kernels, then run:
//!
//! ```text
//! cargo xtask build-ptx --crate host/examples/relative_bias_kernels
//! cargo run --release --example relative_bias
//! ```
//!
//! It loads `<sm_80 or sm_90a>.ptx` from `target/ptx/relative_bias_kernels`, or from the folder
//! `FLASHRS_CUSTOM_PTX_DIR` names.
mod common;

use cust::memory::DeviceBuffer;
use flashrs::{Arch, AttentionParams, DeviceArray};
use flashrs_reference::{Bias, Variants};
use half::bf16;

/// Relative positions the bias distinguishes: `-MAX..=MAX`, farther ones clamped.
const MAX: usize = 64;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gpu = common::open_gpu();
    let module = if gpu.arch() == Arch::Sm90a { "sm_90a" } else { "sm_80" };
    let dir = std::env::var("FLASHRS_CUSTOM_PTX_DIR").unwrap_or_else(|_| format!("{}/../target/ptx/relative_bias_kernels", env!("CARGO_MANIFEST_DIR")));
    let path = format!("{dir}/{module}.ptx");
    let ptx = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e} (build it with `cargo xtask build-ptx --crate host/examples/relative_bias_kernels`)"))?;
    let kernels = gpu.load_custom_kernels(&ptx)?;
    println!("loaded {} kernels from {path}", kernels.kernels().count());

    let (b, s, hq, hkv, d) = (2, 1000, 8, 2, 128);
    // The learned table: per head, one bias per relative position in -MAX..=MAX.
    let learned: Vec<f32> = common::random::<bf16>(hq * (2 * MAX + 1)).iter().map(|x| x.to_f32()).collect();
    let at = |head: usize, relative: i64| learned[head * (2 * MAX + 1) + (relative.clamp(-(MAX as i64), MAX as i64) + MAX as i64) as usize];
    // What the device crate reads: the radius r (the longest sequence plus 256), then each
    // head's bias at every relative position in -r..=r (clamped here, once).
    let r = s as i64 + 256;
    let data: Vec<f32> = std::iter::once(r as f32).chain((0..hq).flat_map(|h| (-r..=r).map(move |rel| at(h, rel)))).collect();
    let data_d = DeviceBuffer::from_slice(&data)?;
    // The reference's bias, from the learned table (seqlen_q == seqlen_k: the diagonal is the row).
    let bias = |_batch: usize, head: usize, row: usize, key: usize| at(head, key as i64 - row as i64) as f64;
    let variants = Variants { bias: Some(Bias(&bias)), ..Variants::NONE };

    // Causal, then a sliding window with a softcap: the built-in modifications still apply.
    let causal = AttentionParams::builder().batch(b).seqlen(s).heads_q(hq).heads_kv(hkv).head_dim(d).causal(true).user_data(DeviceArray::new(&data_d)).build()?;
    let windowed = causal.to_builder().causal(false).window(Some(200), Some(50)).softcap(20.0).build()?;
    for (name, params, variants) in [
        ("causal", &causal, variants),
        ("window (200, 50), softcap 20", &windowed, Variants { window: (Some(200), Some(50)), softcap: Some(20.0), ..variants }),
    ] {
        let ([q, k, v, out], lse) = common::random_forward_on::<bf16>(&gpu, Some(&kernels), params)?;
        let errors = common::check_variants_against_reference(params, &variants, [&q, &k, &v], &out, &lse, 1.5e-2);
        println!("{name}: matches the CPU f64 reference: {errors}");
    }
    Ok(())
}
