//! Attention whose V is narrower than Q and K, as DeepSeek's (multi-head latent attention
//! expanded for prefill: Q and K of 192 = 128 + 64 rotary columns, V of 128), causal, bf16,
//! checked against the CPU reference: `cargo run --release --example value_head_dim`.
mod common;

use flashrs::AttentionParams;
use half::bf16;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gpu = common::open_gpu();
    // The output has V's head dimension: `contiguous_lens` sizes every buffer.
    let params = AttentionParams::builder().batch(2).seqlen(1000).heads_q(16).head_dim(192).head_dim_v(128).causal(true).build()?;
    let [q, k, v, out] = common::random_forward::<bf16>(&gpu, &params)?;
    common::check_against_reference(&params, &q, &k, &v, &out, 1.5e-2);
    Ok(())
}
