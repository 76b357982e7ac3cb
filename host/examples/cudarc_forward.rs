//! Attention in a cudarc program: cudarc's context, stream and slices straight into
//! `attention_forward`, no cust and no libcuda at link time:
//! `cargo run --release --example cudarc_forward --no-default-features --features cudarc`.
use cudarc::driver::CudaContext;
use flashrs::{AttentionParams, Gpu};
use flashrs_reference::{Problem, RefInputs, reference_forward};
use half2::bf16;
use rand::Rng;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // cudarc loads libcuda when it first needs it, and stops the process if there is none.
    // SAFETY: only probes whether the library loads.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        eprintln!("error: no CUDA driver library (libcuda.so) found");
        std::process::exit(1);
    }
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    // The Gpu shares cudarc's (primary) context.
    let gpu = Gpu::from_cudarc(&ctx)?;

    // Grouped-query causal prefill, bf16: 32 query heads over 8 KV heads.
    let params = AttentionParams::builder().batch(2).seqlen(1000).heads_q(32).heads_kv(8).head_dim(128).causal(true).build()?;
    let n = params.contiguous_lens()?;
    let mut rng = rand::rng();
    let mut random = |n: usize| (0..n).map(|_| bf16::from_f32(rng.sample(rand_distr::StandardNormal))).collect::<Vec<_>>();
    let (q, k, v) = (random(n.q), random(n.k), random(n.v));
    let (q_d, k_d, v_d) = (stream.clone_htod(&q)?, stream.clone_htod(&k)?, stream.clone_htod(&v)?);
    let mut out_d = stream.alloc_zeros::<bf16>(n.out)?;
    let mut lse_d = stream.alloc_zeros::<f32>(n.lse)?;

    // Element type from the slices; each access recorded for cudarc's stream synchronisation.
    gpu.attention_forward(&stream, &params, &q_d, &k_d, &v_d, &mut out_d, Some(&mut lse_d))?;
    let out = stream.clone_dtoh(&out_d)?;
    println!("ran on {} ({}), kernels from {}", gpu.name()?, gpu.compute_capability().0 * 10 + gpu.compute_capability().1, gpu.image().name);

    let f = |x: &[bf16]| x.iter().map(|v| v.to_f32()).collect::<Vec<f32>>();
    let (reference, _) = reference_forward(&Problem::from(&params), &RefInputs { q: &f(&q), k: &f(&k), v: &f(&v) });
    let err = out.iter().zip(&reference).map(|(o, r)| (o.to_f32() as f64 - r).abs()).fold(0.0, |m, e| if e.is_nan() { f64::INFINITY } else { m.max(e) });
    if err > 1.5e-2 {
        eprintln!("error: max abs error {err:.3e} against the CPU reference exceeds 1.5e-2");
        std::process::exit(1);
    }
    println!("matches the CPU f64 reference: max abs error {err:.3e} (tolerance 1.5e-2)");
    Ok(())
}
