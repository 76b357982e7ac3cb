//! Plain multi-head attention, f16: `cargo run --release --example basic_forward`.
mod common;

use cust::memory::{CopyDestination, DeviceBuffer};
use cust::stream::{Stream, StreamFlags};
use flashrs::AttentionParams;
use half::f16;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gpu = common::open_gpu();
    // [batch, seqlen, heads, head_dim], contiguous.
    let params = AttentionParams::builder().batch(2).seqlen(512).heads_q(8).head_dim(128).build()?;
    let n = params.contiguous_lens()?;
    let (q, k, v) = (common::random::<f16>(n.q), common::random::<f16>(n.k), common::random::<f16>(n.v));

    let stream = Stream::new(StreamFlags::NON_BLOCKING, None)?;
    let (q_d, k_d, v_d) = (DeviceBuffer::from_slice(&q)?, DeviceBuffer::from_slice(&k)?, DeviceBuffer::from_slice(&v)?);
    let mut out_d = DeviceBuffer::from_slice(&vec![f16::ZERO; n.out])?;
    gpu.attention_forward(&stream, &params, &q_d, &k_d, &v_d, &mut out_d, None)?;
    stream.synchronize()?;

    let mut out = vec![f16::ZERO; n.out];
    out_d.copy_to(&mut out[..])?;
    common::check_against_reference(&params, &q, &k, &v, &out, 2e-3);
    Ok(())
}
