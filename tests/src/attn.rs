//! Running one forward attention case on the GPU and comparing it with the CPU reference.
use std::error::Error;

use cust::memory::DeviceBuffer;
use cust::stream::{Stream, StreamFlags};
use flashrs::{AttentionParams, Buffers, CustomKernels, DType, Element, Gpu, KernelChoice, Strides};
use flashrs_reference::{Problem, RefInputs, reference_forward_with};
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, StandardNormal};

use crate::mods::HostMods;
use crate::{CustElement, buffer_of, to_host};

/// Errors of one case against the reference.
#[derive(Debug)]
pub struct CaseErrors {
    /// Max |out - ref| over all elements (NaN if any output is NaN or unwritten).
    /// Max |out - ref| beyond half a unit in the last place of `ref` in the output type: the
    /// rounding of the stored result itself, which no kernel can avoid (bf16 outputs of
    /// magnitude 4 to 8 are 0.0156 apart, more than the 1.5e-2 bar).
    pub out: f64,
    /// Max |lse - ref| over rows that see a key.
    pub lse: f64,
    /// Rows whose reference lse is -inf but the GPU's is not (or the reverse).
    pub lse_inf_mismatch: usize,
    /// The seed of the inputs, to reproduce a failure.
    pub seed: u64,
}

impl CaseErrors {
    /// No error yet, for inputs drawn from `seed`.
    pub fn new(seed: u64) -> Self {
        CaseErrors { out: 0.0, lse: 0.0, lse_inf_mismatch: 0, seed }
    }

    /// Folds one output element (`got` from the GPU, `want` from the reference) into
    /// [`CaseErrors::out`]. NaN on either side makes it NaN for good (`f64::max` would
    /// silently drop it).
    pub fn add_out(&mut self, dtype: DType, got: f64, want: f64) {
        let err = if got.is_nan() || want.is_nan() { f64::NAN } else { ((got - want).abs() - half_ulp(dtype, want)).max(0.0) };
        self.out = if err.is_nan() || self.out.is_nan() { f64::NAN } else { self.out.max(err) };
    }

    /// Folds one row's log-sum-exp into [`CaseErrors::lse`], or, where either side is `-inf`,
    /// into [`CaseErrors::lse_inf_mismatch`].
    pub fn add_lse(&mut self, got: f32, want: f64) {
        if want == f64::NEG_INFINITY || got == f32::NEG_INFINITY {
            self.lse_inf_mismatch += (want != got as f64) as usize;
        } else {
            let err = (got as f64 - want).abs();
            self.lse = if err.is_nan() || self.lse.is_nan() { f64::NAN } else { self.lse.max(err) };
        }
    }
}

/// Tolerance on the output for a dtype (the bar: 2e-3 f16, 1.5e-2 bf16).
pub fn out_tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 2e-3,
        DType::Bf16 => 1.5e-2,
        _ => unreachable!("no tolerance for {dtype:?}"),
    }
}

/// Half a unit in the last place of `x` rounded to `dtype` (normal range; subnormals share the
/// smallest normal's spacing).
pub fn half_ulp(dtype: DType, x: f64) -> f64 {
    let (mantissa_bits, min_exp) = match dtype {
        DType::F16 => (10, -14),
        DType::Bf16 => (7, -126),
        _ => unreachable!("no format for {dtype:?}"),
    };
    let exp = if x == 0.0 { min_exp } else { (x.abs().log2().floor() as i32).max(min_exp) };
    2f64.powi(exp - mantissa_bits) / 2.0
}

/// Tolerance on the log-sum-exp.
pub const LSE_TOLERANCE: f64 = 1e-3;

/// Scatters a contiguous `[b, s, h, d]` tensor into a buffer laid out with `strides`.
pub fn scatter<T: Copy + Default>(src: &[T], dims: [usize; 4], strides: Strides, len: usize) -> Vec<T> {
    let mut dst = vec![T::default(); len];
    let [nb, ns, nh, nd] = dims;
    for b in 0..nb {
        for s in 0..ns {
            for h in 0..nh {
                let from = ((b * ns + s) * nh + h) * nd;
                let to = b as i64 * strides.batch + s as i64 * strides.row + h as i64 * strides.head;
                dst[to as usize..to as usize + nd].copy_from_slice(&src[from..from + nd]);
            }
        }
    }
    dst
}

