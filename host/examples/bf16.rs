//! bf16 inputs with a custom softmax scale: `cargo run --release --example bf16`.
mod common;

use cust::memory::{CopyDestination, DeviceBuffer};
use cust::stream::{Stream, StreamFlags};
use flashrs::{AttentionParams, DType};
use half::bf16;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gpu = common::open_gpu();
    let params = AttentionParams::new(2, 777, 1025, 4, 256).dtype(DType::Bf16).softmax_scale(0.05);
    let (n_q, n_kv, _) = params.contiguous_lens();
    let (q, k, v) = (common::random::<bf16>(n_q), common::random::<bf16>(n_kv), common::random::<bf16>(n_kv));

    let stream = Stream::new(StreamFlags::NON_BLOCKING, None)?;
    let (q_d, k_d, v_d) = (DeviceBuffer::from_slice(&q)?, DeviceBuffer::from_slice(&k)?, DeviceBuffer::from_slice(&v)?);
    let mut out_d = DeviceBuffer::from_slice(&vec![bf16::ZERO; n_q])?;
    gpu.attention_forward(&stream, &params, &q_d, &k_d, &v_d, &mut out_d, None)?;
    stream.synchronize()?;

    let mut out = vec![bf16::ZERO; n_q];
    out_d.copy_to(&mut out[..])?;
    common::check_against_reference(&params, &q, &k, &v, &out, 1.5e-2);
    Ok(())
}
