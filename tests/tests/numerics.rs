//! Numerics on the GPU against the f64 CPU reference: huge logits, NaN and inf inputs, rows
//! that see no key, a single key, and 128k-long sequences (sampled rows). Skips without a GPU.
//!
//! # Tolerances
//!
//! The online softmax is exact up to rounding, so the errors that remain are those of f32
//! arithmetic on the scores and of rounding P and the output to the element type:
//!
//! - Output: the issue's bar ([`out_tolerance`]: 2e-3 f16, 1.5e-2 bf16), which covers rounding
//!   P and the output to 16 bits for values of magnitude <= 1 (the tests below draw V from
//!   [-1, 1] wherever logits are large, so outputs stay there), **plus** a term for the
//!   rounding of the scores themselves, which grows with their magnitude. A score
//!   `s = scale * sum_i q_i k_i` summed in f32 is off by at most `delta = (d + 4) * 2^-23 *
//!   scale * sum_i |q_i k_i|` (the dot product's `d * u` bound with tensor cores allowed to
//!   truncate, so `u = 2^-23`, plus the roundings of `s * scale * log2 e` before `ex2`). Every
//!   weight `p_j` then moves by a factor within `exp(+-2 delta)`, and since the weights sum to 1,
//!   `|out - ref| <= 2 (exp(2 delta) - 1) (1 - p_top) max|v|`, `p_top` being the largest weight:
//!   a row dominated by one key must match to the base bar however large its logits; a row
//!   whose weight is shared between near-equal logits of size 1e4 may be off by ~1e-1 (an f32
//!   score of 1e4 is only good to ~1e-3 absolute, and `d` of them add up).
//! - Log-sum-exp: 1e-3 absolute ([`LSE_TOLERANCE`]) plus `delta` plus `2^-21 |lse|` (a few
//!   f32 ulps of the value itself: at 1e4 an ulp is 1e-3).
//!
//! Where scores are exact by construction (integers, see
//! `huge_logits_exact_scores_at_large_offsets`), the plain base bars apply.
//!
//! # NaN and inf (the documented behaviour, tested exactly)
//!
//! - NaN in K row `j` (any column): every query row that sees key `j` (every row; under causal
//!   masking those at or below the diagonal through `j`) gets NaN in every column and a NaN
//!   log-sum-exp; rows that do not see `j` are unaffected (masked scores are replaced by
//!   `-inf`, NaN included). Same NaN pattern as the f64 reference.
//! - NaN in Q row `i`: that row (all columns, and its lse) is NaN if it sees any key; a row
//!   that sees no key is 0 with lse `-inf`. Other rows are unaffected.
//! - +inf in K (or Q) making a score `+inf`: the rows that see it are NaN (`inf - inf`), like
//!   the reference; a score of `-inf` acts as a masked key (weight 0). Finite f16 inputs can
//!   never overflow a score (|s| <= 256 * 65504^2 ~ 1.1e12 < f32::MAX); bf16 inputs can.
//! - NaN in V row `j`, column `c`: rows that see `j` get NaN in column `c` only (their lse and
//!   other columns are unaffected). Rows that do not see `j` may also get NaN in column `c` when
//!   their query block loads `j`'s K/V tile (0 * NaN in the P V product, as in
//!   FlashAttention); rows whose query block never loads that tile are unaffected.
use std::time::Instant;

use cust::memory::{CopyDestination, DeviceBuffer};
use cust::stream::{Stream, StreamFlags};
use flashrs::tiles::CONFIGS;
use flashrs::{Arch, AttentionParams, BufferRef, Buffers, DType, Element, Gpu, Flavor, Kernel, KernelChoice, KernelPath, Target, Variant};
use flashrs_reference::{Problem, RefInputs, RefRow, reference_row};
use flashrs_tests::attn::{LSE_TOLERANCE, out_tolerance};
use flashrs_tests::{CustElement, gpu_or_skip, params};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};

const U: f64 = 1.0 / (1u64 << 23) as f64;

fn normal<T: Element>(rng: &mut StdRng, n: usize, scale: f32) -> Vec<T> {
    (0..n).map(|_| T::from_f32(scale * <StandardNormal as Distribution<f32>>::sample(&StandardNormal, rng))).collect()
}

fn uniform<T: Element>(rng: &mut StdRng, n: usize) -> Vec<T> {
    (0..n).map(|_| T::from_f32(rng.random_range(-1.0..1.0))).collect()
}

fn widen<T: Element>(x: &[T]) -> Vec<f32> {
    x.iter().map(|v| v.to_f32()).collect()
}

/// Contiguous `[b, s, h, d]` inputs of a call, as the element type and widened.
struct Inputs<T> {
    q: Vec<T>,
    k: Vec<T>,
    v: Vec<T>,
}

impl<T: Element> Inputs<T> {
    fn dims(p: &AttentionParams) -> (usize, usize) {
        (p.batch * p.seqlen_q * p.heads_q * p.head_dim, p.batch * p.seqlen_k * p.heads_kv * p.head_dim)
    }
    fn normal(p: &AttentionParams, seed: u64, qk_scale: f32) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let (nq, nk) = Self::dims(p);
        Inputs { q: normal(&mut rng, nq, qk_scale), k: normal(&mut rng, nk, qk_scale), v: uniform(&mut rng, nk) }
    }
    fn qi(p: &AttentionParams, b: usize, i: usize, h: usize, c: usize) -> usize {
        ((b * p.seqlen_q + i) * p.heads_q + h) * p.head_dim + c
    }
    fn ki(p: &AttentionParams, b: usize, j: usize, h: usize, c: usize) -> usize {
        ((b * p.seqlen_k + j) * p.heads_kv + h) * p.head_dim + c
    }
}

