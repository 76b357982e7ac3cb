//! FP8 attention on Hopper: E4M3 Q, K and V (each quantized with one factor per KV head, as
//! FlashAttention-3's `q_descale` / `k_descale` / `v_descale`), causal, 16 query heads sharing
//! 4 KV heads, a bf16 output, on the FP8 tensor cores: `cargo run --release --example
//! fp8_attention`. Needs an sm_90a GPU (H100/H200); elsewhere the call is a typed error.
mod common;

use cust::memory::{CopyDestination, DeviceBuffer};
use cust::stream::{Stream, StreamFlags};
use flashrs::{AttentionParams, Descale, DeviceArray, E4m3};
use flashrs_reference::{Problem, RefInputs, reference_forward};
use half::bf16;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gpu = common::open_gpu();
    let (batch, seqlen, heads, heads_kv, d) = (2, 512, 16, 4, 128);
    let group = heads / heads_kv;
    // Each KV head's values (for Q: its query heads') scaled into E4M3's range by their own
    // factor, then rounded: the stored bytes times the factor are the tensor.
    let quantize = |x: &[f32], h: usize| -> (Vec<E4m3>, Vec<f32>) {
        let kv_head = |i: usize| (i / d) % h / (h / heads_kv);
        let mut factors = vec![0f32; heads_kv];
        for (i, v) in x.iter().enumerate() {
            factors[kv_head(i)] = factors[kv_head(i)].max(v.abs() / 448.0);
        }
        (x.iter().enumerate().map(|(i, v)| E4m3::from_f32(v / factors[kv_head(i)])).collect(), factors)
    };
    let random = |n: usize| common::random::<bf16>(n).iter().map(|x| x.to_f32()).collect::<Vec<f32>>();
    let ((q8, qf), (k8, kf), (v8, vf)) =
        (quantize(&random(batch * seqlen * heads * d), heads), quantize(&random(batch * seqlen * heads_kv * d), heads_kv), quantize(&random(batch * seqlen * heads_kv * d), heads_kv));

    let stream = Stream::new(StreamFlags::NON_BLOCKING, None)?;
    let (q_d, k_d, v_d) = (DeviceBuffer::from_slice(&q8)?, DeviceBuffer::from_slice(&k8)?, DeviceBuffer::from_slice(&v8)?);
    let (qf_d, kf_d, vf_d) = (DeviceBuffer::from_slice(&qf)?, DeviceBuffer::from_slice(&kf)?, DeviceBuffer::from_slice(&vf)?);
    let mut out_d = DeviceBuffer::from_slice(&vec![bf16::ZERO; q8.len()])?;
    let per_head = |f| Descale::Device { factors: DeviceArray::new(f), per_batch: false };
    let params = AttentionParams::builder()
        .batch(batch)
        .seqlen_q(seqlen)
        .seqlen_k(seqlen)
        .heads_q(heads)
        .heads_kv(heads_kv)
        .head_dim(d)
        .causal(true)
        .q_descale(per_head(&qf_d))
        .kv_descale(per_head(&kf_d), per_head(&vf_d))
        .build()?;
    // Q, K and V of type E4m3, the output bf16: the FP8 wgmma kernels.
    gpu.attention_forward(&stream, &params, &q_d, &k_d, &v_d, &mut out_d, None)?;
    stream.synchronize()?;
    let mut out = vec![bf16::ZERO; q8.len()];
    out_d.copy_to(&mut out[..])?;

    // The reference runs on the dequantized inputs; the kernels also round P to E4M3 for the
    // FP8 `P V`, which it does not.
    let deq = |x: &[E4m3], f: &[f32], h: usize| x.iter().enumerate().map(|(i, b)| b.to_f32() * f[(i / d) % h / (h / heads_kv)]).collect::<Vec<f32>>();
    let inputs = RefInputs { q: &deq(&q8, &qf, heads), k: &deq(&k8, &kf, heads_kv), v: &deq(&v8, &vf, heads_kv) };
    let (reference, _) = reference_forward(&Problem::from(&params), &inputs);
    let err = out.iter().zip(&reference).map(|(o, r)| (o.to_f32() as f64 - r).abs()).fold(0.0, |m, e| if e.is_nan() { f64::INFINITY } else { m.max(e) });
    let tolerance = 8e-2;
    if err > tolerance {
        eprintln!("error: max abs error {err:.3e} against the CPU reference exceeds {tolerance:.0e}");
        std::process::exit(1);
    }
    println!("matches the CPU f64 reference on the dequantized inputs ({group} query heads per KV head): max abs error {err:.3e} (tolerance {tolerance:.0e})");
    Ok(())
}