/// Gathers a strided tensor back into contiguous `[b, s, h, d]`.
pub fn gather<T: Copy>(src: &[T], dims: [usize; 4], strides: Strides) -> Vec<T> {
    let [nb, ns, nh, nd] = dims;
    let mut out = Vec::with_capacity(nb * ns * nh * nd);
    for b in 0..nb {
        for s in 0..ns {
            for h in 0..nh {
                let at = (b as i64 * strides.batch + s as i64 * strides.row + h as i64 * strides.head) as usize;
                out.extend_from_slice(&src[at..at + nd]);
            }
        }
    }
    out
}

/// `n` standard-normal values rounded to `T`.
pub fn random_tensor<T: Element>(rng: &mut StdRng, n: usize) -> Vec<T> {
    (0..n).map(|_| T::from_f32(StandardNormal.sample(rng))).collect()
}

/// The result of a test's own launch: the library's errors and cust's alike.
pub type LaunchResult = Result<(), Box<dyn Error>>;

/// Queues one case's kernel on a stream, given the case's buffers: lets a test launch a plan
/// of its choosing instead of [`Gpu::attention_forward`]'s.
pub type Launcher<'a> = &'a dyn Fn(&Stream, &Buffers) -> LaunchResult;

/// Runs `p` on the GPU with fresh random normal inputs (scaled by `input_scale`) and returns
/// its errors against the f64 reference.
pub fn run_case<T: CustElement>(gpu: &Gpu, p: &AttentionParams, input_scale: f32) -> CaseErrors {
    run_case_with::<T>(gpu, p, input_scale, None)
}

/// [`run_case`], launching through `launch` when given.
pub fn run_case_with<T: CustElement>(gpu: &Gpu, p: &AttentionParams, input_scale: f32, launch: Option<Launcher>) -> CaseErrors {
    run_case_mods::<T>(gpu, p, &HostMods::default(), input_scale, launch, None)
}

/// [`run_case_with`] for `p` with the modifications `mods` (`p` has none: they are added here,
/// their arrays uploaded), against the reference with the same ones.
pub fn run_case_mods<T: CustElement>(gpu: &Gpu, p: &AttentionParams, mods: &HostMods, input_scale: f32, launch: Option<Launcher>, custom: Option<&CustomKernels>) -> CaseErrors {
    let mod_bufs = mods.upload();
    let with_mods = mods.apply(p.to_builder(), &mod_bufs).build().unwrap();
    let p = &with_mods;
    let seed = crate::case_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let (d, dv) = (p.head_dim, p.head_dim_v());
    let dq = [p.batch, p.seqlen_q, p.heads_q, d];
    let dk = [p.batch, p.seqlen_k, p.heads_kv, d];
    let (d_v, d_o) = ([p.batch, p.seqlen_k, p.heads_kv, dv], [p.batch, p.seqlen_q, p.heads_q, dv]);
    let [qs, ks, vs, os] = p.tensor_strides().expect("the case's strides");
    let scale = |v: Vec<T>| v.into_iter().map(|x| T::from_f32(x.to_f32() * input_scale)).collect::<Vec<T>>();
    let q = scale(random_tensor::<T>(&mut rng, dq.iter().product()));
    let k = scale(random_tensor::<T>(&mut rng, dk.iter().product()));
    let v = scale(random_tensor::<T>(&mut rng, d_v.iter().product()));

    let upload = |x: &[T], dims, s: Strides| DeviceBuffer::from_slice(&scatter(x, dims, s, s.extent(dims).unwrap().max(1))).unwrap();
    let (q_d, k_d, v_d) = (upload(&q, dq, qs), upload(&k, dk, ks), upload(&v, d_v, vs));
    // Poison: NaN everywhere, so an element the kernel fails to write cannot pass.
    let nan = T::from_f32(f32::NAN);
    let mut o_d = DeviceBuffer::from_slice(&vec![nan; os.extent(d_o).unwrap().max(1)]).unwrap();
    let n_lse = p.batch * p.heads_q * p.seqlen_q;
    let mut lse_d = DeviceBuffer::from_slice(&vec![f32::NAN; n_lse.max(1)]).unwrap();

    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    match launch {
        // SAFETY: the tests' custom kernels read their user data within its length.
        None => match custom {
            Some(kernels) => unsafe { gpu.attention_forward_custom(kernels, &stream, p, &q_d, &k_d, &v_d, &mut o_d, Some(&mut lse_d)) }.expect("launch failed"),
            None => gpu.attention_forward(&stream, p, &q_d, &k_d, &v_d, &mut o_d, Some(&mut lse_d)).expect("launch failed"),
        },
        Some(launch) => {
            let bufs = Buffers::new(T::DTYPE, buffer_of(&q_d), buffer_of(&k_d), buffer_of(&v_d), buffer_of(&o_d)).lse(buffer_of(&lse_d));
            launch(&stream, &bufs).expect("launch failed")
        }
    }
    stream.synchronize().expect("kernel failed");
    let (o_h, lse_h) = (to_host(&o_d), to_host(&lse_d));
    let out = gather(&o_h, d_o, os);

    let f = |x: &[T]| x.iter().map(|v| v.to_f32()).collect::<Vec<f32>>();
    let (qf, kf, vf) = (f(&q), f(&k), f(&v));
    let ref_mods = mods.reference(p.heads_q, None, p.seqlen_k as i64 - p.seqlen_q as i64);
    let (r_out, r_lse) = reference_forward_with(&Problem::from(p), &ref_mods.variants(), &RefInputs { q: &qf, k: &kf, v: &vf });
    let mut e = CaseErrors::new(seed);
    for (g, &r) in out.iter().zip(&r_out) {
        e.add_out(T::DTYPE, g.to_f32() as f64, r);
    }
    for (&g, &r) in lse_h[..n_lse].iter().zip(&r_lse) {
        e.add_lse(g, r);
    }
    e
}