/// One GPU run: the output (contiguous) and lse, poisoned beforehand with -7777 so that an
/// unwritten element cannot pass (NaN is a legitimate result here).
struct Run<T> {
    out: Vec<T>,
    lse: Vec<f32>,
    ms: f64,
}

fn run<T: CustElement>(gpu: &Gpu, p: &AttentionParams, x: &Inputs<T>) -> Run<T> {
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    let (q, k, v) = (DeviceBuffer::from_slice(&x.q).unwrap(), DeviceBuffer::from_slice(&x.k).unwrap(), DeviceBuffer::from_slice(&x.v).unwrap());
    let poison = T::from_f32(-7777.0);
    let mut o = DeviceBuffer::from_slice(&vec![poison; x.q.len()]).unwrap();
    let n_lse = p.batch * p.heads_q * p.seqlen_q;
    let mut lse = DeviceBuffer::from_slice(&vec![-7777.0f32; n_lse]).unwrap();
    stream.synchronize().unwrap();
    let t = Instant::now();
    gpu.attention_forward(&stream, p, &q, &k, &v, &mut o, Some(&mut lse)).expect("launch failed");
    stream.synchronize().expect("kernel failed");
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let mut out = vec![T::default(); x.q.len()];
    o.copy_to(&mut out[..]).unwrap();
    let mut lse_h = vec![0f32; n_lse];
    lse.copy_to(&mut lse_h[..]).unwrap();
    Run { out, lse: lse_h, ms }
}

/// Where a case runs: the GPU, or a CPU emulation of the kernel (to test this harness
/// without a GPU; see `harness_on_cpu_emulation_of_the_kernel`).
enum Exec<'a> {
    Gpu(&'a Gpu),
    Cpu,
}

impl Exec<'_> {
    fn run<T: CustElement>(&self, p: &AttentionParams, x: &Inputs<T>) -> Run<T> {
        match self {
            Exec::Gpu(gpu) => run(gpu, p, x),
            Exec::Cpu => emulate(p, x),
        }
    }
    /// The kernel paths to run each case on.
    fn paths(&self) -> Vec<KernelPath> {
        match self {
            Exec::Gpu(gpu) if gpu.arch() == Arch::Sm90a => vec![KernelPath::Auto, KernelPath::MmaSync],
            _ => vec![KernelPath::Auto],
        }
    }
    /// The kernel that runs `p` on `dtype` tensors: the GPU's, or the unsplit `mma.sync` one
    /// the CPU emulates.
    fn kernel(&self, p: &AttentionParams, dtype: DType) -> Kernel {
        match self {
            Exec::Gpu(gpu) => plan_for(p, dtype, &gpu.target()).kernel,
            // The mma.sync kernel, unsplit (on an H100, where every configuration fits).
            Exec::Cpu => {
                let unsplit = p.to_builder().num_splits(1);
                let unsplit = if p.kernel == KernelChoice::Auto { unsplit.path(KernelPath::MmaSync) } else { unsplit };
                plan_for(&unsplit.build().unwrap(), dtype, &Target::H100).kernel
            }
        }
    }
    /// The kernel that runs `p` on `dtype` tensors, for the summaries.
    fn label(&self, p: &AttentionParams, dtype: DType) -> String {
        match self {
            Exec::Gpu(_) => format!("GPU {}", self.kernel(p, dtype)),
            Exec::Cpu => format!("CPU emulation of {}", self.kernel(p, dtype)),
        }
    }
    /// Tile geometry (query rows, key rows) of the kernel that runs `p` on `dtype` tensors.
    fn tiles(&self, p: &AttentionParams, dtype: DType) -> (usize, usize) {
        let k = self.kernel(p, dtype);
        (k.block_m(), k.block_n())
    }
}

/// The plan of a call on `dtype` tensors for `target`, with fake addresses (for its kernel and
/// tile geometry).
fn plan_for(p: &AttentionParams, dtype: DType, target: &Target) -> flashrs::LaunchPlan {
    let (q, k) = Inputs::<half::f16>::dims(p);
    let b = |ptr, len| BufferRef { ptr, len };
    let bufs = Buffers::new(dtype, b(1 << 40, q), b(2 << 40, k), b(3 << 40, k), b(4 << 40, q)).lse(b(5 << 40, q));
    p.plan(&bufs, target).expect("case does not plan")
}

