//! Causal prefill with the log-sum-exp, inputs in PyTorch's `[batch, heads, seqlen, head_dim]`
//! layout: `cargo run --release --example causal_prefill`.
mod common;

use cust::memory::{CopyDestination, DeviceBuffer};
use cust::stream::{Stream, StreamFlags};
use flashrs::{AttentionParams, DimOrder};
use half::f16;

/// Converts between `[b, h, s, d]` and `[b, s, h, d]` (the reference's layout).
fn swap_seq_heads<T: Copy>(x: &[T], b: usize, outer: usize, inner: usize, d: usize) -> Vec<T> {
    let mut y = Vec::with_capacity(x.len());
    for bi in 0..b {
        for i in 0..inner {
            for o in 0..outer {
                let at = ((bi * outer + o) * inner + i) * d;
                y.extend_from_slice(&x[at..at + d]);
            }
        }
    }
    y
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gpu = common::open_gpu();
    let (b, h, s, d) = (1, 16, 1000, 64);
    let params = AttentionParams::builder().batch(b).seqlen(s).heads_q(h).head_dim(d).causal(true).dim_order(DimOrder::Bhsd).build()?;
    let n = params.contiguous_lens()?;
    // Generated directly in [b, h, s, d], as a PyTorch caller would hold them.
    let (q, k, v) = (common::random::<f16>(n.q), common::random::<f16>(n.k), common::random::<f16>(n.v));

    let stream = Stream::new(StreamFlags::NON_BLOCKING, None)?;
    let (q_d, k_d, v_d) = (DeviceBuffer::from_slice(&q)?, DeviceBuffer::from_slice(&k)?, DeviceBuffer::from_slice(&v)?);
    let mut out_d = DeviceBuffer::from_slice(&vec![f16::ZERO; n.out])?;
    let mut lse_d = DeviceBuffer::<f32>::zeroed(n.lse)?;
    gpu.attention_forward(&stream, &params, &q_d, &k_d, &v_d, &mut out_d, Some(&mut lse_d))?;
    stream.synchronize()?;

    let mut out = vec![f16::ZERO; n.out];
    out_d.copy_to(&mut out[..])?;
    let lse = lse_d.as_host_vec()?;
    // The first query row sees only the first key: its lse is that one scaled score.
    let first_score: f32 = (0..d).map(|i| q[i].to_f32() * k[i].to_f32()).sum::<f32>() / (d as f32).sqrt();
    println!("lse of row 0: {} (its single scaled score: {first_score})", lse[0]);
    // The reference reads contiguous [b, s, h, d] tensors.
    let bshd = |x: &[f16]| swap_seq_heads(x, b, h, s, d);
    common::check_against_reference(&params, &bshd(&q), &bshd(&k), &bshd(&v), &bshd(&out), 2e-3);
    Ok(())
}
