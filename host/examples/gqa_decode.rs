//! Grouped-query decode: one new query token per sequence against a long KV cache, 32 query
//! heads sharing 8 KV heads: `cargo run --release --example gqa_decode`.
mod common;

use cust::memory::{CopyDestination, DeviceBuffer};
use cust::stream::{Stream, StreamFlags};
use flashrs::AttentionParams;
use half::f16;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gpu = common::open_gpu();
    let params = AttentionParams::new(4, 1, 4096, 32, 128).heads_kv(8);
    let (n_q, n_kv, _) = params.contiguous_lens();
    let (q, k, v) = (common::random::<f16>(n_q), common::random::<f16>(n_kv), common::random::<f16>(n_kv));

    let stream = Stream::new(StreamFlags::NON_BLOCKING, None)?;
    let (q_d, k_d, v_d) = (DeviceBuffer::from_slice(&q)?, DeviceBuffer::from_slice(&k)?, DeviceBuffer::from_slice(&v)?);
    let mut out_d = DeviceBuffer::from_slice(&vec![f16::ZERO; n_q])?;
    gpu.attention_forward(&stream, &params, &q_d, &k_d, &v_d, &mut out_d, None)?;
    stream.synchronize()?;

    let mut out = vec![f16::ZERO; n_q];
    out_d.copy_to(&mut out[..])?;
    common::check_against_reference(&params, &q, &k, &v, &out, 2e-3);
    Ok(())
}
