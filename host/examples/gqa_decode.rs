//! Grouped-query decode: one new query token per sequence against a long KV cache, 32 query
//! heads sharing 8 KV heads: `cargo run --release --example gqa_decode`.
mod common;

use flashrs::AttentionParams;
use half::f16;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gpu = common::open_gpu();
    let params = AttentionParams::builder().batch(4).seqlen_q(1).seqlen_k(4096).heads_q(32).heads_kv(8).head_dim(128).build()?;
    let [q, k, v, out] = common::random_forward::<f16>(&gpu, &params)?;
    common::check_against_reference(&params, &q, &k, &v, &out, 2e-3);
    Ok(())
}