/// Runs `p` on buffers of `dtype`.
pub fn run_dyn(gpu: &Gpu, p: &AttentionParams, dtype: DType, input_scale: f32) -> CaseErrors {
    run_dyn_with(gpu, p, dtype, input_scale, None)
}

/// [`run_dyn`], launching through `launch` when given.
fn run_dyn_with(gpu: &Gpu, p: &AttentionParams, dtype: DType, input_scale: f32, launch: Option<Launcher>) -> CaseErrors {
    run_dyn_mods(gpu, p, &HostMods::default(), dtype, input_scale, launch, None)
}

/// [`run_case_mods`] on buffers of `dtype`.
fn run_dyn_mods(gpu: &Gpu, p: &AttentionParams, mods: &HostMods, dtype: DType, input_scale: f32, launch: Option<Launcher>, custom: Option<&CustomKernels>) -> CaseErrors {
    match dtype {
        DType::F16 => run_case_mods::<half::f16>(gpu, p, mods, input_scale, launch, custom),
        DType::Bf16 => run_case_mods::<half::bf16>(gpu, p, mods, input_scale, launch, custom),
        _ => unreachable!("no kernels for {dtype:?}"),
    }
}

/// Runs `p` on buffers of `dtype` and asserts the tolerances, printing one summary
/// line.
pub fn check(gpu: &Gpu, p: &AttentionParams, dtype: DType) {
    let e = run_dyn(gpu, p, dtype, 1.0);
    let tol = out_tolerance(dtype);
    println!(
        "{dtype:?} b{} sq{} sk{} hq{} hkv{} d{}/{} causal={} kernel={:?}: out err {:.2e} (tol {tol:.0e}), lse err {:.2e}",
        p.batch, p.seqlen_q, p.seqlen_k, p.heads_q, p.heads_kv, p.head_dim, p.head_dim_v(), p.causal, p.kernel, e.out, e.lse
    );
    assert!(e.out <= tol, "output error {} > {tol} for {dtype:?} {p:?} (seed {})", e.out, e.seed);
    assert!(e.lse <= LSE_TOLERANCE, "lse error {} for {dtype:?} {p:?} (seed {})", e.lse, e.seed);
    assert_eq!(e.lse_inf_mismatch, 0, "rows with/without keys disagree for {dtype:?} {p:?} (seed {})", e.seed);
}

