//! What every example shares: random inputs, and the comparison with the CPU reference.
use flashrs::{AttentionParams, Element, Gpu, Pages};
use flashrs_reference::{Problem, RefInputs, Variants, reference_forward, reference_forward_with};
use rand::Rng;
use rand::seq::SliceRandom;

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

/// Random contiguous Q, K and V for `p`, and the output of `attention_forward` on them (the
/// steps `basic_forward` spells out): `(q, k, v, out)`, on the host.
// Each example compiles this module on its own; those with other layouts do not call this.
#[allow(dead_code)]
pub fn random_forward<T: Element + cust::memory::DeviceCopy>(gpu: &Gpu, p: &AttentionParams) -> Result<[Vec<T>; 4], Box<dyn std::error::Error>> {
    Ok(random_forward_lse(gpu, p)?.0)
}

/// `(q, k, v, out)` on the host, and the log-sum-exp the call wrote.
#[allow(dead_code)]
pub type WithLse<T> = ([Vec<T>; 4], Vec<f32>);

/// [`random_forward`], with the log-sum-exp the call writes too.
#[allow(dead_code)]
pub fn random_forward_lse<T: Element + cust::memory::DeviceCopy>(gpu: &Gpu, p: &AttentionParams) -> Result<WithLse<T>, Box<dyn std::error::Error>> {
    random_forward_on(gpu, None, p)
}

/// [`random_forward_lse`] on the shipped kernels, or on the caller's own (`custom`).
#[allow(dead_code)]
pub fn random_forward_on<T: Element + cust::memory::DeviceCopy>(
    gpu: &Gpu,
    custom: Option<&flashrs::CustomKernels>,
    p: &AttentionParams,
) -> Result<WithLse<T>, Box<dyn std::error::Error>> {
    use cust::memory::{CopyDestination, DeviceBuffer};
    use cust::stream::{Stream, StreamFlags};
    let n = p.contiguous_lens()?;
    let (q, k, v) = (random::<T>(n.q), random::<T>(n.k), random::<T>(n.v));
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None)?;
    let (q_d, k_d, v_d) = (DeviceBuffer::from_slice(&q)?, DeviceBuffer::from_slice(&k)?, DeviceBuffer::from_slice(&v)?);
    let mut out_d = DeviceBuffer::from_slice(&vec![T::default(); n.out])?;
    let mut lse_d = DeviceBuffer::<f32>::zeroed(n.lse)?;
    match custom {
        // SAFETY: the examples' own kernels read the user data within its length.
        Some(kernels) => unsafe { gpu.attention_forward_custom(kernels, &stream, p, &q_d, &k_d, &v_d, &mut out_d, Some(&mut lse_d))? },
        None => gpu.attention_forward(&stream, p, &q_d, &k_d, &v_d, &mut out_d, Some(&mut lse_d))?,
    }
    stream.synchronize()?;
    let mut out = vec![T::default(); n.out];
    out_d.copy_to(&mut out[..])?;
    Ok(([q, k, v, out], lse_d.as_host_vec()?))
}

/// Checks `out` (contiguous `[batch, seqlen_q, heads_q, head_dim_v]`) against the f64
/// reference; exits non-zero on a mismatch.
#[allow(dead_code)]
pub fn check_against_reference<T: Element>(p: &AttentionParams, q: &[T], k: &[T], v: &[T], out: &[T], tolerance: f64) {
    let f = |x: &[T]| x.iter().map(|v| v.to_f32()).collect::<Vec<f32>>();
    let (qf, kf, vf) = (f(q), f(k), f(v));
    let (reference, _) = reference_forward(&Problem::from(p), &RefInputs { q: &qf, k: &kf, v: &vf });
    let err = out.iter().zip(&reference).map(|(o, r)| (o.to_f32() as f64 - r).abs()).fold(0.0, |m, e| if e.is_nan() { f64::INFINITY } else { m.max(e) });
    if err > tolerance {
        eprintln!("error: max abs error {err:.3e} against the CPU reference exceeds {tolerance:.1e}");
        std::process::exit(1);
    }
    println!("matches the CPU f64 reference: max abs error {err:.3e} (tolerance {tolerance:.1e})");
}

/// Checks `out` and `lse` against the f64 reference with `variants` (output within
/// `tolerance`, log-sum-exp within 1e-3); exits non-zero on a mismatch, else returns the
/// errors as a line to print.
#[allow(dead_code)]
pub fn check_variants_against_reference<T: Element>(p: &AttentionParams, variants: &Variants, [q, k, v]: [&[T]; 3], out: &[T], lse: &[f32], tolerance: f64) -> String {
    let f = |x: &[T]| x.iter().map(|v| v.to_f32()).collect::<Vec<f32>>();
    let (qf, kf, vf) = (f(q), f(k), f(v));
    let (r_out, r_lse) = reference_forward_with(&Problem::from(p), variants, &RefInputs { q: &qf, k: &kf, v: &vf });
    let err = out.iter().zip(&r_out).map(|(o, r)| (o.to_f32() as f64 - r).abs()).fold(0.0, f64::max);
    let lse_err = lse.iter().zip(&r_lse).map(|(&g, &r)| (g as f64 - r).abs()).fold(0.0, f64::max);
    let errors = format!("max abs error {err:.3e} (output), {lse_err:.3e} (log-sum-exp)");
    if !(err <= tolerance && lse_err <= 1e-3) {
        eprintln!("error: {errors} against the CPU reference");
        std::process::exit(1);
    }
    errors
}

/// K and V caches and their block table, as a serving engine keeps them.
// Each example compiles this module on its own; those without a paged cache do not use it.
#[allow(dead_code)]
pub struct PagedCaches<T> {
    /// The page geometry.
    pub pages: Pages,
    /// K cache, `[num_pages, page_size, heads_kv, head_dim]`.
    pub k: Vec<T>,
    /// V cache, laid out like K.
    pub v: Vec<T>,
    /// i32 `[batch, pages_per_seq]` block table.
    pub table: Vec<i32>,
}

/// Scatters each sequence's contiguous `[len, heads_kv, head_dim]` keys and values (`row`
/// elements a row) page by page over shared caches of `page_size`-row pages, in random page
/// order.
#[allow(dead_code)]
pub fn page_sequences<T: Element>(seqs: &[(Vec<T>, Vec<T>)], row: usize, page_size: usize) -> PagedCaches<T> {
    let longest = seqs.iter().map(|(k, _)| k.len() / row).max().unwrap_or(0);
    let paged = Pages::for_batch(seqs.len(), longest, page_size).expect("a page count that fits");
    let mut free: Vec<usize> = (0..paged.num_pages).collect();
    free.shuffle(&mut rand::rng());
    let page_elems = page_size * row;
    let (mut k_cache, mut v_cache) = (vec![T::default(); paged.num_pages * page_elems], vec![T::default(); paged.num_pages * page_elems]);
    let mut table = vec![0i32; seqs.len() * paged.pages_per_seq];
    for (b, (k, v)) in seqs.iter().enumerate() {
        for (i, (kp, vp)) in k.chunks(page_elems).zip(v.chunks(page_elems)).enumerate() {
            let page = free.pop().unwrap();
            table[b * paged.pages_per_seq + i] = page as i32;
            k_cache[page * page_elems..][..kp.len()].copy_from_slice(kp);
            v_cache[page * page_elems..][..vp.len()].copy_from_slice(vp);
        }
    }
    PagedCaches { pages: paged, k: k_cache, v: v_cache, table }
}
