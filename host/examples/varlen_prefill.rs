//! A packed batch of prompts of different lengths (as a serving engine prefills them): Q, K and V
//! as `[total_tokens, heads, head_dim]` with `cu_seqlens` offsets, causal per prompt, 4:1 GQA:
//! `cargo run --release --example varlen_prefill`. On an H100/H200 it runs on the Hopper kernels.
mod common;

use flashrs::AttentionParams;
use half::f16;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gpu = common::open_gpu();
    // Four prompts of 517, 64, 1 and 2048 tokens, each attending to itself.
    let lens = [517, 64, 1, 2048];
    let cu_seqlens: Vec<i32> = std::iter::once(0).chain(lens.iter().scan(0, |end, &n| {
        *end += n;
        Some(*end)
    })).collect();
    let (heads_q, heads_kv, head_dim) = (16, 4, 128);
    let params = AttentionParams::builder().varlen(&cu_seqlens, &cu_seqlens).heads_q(heads_q).heads_kv(heads_kv).head_dim(head_dim).causal(true).build()?;
    let [q, k, v, out] = common::random_forward::<f16>(&gpu, &params)?;

    // Each prompt on its own is an ordinary causal call: check each slice of the packed output.
    let (row_q, row_kv) = (heads_q * head_dim, heads_kv * head_dim);
    for (b, &n) in lens.iter().enumerate() {
        let start = cu_seqlens[b] as usize;
        let one = AttentionParams::builder().batch(1).seqlen(n as usize).heads_q(heads_q).heads_kv(heads_kv).head_dim(head_dim).causal(true).build()?;
        let (qs, ks) = (start * row_q..(start + n as usize) * row_q, start * row_kv..(start + n as usize) * row_kv);
        print!("prompt {b} ({n} tokens): ");
        common::check_against_reference(&one, &q[qs.clone()], &k[ks.clone()], &v[ks], &out[qs], 2e-3);
    }
    Ok(())
}
