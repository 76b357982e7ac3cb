//! A packed batch of prompts of different lengths (as a serving engine prefills them): Q, K and V
//! as `[total_tokens, heads, head_dim]` with `cu_seqlens` offsets, causal per prompt, 4:1 GQA:
//! `cargo run --release --example varlen_prefill`. On an H100/H200 it runs on the Hopper kernels.
mod common;

use cust::memory::{CopyDestination, DeviceBuffer};
use cust::stream::{Stream, StreamFlags};
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
    let params = AttentionParams::new_varlen(&cu_seqlens, &cu_seqlens, heads_q, head_dim).heads_kv(heads_kv).causal(true);
    let (n_q, n_kv, _) = params.contiguous_lens();
    let (q, k, v) = (common::random::<f16>(n_q), common::random::<f16>(n_kv), common::random::<f16>(n_kv));

    let stream = Stream::new(StreamFlags::NON_BLOCKING, None)?;
    let (q_d, k_d, v_d) = (DeviceBuffer::from_slice(&q)?, DeviceBuffer::from_slice(&k)?, DeviceBuffer::from_slice(&v)?);
    let mut out_d = DeviceBuffer::from_slice(&vec![f16::ZERO; n_q])?;
    gpu.attention_forward(&stream, &params, &q_d, &k_d, &v_d, &mut out_d, None)?;
    stream.synchronize()?;
    let mut out = vec![f16::ZERO; n_q];
    out_d.copy_to(&mut out[..])?;
    let r = |b: &DeviceBuffer<f16>| flashrs::BufferRef { ptr: b.as_device_ptr().as_raw(), len: b.len() };
    let bufs = flashrs::Buffers { q: r(&q_d), k: r(&k_d), v: r(&v_d), o: r(&out_d), lse: None, paged: None };
    println!("kernel: {}", gpu.plan_forward(&params, &bufs)?.kernel_for(gpu.arch()));

    // Each prompt on its own is an ordinary causal call: check each slice of the packed output.
    let (row_q, row_kv) = (heads_q * head_dim, heads_kv * head_dim);
    for (b, &n) in lens.iter().enumerate() {
        let start = cu_seqlens[b] as usize;
        let one = AttentionParams::new(1, n as usize, n as usize, heads_q, head_dim).heads_kv(heads_kv).causal(true);
        let (qs, ks) = (start * row_q..(start + n as usize) * row_q, start * row_kv..(start + n as usize) * row_kv);
        print!("prompt {b} ({n} tokens): ");
        common::check_against_reference(&one, &q[qs.clone()], &k[ks.clone()], &v[ks], &out[qs], 2e-3);
    }
    Ok(())
}