/// Runs every case, a call and the element type of its buffers (each like [`check`]), printing
/// one line per case with the kernel path, and panics at the end listing every case out of
/// tolerance: one broken shape does not hide how the others fare. A launch or kernel failure
/// still panics at once (the context is lost).
pub fn check_many(gpu: &Gpu, cases: &[(AttentionParams, DType)]) {
    check_many_with(gpu, cases, None)
}

/// [`check_many`], launching each case through `launch` (given the case) when given.
pub fn check_many_with(gpu: &Gpu, cases: &[(AttentionParams, DType)], launch: Option<&dyn Fn(&AttentionParams, &Stream, &Buffers) -> LaunchResult>) {
    let mut failures = Vec::new();
    for (p, dtype) in cases {
        let e = match launch {
            None => run_dyn(gpu, p, *dtype, 1.0),
            Some(f) => run_dyn_with(gpu, p, *dtype, 1.0, Some(&|stream: &Stream, bufs: &Buffers| f(p, stream, bufs))),
        };
        report_case(&mut failures, p, *dtype, "", &e);
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
}

/// [`check_many`] for cases with attention modifications (each case's call has none: they are
/// added from its [`HostMods`]).
pub fn check_mods_many(gpu: &Gpu, cases: &[(AttentionParams, DType, HostMods)]) {
    check_mods_many_on(gpu, None, cases)
}

/// [`check_mods_many`] on the caller's own kernels (`custom`, [`flashrs::custom`]) when given.
pub fn check_mods_many_on(gpu: &Gpu, custom: Option<&CustomKernels>, cases: &[(AttentionParams, DType, HostMods)]) {
    let mut failures = Vec::new();
    for (p, dtype, mods) in cases {
        let e = run_dyn_mods(gpu, p, mods, *dtype, 1.0, None, custom);
        report_case(&mut failures, p, *dtype, &format!(" [{}]", mods.label()), &e);
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
}

/// Prints one case's line (the call, `what` else it computes, its errors against the
/// tolerances) and adds it to `failures` when out of tolerance.
fn report_case(failures: &mut Vec<String>, p: &AttentionParams, dtype: DType, what: &str, e: &CaseErrors) {
    let tol = out_tolerance(dtype);
    let ok = e.out <= tol && e.lse <= LSE_TOLERANCE && e.lse_inf_mismatch == 0;
    let line = format!(
        "{} {dtype:?} b{} sq{} sk{} hq{} hkv{} d{}/{} causal={} path={}{what}: out err {:.2e} (tol {tol:.0e}), lse err {:.2e}, \
         lse -inf mismatches {} (seed {})",
        if ok { "ok  " } else { "FAIL" },
        p.batch, p.seqlen_q, p.seqlen_k, p.heads_q, p.heads_kv, p.head_dim, p.head_dim_v(), p.causal, kernel_label(&p.kernel),
        e.out, e.lse, e.lse_inf_mismatch, e.seed
    );
    println!("{line}");
    if !ok {
        failures.push(line);
    }
}

/// The kernel choice in a case line: the path, and a forced configuration.
pub fn kernel_label(k: &KernelChoice) -> String {
    match k {
        KernelChoice::MmaSync { config: Some(c) } => format!("mma.sync {c:?}"),
        KernelChoice::Wgmma { config: Some(c), persistent } => format!("wgmma {c:?} persistent {persistent:?}"),
        _ => k.path().name().into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_ulp_matches_the_formats_spacing() {
        assert_eq!(half_ulp(DType::Bf16, 5.0), 2f64.powi(-6));
        assert_eq!(half_ulp(DType::Bf16, 1.0), 2f64.powi(-8));
        assert_eq!(half_ulp(DType::F16, 1.5), 2f64.powi(-11));
        assert_eq!(half_ulp(DType::F16, 0.0), 2f64.powi(-25));
        // One step of the format from 5.0 is twice the half-ulp.
        let next = half::bf16::from_bits(half::bf16::from_f32(5.0).to_bits() + 1).to_f32() as f64;
        assert_eq!(next - 5.0, 2.0 * half_ulp(DType::Bf16, 5.0));
    }
}
