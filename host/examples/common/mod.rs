//! What every example shares: random inputs, and the comparison with the CPU reference.
use flashrs::reference::{RefInputs, reference_forward};
use flashrs::{AttentionParams, Element, Gpu};
use rand::Rng;

/// Opens the GPU or exits with the reason (a clear failure without a GPU, never a panic).
pub fn open_gpu() -> Gpu {
    match Gpu::new(0) {
        Ok(gpu) => gpu,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}

/// `n` standard-normal values rounded to `T`.
pub fn random<T: Element>(n: usize) -> Vec<T> {
    let mut rng = rand::rng();
    (0..n).map(|_| T::from_f32(rng.sample(rand_distr::StandardNormal))).collect()
}

/// Checks `out` (contiguous `[batch, seqlen_q, heads_q, head_dim]`) against the f64
/// reference; exits non-zero on a mismatch.
pub fn check_against_reference<T: Element>(p: &AttentionParams, q: &[T], k: &[T], v: &[T], out: &[T], tolerance: f64) {
    let f = |x: &[T]| x.iter().map(|v| v.to_f32()).collect::<Vec<f32>>();
    let (qf, kf, vf) = (f(q), f(k), f(v));
    let (reference, _) = reference_forward(p, &RefInputs { q: &qf, k: &kf, v: &vf });
    let err = out.iter().zip(&reference).map(|(o, r)| (o.to_f32() as f64 - r).abs()).fold(0.0, f64::max);
    if !(err <= tolerance) {
        eprintln!("error: max abs error {err:.3e} against the CPU reference exceeds {tolerance:.0e}");
        std::process::exit(1);
    }
    println!("matches the CPU f64 reference: max abs error {err:.3e} (tolerance {tolerance:.0e})");
}
