//! Decode against a paged KV cache, as a serving engine keeps it: 16-token pages scattered
//! over one cache, a block table per sequence, and each sequence's own length:
//! `cargo run --release --example paged_decode`.
mod common;

use cust::memory::{CopyDestination, DeviceBuffer};
use cust::stream::{Stream, StreamFlags};
use flashrs::{AttentionParams, DeviceIndex, PagedKv};
use half::f16;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gpu = common::open_gpu();
    let (heads_q, heads_kv, head_dim, page_size) = (32, 8, 128, 16);
    let lens = [1000, 37, 4096];
    // Each sequence's keys and values as one contiguous [len, heads_kv, head_dim] block,
    // scattered page by page over the caches, in random page order.
    let row = heads_kv * head_dim;
    let seqs: Vec<(Vec<f16>, Vec<f16>)> = lens.iter().map(|&n| (common::random(n * row), common::random(n * row))).collect();
    let caches = common::page_sequences(&seqs, row, page_size);
    let max_len = *lens.iter().max().unwrap();
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None)?;
    // The block table and each sequence's length live on the GPU, as the engine keeps them.
    let table_d = DeviceBuffer::from_slice(&caches.table)?;
    let used_d = DeviceBuffer::from_slice(&lens.map(|n| n as i32))?;
    let paged = PagedKv::new(caches.pages, DeviceIndex::new(&table_d)).seqused_k(DeviceIndex::new(&used_d));
    let params = AttentionParams::builder().batch(lens.len()).seqlen_q(1).seqlen_k(max_len).heads_q(heads_q).heads_kv(heads_kv).head_dim(head_dim).paged(paged).build()?;
    let n = params.contiguous_lens()?;
    let q = common::random::<f16>(n.q);

    let (q_d, k_d, v_d) = (DeviceBuffer::from_slice(&q)?, DeviceBuffer::from_slice(&caches.k)?, DeviceBuffer::from_slice(&caches.v)?);
    let mut out_d = DeviceBuffer::from_slice(&vec![f16::ZERO; n.out])?;
    // K and V are the whole caches; the layout in `params` says how to read them.
    gpu.attention_forward(&stream, &params, &q_d, &k_d, &v_d, &mut out_d, None)?;
    stream.synchronize()?;

    let mut out = vec![f16::ZERO; n.out];
    out_d.copy_to(&mut out[..])?;
    // Each sequence against the reference on its own contiguous keys and values.
    let per_seq = heads_q * head_dim;
    for (b, (k, v)) in seqs.iter().enumerate() {
        let one = AttentionParams::builder().batch(1).seqlen_q(1).seqlen_k(lens[b]).heads_q(heads_q).heads_kv(heads_kv).head_dim(head_dim).build()?;
        common::check_against_reference(&one, &q[b * per_seq..][..per_seq], k, v, &out[b * per_seq..][..per_seq], 2e-3);
    }
    Ok(())
}