/// The kernel's arithmetic on the CPU, row by row (kernels-gpu/src/fwd): a row of query block
/// `i / block_m` walks the K/V tiles its block loads; scores are f32 dot products (zero-filled
/// rows past seqlen_k), masked to -inf; the running max ignores NaN (`max.f32`) and a row with
/// max -inf subtracts 0; P = exp2(s * scale_log2 - max * scale_log2), summed in f32, rounded
/// to the element type for the P V product; the output is scaled by 1 / sum (0 for sum 0).
fn emulate<T: Element>(p: &AttentionParams, x: &Inputs<T>) -> Run<T> {
    let (bm, bn) = Exec::Cpu.tiles(p, T::DTYPE);
    let d = p.head_dim;
    let (sq, sk) = (p.seqlen_q as i64, p.seqlen_k as i64);
    let sl = p.scale() * std::f32::consts::LOG2_E;
    let group = p.heads_q / p.heads_kv;
    let (qf, kf, vf) = (widen(&x.q), widen(&x.k), widen(&x.v));
    let row = |(b, h, i): (usize, usize, usize)| -> (Vec<f32>, f32) {
        let m0 = (i / bm * bm) as i64;
        let keys = if p.causal { (m0 + bm as i64 + sk - sq).clamp(0, sk) } else { sk } as usize;
        let limit = if p.causal { sk.min(i as i64 + sk - sq + 1) } else { sk };
        let q = &qf[Inputs::<T>::qi(p, b, i, h, 0)..][..d];
        let (mut max, mut sum, mut o) = (f32::NEG_INFINITY, 0f32, vec![0f32; d]);
        for t in 0..keys.div_ceil(bn) {
            let cols = t * bn..(t + 1) * bn;
            let s: Vec<f32> = cols
                .clone()
                .map(|j| {
                    if j as i64 >= limit {
                        return f32::NEG_INFINITY;
                    }
                    let k = &kf[Inputs::<T>::ki(p, b, j, h / group, 0)..][..d];
                    q.iter().zip(k).fold(0f32, |acc, (a, b)| acc + a * b)
                })
                .collect();
            let m = s.iter().fold(max, |m, &v| m.max(v));
            let neg_base = if m == f32::NEG_INFINITY { 0.0 } else { -(m * sl) };
            let alpha = max.mul_add(sl, neg_base).exp2();
            max = m;
            let pr: Vec<f32> = s.iter().map(|&v| v.mul_add(sl, neg_base).exp2()).collect();
            sum = sum.mul_add(alpha, pr.iter().sum::<f32>());
            o.iter_mut().for_each(|v| *v *= alpha);
            for (j, &pj) in cols.zip(&pr) {
                let pj = T::from_f32(pj).to_f32();
                for (cc, oc) in o.iter_mut().enumerate() {
                    let v = if (j as i64) < sk { vf[Inputs::<T>::ki(p, b, j, h / group, cc)] } else { 0.0 };
                    *oc += pj * v;
                }
            }
        }
        let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
        o.iter_mut().for_each(|v| *v *= inv);
        let lse = if sum == 0.0 { f32::NEG_INFINITY } else { max.mul_add(sl, sum.log2()) * std::f32::consts::LN_2 };
        (o, lse)
    };
    let rows = all_rows(p);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = rows.len().div_ceil(threads).max(1);
    let done: Vec<Vec<(Vec<f32>, f32)>> = std::thread::scope(|s| {
        let hs: Vec<_> = rows.chunks(chunk).map(|part| s.spawn(|| part.iter().map(|&r| row(r)).collect::<Vec<_>>())).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut out = vec![T::default(); x.q.len()];
    let mut lse = vec![0f32; p.batch * p.heads_q * p.seqlen_q];
    for (&(b, h, i), (o, l)) in rows.iter().zip(done.into_iter().flatten()) {
        for (cc, v) in o.into_iter().enumerate() {
            out[Inputs::<T>::qi(p, b, i, h, cc)] = T::from_f32(v);
        }
        lse[(b * p.heads_q + h) * p.seqlen_q + i] = l;
    }
    Run { out, lse, ms: 0.0 }
}

/// Runs `f::<T>(ex, p, args...)` with `p` built from the builder `$p` and `T` the element type
/// `$dtype` names, once per kernel path the executor has: `Auto` (the wgmma kernel on sm_90a)
/// and, on sm_90a, also `MmaSync`.
macro_rules! each_path {
    ($ex:expr, $p:expr, $dtype:expr, $f:ident($($arg:expr),*)) => {
        for path in $ex.paths() {
            let p = &$p.clone().path(path).build().unwrap();
            match $dtype {
                DType::F16 => $f::<half::f16>($ex, p $(, $arg)*),
                DType::Bf16 => $f::<half::bf16>($ex, p $(, $arg)*),
                dtype => unreachable!("no kernels for {dtype:?}"),
            }
        }
    };
}

/// Tolerances (output, lse) of one row.
type Tol<'a> = dyn Fn(&RefRow, usize, usize, usize) -> (f64, f64) + 'a;

#[derive(Default, Debug)]
struct Stats {
    rows: usize,
    /// Worst |out - ref| and |lse - ref| over finite expected values.
    out_err: f64,
    lse_err: f64,
    /// Worst error / tolerance.
    ratio: f64,
    /// Elements (and lse) NaN as expected.
    nan_expected: usize,
    /// Elements NaN where the reference is finite, allowed by the case.
    nan_allowed: usize,
    /// Rows with no key: 0 and -inf exactly.
    empty_rows: usize,
    /// Rows equal to the reference rounded to the element type in every column.
    exact_rows: usize,
}

/// Compares rows `(b, h, i)` of a run with the reference, NaN pattern included: where the
/// reference is NaN the GPU must be NaN; where it is finite the GPU must be within tolerance,
/// or NaN if `nan_ok(b, h, i, c)`. Rows that see no key must be exactly 0 with lse -inf.
fn compare<T: Element>(
    p: &AttentionParams,
    x: &Inputs<T>,
    r: &Run<T>,
    rows: &[(usize, usize, usize)],
    tol: &Tol,
    nan_ok: &dyn Fn(usize, usize, usize, usize) -> bool,
) -> Result<Stats, String> {
    let f = RefInputs { q: &widen(&x.q), k: &widen(&x.k), v: &widen(&x.v) };
    compare_with(p, &f, r, rows, tol, nan_ok)
}

fn compare_with<T: Element>(
    p: &AttentionParams,
    f: &RefInputs,
    r: &Run<T>,
    rows: &[(usize, usize, usize)],
    tol: &Tol,
    nan_ok: &dyn Fn(usize, usize, usize, usize) -> bool,
) -> Result<Stats, String> {
    let mut st = Stats::default();
    let d = p.head_dim;
    let problem = Problem::from(p);
    for &(b, h, i) in rows {
        let want = reference_row(&problem, f, b, h, i);
        let (t_out, t_lse) = tol(&want, b, h, i);
        let at = |c: usize| r.out[((b * p.seqlen_q + i) * p.heads_q + h) * d + c].to_f32() as f64;
        let lse = r.lse[(b * p.heads_q + h) * p.seqlen_q + i] as f64;
        let here = format!("row (b {b}, h {h}, i {i})");
        st.rows += 1;
        if want.lse == f64::NEG_INFINITY {
            if lse != f64::NEG_INFINITY || (0..d).any(|c| at(c) != 0.0) {
                return Err(format!("{here} sees no key: lse {lse}, out {:?}, want 0 and -inf", (0..d.min(8)).map(at).collect::<Vec<_>>()));
            }
            st.empty_rows += 1;
            continue;
        }
        let mut exact = true;
        for c in 0..d {
            let (g, w) = (at(c), want.out[c]);
            if w.is_nan() {
                if !g.is_nan() {
                    return Err(format!("{here} col {c}: {g}, want NaN"));
                }
                st.nan_expected += 1;
            } else if g.is_nan() {
                if !nan_ok(b, h, i, c) {
                    return Err(format!("{here} col {c}: NaN, want {w}"));
                }
                st.nan_allowed += 1;
                exact = false;
            } else {
                let err = (g - w).abs();
                exact &= g == T::from_f32(w as f32).to_f32() as f64;
                if !(err <= t_out) {
                    return Err(format!("{here} col {c}: {g}, want {w} (err {err:.3e} > tol {t_out:.3e})"));
                }
                st.out_err = st.out_err.max(err);
                st.ratio = st.ratio.max(err / t_out);
            }
        }
        st.exact_rows += exact as usize;
        if want.lse.is_nan() {
            if !lse.is_nan() {
                return Err(format!("{here}: lse {lse}, want NaN"));
            }
            st.nan_expected += 1;
        } else {
            let err = (lse - want.lse).abs();
            if !(err <= t_lse) {
                return Err(format!("{here}: lse {lse}, want {} (err {err:.3e} > tol {t_lse:.3e})", want.lse));
            }
            st.lse_err = st.lse_err.max(err);
            st.ratio = st.ratio.max(err / t_lse);
        }
    }
    Ok(st)
}

fn all_rows(p: &AttentionParams) -> Vec<(usize, usize, usize)> {
    (0..p.batch).flat_map(|b| (0..p.heads_q).flat_map(move |h| (0..p.seqlen_q).map(move |i| (b, h, i)))).collect()
}

/// The base bars: the output tolerance and the lse tolerance plus a few ulps.
fn base_tol(dtype: DType) -> impl Fn(&RefRow, usize, usize, usize) -> (f64, f64) {
    move |r, _, _, _| (out_tolerance(dtype), LSE_TOLERANCE + r.lse.abs() / (1u64 << 21) as f64)
}

fn nan_never(_: usize, _: usize, _: usize, _: usize) -> bool {
    false
}

fn describe(p: &AttentionParams, dtype: DType) -> String {
    format!("{dtype:?} b{} sq{} sk{} hq{} hkv{} d{} causal={}", p.batch, p.seqlen_q, p.seqlen_k, p.heads_q, p.heads_kv, p.head_dim, p.causal)
}

fn unwrap_stats<T: Element>(p: &AttentionParams, what: &str, r: Result<Stats, String>) -> Stats {
    r.unwrap_or_else(|e| panic!("{what} {}: {e}", describe(p, T::DTYPE)))
}

// ------------------------------------------------------------------------------------------

/// Random inputs whose scaled logits reach ~1e4 in magnitude (a large softmax_scale, or large
/// Q and K): finite outputs matching the reference within the score-rounding tolerance.
fn huge_logits_random_inputs_on(ex: &Exec) {
    // (params, scale of Q and K entries)
    let cases = [
        (params(1, 200, 300, 2, 64).softmax_scale(300.0), DType::F16, 1.0),
        (params(1, 200, 300, 2, 64).softmax_scale(300.0).causal(true), DType::Bf16, 1.0),
        (params(1, 150, 333, 2, 128).causal(true), DType::F16, 40.0),
        (params(2, 130, 200, 2, 256).heads_kv(1), DType::Bf16, 40.0),
        (params(1, 100, 517, 4, 64).softmax_scale(250.0), DType::F16, 1.0),
    ];
    for (seed, (p, dtype, qk)) in cases.into_iter().enumerate() {
        each_path!(ex, p, dtype, huge_logits_case(qk, seed as u64));
    }
}

fn huge_logits_case<T: CustElement>(ex: &Exec, p: &AttentionParams, qk: f32, seed: u64) {
    let x = Inputs::<T>::normal(p, 1000 + seed, qk);
    let r = ex.run(p, &x);
    assert!(r.out.iter().all(|v| v.to_f32().is_finite()), "non-finite output for {}", describe(p, T::DTYPE));
    let f = RefInputs { q: &widen(&x.q), k: &widen(&x.k), v: &widen(&x.v) };
    let d = p.head_dim;
    let scale = p.scale() as f64;
    let (mut max_logit, mut shared_rows) = (0f64, 0usize);
    let tol = |want: &RefRow, b: usize, h: usize, i: usize| {
        let hk = h / (p.heads_q / p.heads_kv);
        let visible = if p.causal { (i + p.seqlen_k + 1).saturating_sub(p.seqlen_q) } else { p.seqlen_k }.min(p.seqlen_k);
        let qrow = &f.q[Inputs::<T>::qi(p, b, i, h, 0)..][..d];
        let (mut m, mut a, mut vmax) = (f64::NEG_INFINITY, 0f64, 0f64);
        for j in 0..visible {
            let krow = &f.k[Inputs::<T>::ki(p, b, j, hk, 0)..][..d];
            let s: f64 = scale * qrow.iter().zip(krow).map(|(&x, &y)| x as f64 * y as f64).sum::<f64>();
            m = m.max(s);
            a = a.max(scale.abs() * qrow.iter().zip(krow).map(|(&x, &y)| (x as f64 * y as f64).abs()).sum::<f64>());
            vmax = f.v[Inputs::<T>::ki(p, b, j, hk, 0)..][..d].iter().fold(vmax, |acc, &v| acc.max(v.abs() as f64));
        }
        let p_top = (m - want.lse).exp().min(1.0);
        let delta = (d as f64 + 4.0) * U * a;
        let out = out_tolerance(T::DTYPE) * vmax.max(1.0) + 2.0 * ((2.0 * delta).exp() - 1.0) * (1.0 - p_top) * vmax;
        let lse = LSE_TOLERANCE + delta + want.lse.abs() / (1u64 << 21) as f64;
        (out, lse)
    };
    // Largest |logit| and rows whose weight is shared (p_top < 0.999), for the summary.
    let problem = Problem::from(p);
    for (b, h, i) in all_rows(p) {
        let want = reference_row(&problem, &f, b, h, i);
        let hk = h / (p.heads_q / p.heads_kv);
        let qrow = &f.q[Inputs::<T>::qi(p, b, i, h, 0)..][..d];
        let visible = if p.causal { (i + p.seqlen_k + 1).saturating_sub(p.seqlen_q) } else { p.seqlen_k }.min(p.seqlen_k);
        let mut m = f64::NEG_INFINITY;
        for j in 0..visible {
            let krow = &f.k[Inputs::<T>::ki(p, b, j, hk, 0)..][..d];
            let s = scale * qrow.iter().zip(krow).map(|(&x, &y)| x as f64 * y as f64).sum::<f64>();
            max_logit = max_logit.max(s.abs());
            m = m.max(s);
        }
        shared_rows += ((m - want.lse).exp() < 0.999) as usize;
    }
    let st = unwrap_stats::<T>(p, "huge logits", compare_with(p, &f, &r, &all_rows(p), &tol, &nan_never));
    print!("[{}] ", ex.label(p, T::DTYPE));
    println!(
        "huge logits {} scale {} qk x{qk}: max |logit| {max_logit:.0}, {} rows ({shared_rows} with p_top < 0.999): \
         out err {:.2e}, lse err {:.2e}, worst err/tol {:.2}",
        describe(p, T::DTYPE),
        p.scale(),
        st.rows,
        st.out_err,
        st.lse_err,
        st.ratio
    );
    assert!(max_logit > 3e3, "logits too small to test anything ({max_logit})");
}

/// Scores of magnitude ~1e4 that are exact integers (q = +-1, k = 156 or 156 + t), shared
/// between 4 near-equal keys per group (weights e^0..e^-3): the large common offset must
/// cancel exactly, so the base bars apply. Over 11 K/V tiles, causal and not.
fn huge_logits_exact_scores_at_large_offsets_on(ex: &Exec) {
    for dtype in [DType::F16, DType::Bf16] {
        for causal in [false, true] {
            let p = params(1, 130, 700, 2, 64).heads_kv(1).softmax_scale(1.0).causal(causal);
            each_path!(ex, p, dtype, exact_offset_case());
        }
    }
}

fn exact_offset_case<T: CustElement>(ex: &Exec, p: &AttentionParams) {
    let mut x = Inputs::<T>::normal(p, 7, 1.0);
    let d = p.head_dim;
    for (n, q) in x.q.iter_mut().enumerate() {
        let row = n / (p.heads_q * d); // sequence position (b = 0)
        *q = T::from_f32(if row % 2 == 0 { 1.0 } else { -1.0 });
    }
    for (n, k) in x.k.iter_mut().enumerate() {
        let (j, c) = (n / (p.heads_kv * d), n % d);
        *k = T::from_f32(156.0 + if c == 0 { (j % 4) as f32 } else { 0.0 });
    }
    let r = ex.run(p, &x);
    let st = unwrap_stats::<T>(p, "exact huge logits", compare(p, &x, &r, &all_rows(p), &base_tol(T::DTYPE), &nan_never));
    print!("[{}] ", ex.label(p, T::DTYPE));
    println!(
        "huge exact logits +-(9984 + 0..3) {}: {} rows: out err {:.2e} (tol {:.0e}), lse err {:.2e}",
        describe(p, T::DTYPE),
        st.rows,
        st.out_err,
        out_tolerance(T::DTYPE),
        st.lse_err
    );
}

/// Logits sweeping from -1e4 to +1e4 along the keys (and back): the running max moves by
/// ~1e3 every tile, so the rescale factor underflows to 0, which must be harmless.
fn logits_sweeping_across_tiles_on(ex: &Exec) {
    for dtype in [DType::F16, DType::Bf16] {
        for rising in [true, false] {
            for causal in [false, true] {
                let p = params(1, 1000, 1000, 1, 64).softmax_scale(1.0).causal(causal);
                each_path!(ex, p, dtype, sweep_case(rising));
            }
        }
    }
}

fn sweep_case<T: CustElement>(ex: &Exec, p: &AttentionParams, rising: bool) {
    let mut x = Inputs::<T>::normal(p, 11, 1.0);
    x.q.iter_mut().for_each(|q| *q = T::from_f32(1.0));
    let (n, d) = (p.seqlen_k, p.head_dim);
    for (idx, k) in x.k.iter_mut().enumerate() {
        let j = idx / d;
        let t = j as f32 / (n - 1) as f32;
        let t = if rising { t } else { 1.0 - t };
        *k = T::from_f32(-156.0 + 312.0 * t); // logit 64 * k in [-9984, 9984]
    }
    let r = ex.run(p, &x);
    let st = unwrap_stats::<T>(p, "sweeping logits", compare(p, &x, &r, &all_rows(p), &base_tol(T::DTYPE), &nan_never));
    print!("[{}] ", ex.label(p, T::DTYPE));
    println!(
        "sweeping logits {} ({}): {} rows: out err {:.2e} (tol {:.0e}), lse err {:.2e}",
        describe(p, T::DTYPE),
        if rising { "rising" } else { "falling" },
        st.rows,
        st.out_err,
        out_tolerance(T::DTYPE),
        st.lse_err
    );
}

/// NaN in K, NaN in Q, and +-inf scores: the GPU's NaN pattern is exactly the reference's,
/// every other value within the base bars.
fn nan_and_inf_in_q_and_k_poison_exactly_the_rows_that_see_them_on(ex: &Exec) {
    let shapes = [
        (params(2, 300, 300, 4, 64).heads_kv(2).causal(true), DType::F16),
        (params(2, 100, 300, 4, 64).heads_kv(2), DType::F16),
        (params(2, 300, 200, 4, 64).heads_kv(2).causal(true), DType::F16),
        (params(2, 300, 300, 4, 128).heads_kv(2).causal(true), DType::Bf16),
    ];
    for (p, dtype) in &shapes {
        each_path!(ex, p, *dtype, poison_cases());
    }
}

fn poison_cases<T: CustElement>(ex: &Exec, p: &AttentionParams) {
    let base = Inputs::<T>::normal(p, 21, 1.0);
    type Edit<T> = Box<dyn Fn(&AttentionParams, &mut Inputs<T>)>;
    let cases: Vec<(&str, Edit<T>)> = vec![
        ("NaN in K (b1, key 157, kv head 1, col 5)", Box::new(|p, x| x.k[Inputs::<T>::ki(p, 1, 157.min(p.seqlen_k - 1), 1, 5)] = T::from_f32(f32::NAN))),
        ("NaN in Q (b0, row 70, head 1, col 3)", Box::new(|p, x| x.q[Inputs::<T>::qi(p, 0, 70, 1, 3)] = T::from_f32(f32::NAN))),
        (
            "+inf in K (b0, key 100, kv head 0, col 0), Q col 0 = +1 / -1 on even / odd rows",
            Box::new(|p, x| {
                x.k[Inputs::<T>::ki(p, 0, 100, 0, 0)] = T::from_f32(f32::INFINITY);
                for b in 0..p.batch {
                    for i in 0..p.seqlen_q {
                        for h in 0..p.heads_q {
                            x.q[Inputs::<T>::qi(p, b, i, h, 0)] = T::from_f32(if i % 2 == 0 { 1.0 } else { -1.0 });
                        }
                    }
                }
            }),
        ),
        ("-inf in Q (b1, row 5, head 3, col 7)", Box::new(|p, x| x.q[Inputs::<T>::qi(p, 1, 5, 3, 7)] = T::from_f32(f32::NEG_INFINITY))),
    ];
    for (what, edit) in cases {
        let mut x = Inputs { q: base.q.clone(), k: base.k.clone(), v: base.v.clone() };
        edit(p, &mut x);
        let r = ex.run(p, &x);
        let st = unwrap_stats::<T>(p, what, compare(p, &x, &r, &all_rows(p), &base_tol(T::DTYPE), &nan_never));
        if what.contains("in K") {
            assert!(st.nan_expected > 0, "{what}: no row sees the poisoned key?");
        }
        print!("[{}] ", ex.label(p, T::DTYPE));
        println!(
            "{what} {}: NaN exactly where the reference has it ({} values), {} rows empty, other values: out err {:.2e}, lse err {:.2e}",
            describe(p, T::DTYPE),
            st.nan_expected,
            st.empty_rows,
            st.out_err,
            st.lse_err
        );
    }
}

/// NaN in V row j, column c: rows that see j get NaN in column c only; other rows may too,
/// but only when their query block loads j's K/V tile.
fn nan_in_v_stays_in_its_column_and_tile_on(ex: &Exec) {
    let shapes = [
        (params(2, 300, 300, 4, 64).heads_kv(2).causal(true), DType::F16),
        (params(2, 300, 300, 4, 64).heads_kv(2).causal(true).config(CONFIGS[1]), DType::F16),
        (params(2, 100, 300, 4, 64).heads_kv(2), DType::F16),
        (params(1, 500, 260, 2, 128).causal(true), DType::Bf16),
    ];
    for (p, dtype) in &shapes {
        each_path!(ex, p, *dtype, nan_v_case());
    }
}

fn nan_v_case<T: CustElement>(ex: &Exec, p: &AttentionParams) {
    let (nb, nj, nh, nc) = (1.min(p.batch - 1), 157.min(p.seqlen_k - 1), 0, 9);
    let mut x = Inputs::<T>::normal(p, 31, 1.0);
    x.v[Inputs::<T>::ki(p, nb, nj, nh, nc)] = T::from_f32(f32::NAN);
    let r = ex.run(p, &x);
    let (bm, bn) = ex.tiles(p, T::DTYPE);
    let off = p.seqlen_k as i64 - p.seqlen_q as i64;
    let loads_tile = |i: usize| {
        let m0 = (i / bm * bm) as i64;
        let keys = if p.causal { (m0 + bm as i64 + off).clamp(0, p.seqlen_k as i64) as usize } else { p.seqlen_k };
        nj / bn < keys.div_ceil(bn)
    };
    let group = p.heads_q / p.heads_kv;
    let nan_ok = |b: usize, h: usize, i: usize, c: usize| b == nb && h / group == nh && c == nc && loads_tile(i);
    let st = unwrap_stats::<T>(p, "NaN in V", compare(p, &x, &r, &all_rows(p), &base_tol(T::DTYPE), &nan_ok));
    assert!(st.nan_expected > 0, "no row sees the NaN key?");
    print!("[{}] ", ex.label(p, T::DTYPE));
    println!(
        "NaN in V (b{nb}, key {nj}, kv head {nh}, col {nc}) {} tiles {bm}x{bn}: {} rows that see it NaN in col {nc} only, \
         {} more rows of query blocks that load its tile NaN there too (allowed), the rest exact: out err {:.2e}, lse err {:.2e}",
        describe(p, T::DTYPE),
        st.nan_expected,
        st.nan_allowed,
        st.out_err,
        st.lse_err
    );
}

/// Causal with seqlen_q > seqlen_k: the first seqlen_q - seqlen_k rows see no key and give
/// exactly 0 with lse -inf, for every tile configuration.
fn rows_without_keys_are_exactly_zero_with_minus_inf_lse_on(ex: &Exec) {
    for c in CONFIGS {
        for dtype in [DType::F16, DType::Bf16] {
            let p = params(2, 300, 40, 2, c.head_dim).causal(true).config(c).build().unwrap();
            let st = match dtype {
                DType::F16 => plain_case::<half::f16>(ex, &p),
                DType::Bf16 => plain_case::<half::bf16>(ex, &p),
                _ => unreachable!("no kernels for {dtype:?}"),
            };
            assert_eq!(st.empty_rows, 2 * 2 * 260, "rows without keys");
            print!("[{}] ", ex.label(&p, dtype));
            println!(
                "no-key rows {} {}: {} rows exactly 0 / -inf, {} others: out err {:.2e}, lse err {:.2e}",
                describe(&p, dtype),
                Kernel::Mma { dtype, kv: None, variant: Variant::Plain, config: c, flavor: Flavor::Plain },
                st.empty_rows,
                st.rows - st.empty_rows,
                st.out_err,
                st.lse_err
            );
        }
    }
}

fn plain_case<T: CustElement>(ex: &Exec, p: &AttentionParams) -> Stats {
    let x = Inputs::<T>::normal(p, 41, 1.0);
    let r = ex.run(p, &x);
    unwrap_stats::<T>(p, "plain", compare(p, &x, &r, &all_rows(p), &base_tol(T::DTYPE), &nan_never))
}

/// A single key: every row that sees it returns that key's V row (up to the final rounding).
fn a_single_key_on(ex: &Exec) {
    let shapes = [
        (params(2, 1, 1, 4, 64), DType::F16),
        (params(1, 100, 1, 2, 128), DType::F16),
        (params(1, 100, 1, 2, 128).causal(true), DType::F16),
        (params(3, 7, 1, 4, 256).heads_kv(1), DType::Bf16),
        (params(1, 129, 1, 2, 40).causal(true), DType::Bf16),
    ];
    for (p, dtype) in shapes {
        let p = &p.build().unwrap();
        let st = match dtype {
            DType::F16 => plain_case::<half::f16>(ex, p),
            DType::Bf16 => plain_case::<half::bf16>(ex, p),
            _ => unreachable!("no kernels for {dtype:?}"),
        };
        print!("[{}] ", ex.label(p, dtype));
        println!(
            "one key {}: {} rows, {} see no key (0 / -inf), {} equal to V exactly; out err {:.2e}, lse err {:.2e}",
            describe(p, dtype),
            st.rows,
            st.empty_rows,
            st.exact_rows,
            st.out_err,
            st.lse_err
        );
    }
}

/// seqlen_q = seqlen_k = 131072, batch 1, one head, d = 64: sampled rows against the reference.
fn seqlen_128k_sampled_rows_on(ex: &Exec) {
    let n = if matches!(ex, Exec::Cpu) { 2000 } else { 131072 };
    for (p, dtype, seed) in [
        (params(1, n, n, 1, 64).causal(true), DType::F16, 51),
        (params(1, n, n, 1, 64), DType::F16, 52),
        (params(1, n, n, 1, 64).causal(true), DType::Bf16, 53),
    ] {
        each_path!(ex, p, dtype, long_case(seed));
    }
}

fn long_case<T: CustElement>(ex: &Exec, p: &AttentionParams, seed: u64) {
    let t = Instant::now();
    let mut rng = StdRng::seed_from_u64(seed);
    let (nq, nk) = Inputs::<T>::dims(p);
    // Standard normal inputs, as in the forward tests (the tolerance).
    let x = Inputs::<T> { q: normal(&mut rng, nq, 1.0), k: normal(&mut rng, nk, 1.0), v: normal(&mut rng, nk, 1.0) };
    let gen_s = t.elapsed().as_secs_f64();
    let r = ex.run(p, &x);
    let n = p.seqlen_q;
    let mut rows: Vec<usize> = vec![0, 1, 2, 63, 64, 127, 128, 129, 4095, 4096, n / 2 - 1, n / 2, n - 129, n - 128, n - 2, n - 1];
    rows.extend((0..24).map(|_| rng.random_range(0..n)));
    rows.retain(|&i| i < n);
    rows.sort_unstable();
    rows.dedup();
    let rows: Vec<(usize, usize, usize)> = rows.into_iter().map(|i| (0, 0, i)).collect();
    let t = Instant::now();
    let st = unwrap_stats::<T>(p, "128k", compare(p, &x, &r, &rows, &base_tol(T::DTYPE), &nan_never));
    assert!(r.lse.iter().all(|l| l.is_finite()), "some lse not finite");
    assert!(r.out.iter().all(|v| v.to_f32().is_finite()), "some output not finite (or unwritten)");
    print!("[{}] ", ex.label(p, T::DTYPE));
    println!(
        "seqlen 128k {}: kernel {:.1} ms (incl. launch), {} sampled rows: out err {:.2e} (tol {:.0e}), lse err {:.2e}; \
         every output and lse finite (inputs {gen_s:.1} s, reference {:.1} s)",
        describe(p, T::DTYPE),
        r.ms,
        st.rows,
        st.out_err,
        out_tolerance(T::DTYPE),
        st.lse_err,
        t.elapsed().as_secs_f64()
    );
}

/// The tests on the GPU (each skips, saying so, without one).
macro_rules! gpu_tests {
    ($($name:ident => $body:ident,)*) => {$(
        #[test]
        fn $name() {
            if let Some(gpu) = gpu_or_skip(stringify!($name)) {
                $body(&Exec::Gpu(&gpu));
            }
        }
    )*};
}

gpu_tests! {
    huge_logits_random_inputs => huge_logits_random_inputs_on,
    huge_logits_exact_scores_at_large_offsets => huge_logits_exact_scores_at_large_offsets_on,
    logits_sweeping_across_tiles => logits_sweeping_across_tiles_on,
    nan_and_inf_in_q_and_k_poison_exactly_the_rows_that_see_them => nan_and_inf_in_q_and_k_poison_exactly_the_rows_that_see_them_on,
    nan_in_v_stays_in_its_column_and_tile => nan_in_v_stays_in_its_column_and_tile_on,
    rows_without_keys_are_exactly_zero_with_minus_inf_lse => rows_without_keys_are_exactly_zero_with_minus_inf_lse_on,
    a_single_key => a_single_key_on,
    seqlen_128k_sampled_rows => seqlen_128k_sampled_rows_on,
}

/// Runs every case above on a CPU emulation of the kernel's arithmetic (f32 tiles, online
/// softmax with the kernel's max/rescale rules, P rounded to the element type, zero-filled
/// padding, the same query-block and K/V-tile geometry), with the 128k case shrunk to 2000.
/// This checks the harness itself (indexing, NaN patterns, tolerances) without a GPU.
#[test]
fn harness_on_cpu_emulation_of_the_kernel() {
    let t = Instant::now();
    huge_logits_random_inputs_on(&Exec::Cpu);
    huge_logits_exact_scores_at_large_offsets_on(&Exec::Cpu);
    logits_sweeping_across_tiles_on(&Exec::Cpu);
    nan_and_inf_in_q_and_k_poison_exactly_the_rows_that_see_them_on(&Exec::Cpu);
    nan_in_v_stays_in_its_column_and_tile_on(&Exec::Cpu);
    rows_without_keys_are_exactly_zero_with_minus_inf_lse_on(&Exec::Cpu);
    a_single_key_on(&Exec::Cpu);
    seqlen_128k_sampled_rows_on(&Exec::Cpu);
    println!("harness self-test on the CPU emulation: every case passed in {:.1} s", t.elapsed().as_secs_f64());
}
