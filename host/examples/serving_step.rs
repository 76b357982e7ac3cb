//! One step of a serving engine in one call, as vLLM calls `flash_attn_varlen_func` with a
//! block table: decode rows and a chunked-prefill chunk packed together, K and V in a paged
//! cache, the offsets and cache lengths already on the GPU:
//! `cargo run --release --example serving_step`.
mod common;

use cust::memory::{CopyDestination, DeviceBuffer};
use cust::stream::{Stream, StreamFlags};
use flashrs::{AttentionParams, DeviceIndex, DeviceOffsets, PagedKv};
use half::f16;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gpu = common::open_gpu();
    let (heads_q, heads_kv, head_dim, page_size) = (32, 8, 128, 16);
    // (new query tokens, cache length after this step): two decode rows, the last 256 tokens
    // of a 4096-token prompt (chunked prefill), and a fresh 77-token prompt.
    let seqs = [(1, 1000), (1, 37), (256, 4096), (77, 77)];
    let row = heads_kv * head_dim;
    let kv: Vec<(Vec<f16>, Vec<f16>)> = seqs.iter().map(|&(_, n)| (common::random(n * row), common::random(n * row))).collect();
    let caches = common::page_sequences(&kv, row, page_size);

    // What the engine keeps on the GPU: query offsets and cache lengths.
    let mut cu_seqlens_q = vec![0i32];
    for &(q, _) in &seqs {
        cu_seqlens_q.push(cu_seqlens_q.last().unwrap() + q as i32);
    }
    let total_q = *cu_seqlens_q.last().unwrap() as usize;
    let (max_q, max_k) = (seqs.iter().map(|s| s.0).max().unwrap(), seqs.iter().map(|s| s.1).max().unwrap());
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None)?;
    let table_d = DeviceBuffer::from_slice(&caches.table)?;
    let cu_q_d = DeviceBuffer::from_slice(&cu_seqlens_q)?;
    let used_d = DeviceBuffer::from_slice(&seqs.map(|(_, n)| n as i32))?;
    // Packed queries against the paged cache; no packed keys (total_k 0), causal per sequence
    // (a chunk's rows see the cache up to their own position).
    let offsets = DeviceOffsets::new(DeviceIndex::new(&cu_q_d), total_q);
    let paged = PagedKv::new(caches.pages, DeviceIndex::new(&table_d)).seqused_k(DeviceIndex::new(&used_d));
    let params = AttentionParams::builder()
        .varlen_device(offsets)
        .batch(seqs.len())
        .seqlen_q(max_q)
        .seqlen_k(max_k)
        .heads_q(heads_q)
        .heads_kv(heads_kv)
        .head_dim(head_dim)
        .causal(true)
        .paged(paged)
        .build()?;
    let q = common::random::<f16>(total_q * heads_q * head_dim);

    let (q_d, k_d, v_d) = (DeviceBuffer::from_slice(&q)?, DeviceBuffer::from_slice(&caches.k)?, DeviceBuffer::from_slice(&caches.v)?);
    let mut out_d = DeviceBuffer::from_slice(&vec![f16::ZERO; q.len()])?;
    gpu.attention_forward(&stream, &params, &q_d, &k_d, &v_d, &mut out_d, None)?;
    stream.synchronize()?;

    let mut out = vec![f16::ZERO; q.len()];
    out_d.copy_to(&mut out[..])?;
    // Each sequence against the reference on its own rows and contiguous cache.
    let per_row = heads_q * head_dim;
    for (b, ((new, len), (k, v))) in seqs.iter().zip(&kv).enumerate() {
        let one = AttentionParams::builder().batch(1).seqlen_q(*new).seqlen_k(*len).heads_q(heads_q).heads_kv(heads_kv).head_dim(head_dim).causal(true).build()?;
        let rows = cu_seqlens_q[b] as usize * per_row..cu_seqlens_q[b + 1] as usize * per_row;
        print!("sequence {b} ({new} new tokens, {len} cached): ");
        common::check_against_reference(&one, &q[rows.clone()], k, v, &out[rows], 2e-3);
    }
    Ok(())
}
