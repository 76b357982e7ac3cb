//! Decode against an FP8 KV cache: bf16 queries, K and V stored as E4M3 bytes with one
//! dequantization factor per KV head (as a serving engine quantizes its cache), 32 query heads
//! sharing 8 KV heads: `cargo run --release --example fp8_kv_cache`.
mod common;

use cust::memory::{CopyDestination, DeviceBuffer};
use cust::stream::{Stream, StreamFlags};
use flashrs::{AttentionParams, Descale, DeviceArray, E4m3};
use flashrs_reference::{Problem, RefInputs, reference_forward};
use half::bf16;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gpu = common::open_gpu();
    let (batch, keys, heads_kv, d) = (4, 4096, 8, 128);
    // Each KV head's values scaled into E4M3's range by its own factor (its largest magnitude
    // over 448), then rounded: the stored bytes times the factor are K and V.
    let quantize = |x: &[f32]| -> (Vec<E4m3>, Vec<f32>) {
        let mut factors = vec![0f32; heads_kv];
        for (i, v) in x.iter().enumerate() {
            let h = (i / d) % heads_kv;
            factors[h] = factors[h].max(v.abs() / 448.0);
        }
        (x.iter().enumerate().map(|(i, v)| E4m3::from_f32(v / factors[(i / d) % heads_kv])).collect(), factors)
    };
    let (k, v): (Vec<f32>, Vec<f32>) = (common::random::<bf16>(batch * keys * heads_kv * d).iter().map(|x| x.to_f32()).collect(), common::random::<bf16>(batch * keys * heads_kv * d).iter().map(|x| x.to_f32()).collect());
    let ((k8, kf), (v8, vf)) = (quantize(&k), quantize(&v));
    let q = common::random::<bf16>(batch * 32 * d);

    let stream = Stream::new(StreamFlags::NON_BLOCKING, None)?;
    let (q_d, k_d, v_d) = (DeviceBuffer::from_slice(&q)?, DeviceBuffer::from_slice(&k8)?, DeviceBuffer::from_slice(&v8)?);
    let (kf_d, vf_d) = (DeviceBuffer::from_slice(&kf)?, DeviceBuffer::from_slice(&vf)?);
    let mut out_d = DeviceBuffer::from_slice(&vec![bf16::ZERO; q.len()])?;
    let params = AttentionParams::builder()
        .batch(batch)
        .seqlen_q(1)
        .seqlen_k(keys)
        .heads_q(32)
        .heads_kv(heads_kv)
        .head_dim(d)
        .kv_descale(Descale::Device { factors: DeviceArray::new(&kf_d), per_batch: false }, Descale::Device { factors: DeviceArray::new(&vf_d), per_batch: false })
        .build()?;
    // K and V of type E4m3: the FP8 kernels, which widen them to bf16 on the way to the
    // tensor cores.
    gpu.attention_forward(&stream, &params, &q_d, &k_d, &v_d, &mut out_d, None)?;
    stream.synchronize()?;
    let mut out = vec![bf16::ZERO; q.len()];
    out_d.copy_to(&mut out[..])?;

    // The reference runs on the dequantized cache, exactly what the kernel computes with.
    let deq = |x: &[E4m3], f: &[f32]| x.iter().enumerate().map(|(i, b)| b.to_f32() * f[(i / d) % heads_kv]).collect::<Vec<f32>>();
    let qf: Vec<f32> = q.iter().map(|x| x.to_f32()).collect();
    let (reference, _) = reference_forward(&Problem::from(&params), &RefInputs { q: &qf, k: &deq(&k8, &kf), v: &deq(&v8, &vf) });
    let err = out.iter().zip(&reference).map(|(o, r)| (o.to_f32() as f64 - r).abs()).fold(0.0, |m, e| if e.is_nan() { f64::INFINITY } else { m.max(e) });
    if err > 1.5e-2 {
        eprintln!("error: max abs error {err:.3e} against the CPU reference exceeds 1.5e-2");
        std::process::exit(1);
    }
    println!("matches the CPU f64 reference on the dequantized cache: max abs error {err:.3e} (tolerance 1.5e-2)");
    Ok(())
}
