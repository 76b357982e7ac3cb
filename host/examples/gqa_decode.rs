//! Grouped-query decode: one new query token per sequence against a long KV cache, 32 query
//! heads sharing 8 KV heads: `cargo run --release --example gqa_decode`.
mod common;

use flashrs::AttentionParams;
use half::f16;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gpu = common::open_gpu();
    let params = AttentionParams::new(4, 1, 4096, 32, 128).heads_kv(8);
    let [q, k, v, out] = common::random_forward::<f16>(&gpu, &params)?;
    common::check_against_reference(&params, &q, &k, &v, &out, 2e-3);
    Ok(())
}
