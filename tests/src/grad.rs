//! Running one backward case on the GPU (forward for O and the log-sum-exp, then backward)
//! and comparing dQ, dK and dV with the CPU f64 reference's analytic gradients.
use cust::memory::{CopyDestination, DeviceBuffer};
use cust::stream::{Stream, StreamFlags};
use flashrs::{AttentionParams, CustomKernels, DType, DeviceArray, DeviceIndex, DeviceOffsets, DimOrder, Gpu, HostBlockMask, KernelChoice, Strides};
use flashrs_reference::{Bias, Problem, RefInputs, Variants, reference_backward_with};
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, StandardNormal};

use crate::CustElement;
use crate::attn::{gather, out_tolerance, scatter};
use crate::mods::{RelativeBias, blocks_of, device_mask, ref_blocks, upload_lists};

/// How a case's rows are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rows {
    /// `[batch, seqlen, heads, head_dim]` (every sequence the same lengths), or with `bhsd`
    /// `[batch, heads, seqlen, head_dim]` strides.
    Batched {
        /// Heads outside rows.
        bhsd: bool,
    },
    /// Packed variable-length rows, the offsets on the host or on the GPU.
    Varlen {
        /// Offsets on the GPU.
        device: bool,
    },
}

/// One backward case.
#[derive(Clone, Debug)]
pub struct GradCase {
    /// (seqlen_q, seqlen_k) of each sequence (all equal when batched).
    pub lens: Vec<(usize, usize)>,
    /// Query heads.
    pub heads_q: usize,
    /// Key/value heads.
    pub heads_kv: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// V's (and the output's) head dimension, when not `head_dim`.
    pub head_dim_v: Option<usize>,
    /// Causal (bottom-right per sequence).
    pub causal: bool,
    /// Element type.
    pub dtype: DType,
    /// Row storage.
    pub rows: Rows,
    /// Deterministic dQ.
    pub deterministic: bool,
    /// The inputs' seed (`None`: a fresh case seed).
    pub seed: Option<u64>,
    /// Compare with the reference (off: only the GPU's gradients, for reruns).
    pub check: bool,
    /// The backward's kernel family (the forward's choice stays automatic).
    pub kernel: KernelChoice,
    /// Added to every element of Q and taken from every element of K (0: plain normal inputs):
    /// with `c`, each score drops by about `c^2 head_dim` before scaling, so that a row's
    /// log-sum-exp can lie far below zero.
    pub qk_offset: f32,
    /// Learnable sinks (one standard-normal logit per query head), and their gradient checked
    /// too.
    pub sinks: bool,
    /// Sliding window `(left, right)` (FlashAttention's `window_size`; `None`: unbounded).
    pub window: (Option<usize>, Option<usize>),
    /// ALiBi with BLOOM's per-head slopes, `2^(-8 (h + 1) / heads_q)`.
    pub alibi: bool,
    /// Softcap `cap` on the scaled scores.
    pub softcap: Option<f32>,
    /// A learned relative-position bias, read as user data by custom kernels (the
    /// `relative_bias` example's; the case then runs on them, see [`check_grads_on`]).
    pub bias: Option<RelativeBias>,
    /// A block mask (covering the longest sequence's rows and keys).
    pub blocks: Option<HostBlockMask>,
}

impl GradCase {
    /// A batched contiguous case of `batch` sequences.
    #[allow(clippy::too_many_arguments)]
    pub fn batched(batch: usize, seqlen_q: usize, seqlen_k: usize, heads_q: usize, heads_kv: usize, head_dim: usize, causal: bool, dtype: DType) -> Self {
        GradCase { lens: vec![(seqlen_q, seqlen_k); batch], heads_q, heads_kv, head_dim, head_dim_v: None, causal, dtype, rows: Rows::Batched { bhsd: false }, deterministic: false, seed: None, check: true, kernel: KernelChoice::Auto, qk_offset: 0.0, sinks: false, window: (None, None), alibi: false, softcap: None, bias: None, blocks: None }
    }

    /// One line describing the case.
    pub fn label(&self) -> String {
        let lens: Vec<String> = self.lens.iter().map(|(q, k)| format!("{q}/{k}")).collect();
        let kernel = crate::attn::kernel_label(&self.kernel);
        let mut sinks = String::from(if self.sinks { " sinks" } else { "" });
        if self.window != (None, None) {
            sinks += &format!(" window={:?}", self.window);
        }
        if self.alibi {
            sinks += " alibi";
        }
        if let Some(cap) = self.softcap {
            sinks += &format!(" softcap={cap}");
        }
        if let Some(b) = &self.bias {
            sinks += &format!(" relative bias ±{}", b.max);
        }
        if let Some(m) = &self.blocks {
            sinks += &format!(" blocks {}x{} density {:.2}", m.batch, m.heads, m.density());
        }
        let dv = self.head_dim_v.map_or(String::new(), |dv| format!("/{dv}"));
        format!("{:?} hq{} hkv{} d{}{dv} causal={}{sinks} {:?} det={} {kernel} lens(q/k)=[{}]", self.dtype, self.heads_q, self.heads_kv, self.head_dim, self.causal, self.rows, self.deterministic, lens.join(","))
    }

    fn offsets(&self) -> (Vec<i32>, Vec<i32>) {
        crate::varlen::offsets_of(&self.lens)
    }
}

/// Max |gpu - ref| of each gradient over the max |ref| of that gradient.
#[derive(Debug)]
pub struct GradErrors {
    /// dQ, dK, dV and the sinks' gradient (0 without sinks) (NaN if any element is NaN or
    /// unwritten).
    pub rel: [f64; 4],
    /// The seed of the inputs.
    pub seed: u64,
}

impl GradErrors {
    /// True when every gradient is within [`grad_tolerance`].
    pub fn passes(&self, dtype: DType) -> bool {
        self.rel.iter().all(|&e| e <= grad_tolerance(dtype))
    }
}

/// Tolerance on a gradient's error relative to its largest magnitude: the forward's bar on
/// unit-scale outputs ([`out_tolerance`]), which is about four units of rounding of the
/// element type; P and dS are rounded to it between the GEMMs as the output is.
pub fn grad_tolerance(dtype: DType) -> f64 {
    out_tolerance(dtype)
}

fn rel_err<T: CustElement>(got: &[T], want: &[f64]) -> (f64, f64) {
    let mut err = 0.0f64;
    let mut max = 0.0f64;
    for (g, &w) in got.iter().zip(want) {
        let g = g.to_f32() as f64;
        let e = (g - w).abs();
        err = if e.is_nan() || err.is_nan() { f64::NAN } else { err.max(e) };
        max = max.max(w.abs());
    }
    (err, max)
}

/// Runs `c` (forward, then backward with a random dO) and returns its gradients' errors, and
/// the gradients' bits (dQ, dK, dV as the GPU wrote them) for determinism checks.
pub fn run_grad<T: CustElement>(gpu: &Gpu, c: &GradCase) -> (GradErrors, Vec<u32>) {
    run_grad_on::<T>(gpu, None, c)
}

/// [`run_grad`], the forward and the backward's main kernel on the caller's own kernels
/// (`custom`) when given: a case with a relative bias needs them.
pub fn run_grad_on<T: CustElement>(gpu: &Gpu, custom: Option<&CustomKernels>, c: &GradCase) -> (GradErrors, Vec<u32>) {
    assert_eq!(c.dtype, T::DTYPE);
    assert!(c.bias.is_none() || (custom.is_some() && !c.sinks), "a relative bias runs on custom kernels, without the sinks' gradient");
    let seed = c.seed.unwrap_or_else(crate::case_seed);
    let mut rng = StdRng::seed_from_u64(seed);
    let (hq, hkv, d) = (c.heads_q, c.heads_kv, c.head_dim);
    let dv = c.head_dim_v.unwrap_or(d);
    let (cq, ck) = c.offsets();
    let (nb, tq, tk) = (c.lens.len(), *cq.last().unwrap() as usize, *ck.last().unwrap() as usize);
    let (max_q, max_k) = (c.lens.iter().map(|l| l.0).max().unwrap_or(0), c.lens.iter().map(|l| l.1).max().unwrap_or(0));
    let (cq_d, ck_d) = (DeviceBuffer::from_slice(&cq).unwrap(), DeviceBuffer::from_slice(&ck).unwrap());
    // Drawn after the tensors' values below would shift them: a separate generator.
    let mut sink_rng = StdRng::seed_from_u64(seed ^ 0x5157);
    let sinks: Vec<f32> = if c.sinks { (0..hq).map(|_| StandardNormal.sample(&mut sink_rng)).collect() } else { vec![] };
    let sinks_d = DeviceBuffer::from_slice(&if sinks.is_empty() { vec![0.0f32] } else { sinks.clone() }).unwrap();
    let b = AttentionParams::builder().heads_q(hq).heads_kv(hkv).head_dim(d).head_dim_v(dv).causal(c.causal).deterministic(c.deterministic);
    let b = if c.sinks { b.sinks(DeviceArray::new(&sinks_d)) } else { b };
    let slopes: Vec<f32> = (0..hq).map(|h| (-8.0 * (h + 1) as f32 / hq as f32).exp2()).collect();
    let slopes_d = DeviceBuffer::from_slice(&slopes).unwrap();
    let b = if c.alibi { b.alibi(DeviceArray::new(&slopes_d), false) } else { b };
    let b = if c.window != (None, None) { b.window(c.window.0, c.window.1) } else { b };
    let b = if let Some(cap) = c.softcap { b.softcap(cap) } else { b };
    let user_d = DeviceBuffer::from_slice(&c.bias.as_ref().map_or(vec![0.0], |b| b.data())).unwrap();
    let b = if c.bias.is_some() { b.user_data(DeviceArray::new(&user_d)) } else { b };
    let lists = c.blocks.as_ref().map(upload_lists);
    let b = match (&c.blocks, &lists) {
        (Some(m), Some(l)) => b.block_mask(device_mask(m, l)),
        _ => b,
    };
    let p = match c.rows {
        Rows::Batched { bhsd } => b.batch(nb).seqlen_q(max_q).seqlen_k(max_k).dim_order(if bhsd { DimOrder::Bhsd } else { DimOrder::Bshd }),
        Rows::Varlen { device: false } => b.varlen(&cq, &ck).seqlen_k(max_k),
        Rows::Varlen { device: true } => {
            let o = DeviceOffsets::new(DeviceIndex::new(&cq_d), tq).keys(DeviceIndex::new(&ck_d), tk);
            b.varlen_device(o).batch(nb).seqlen_q(max_q).seqlen_k(max_k)
        }
    }
    .build()
    .unwrap();
    // Contiguous packed [rows, heads, d] host tensors: sequence i's rows from cq[i] / ck[i].
    let mut rand_vec = |n: usize| (0..n).map(|_| T::from_f32(StandardNormal.sample(&mut rng))).collect::<Vec<T>>();
    let (mut q, mut k, v, dout) = (rand_vec(tq * hq * d), rand_vec(tk * hkv * d), rand_vec(tk * hkv * dv), rand_vec(tq * hq * dv));
    if c.qk_offset != 0.0 {
        let shift = |x: &mut [T], by: f32| x.iter_mut().for_each(|e| *e = T::from_f32(e.to_f32() + by));
        shift(&mut q, c.qk_offset);
        shift(&mut k, -c.qk_offset);
    }
    // Device layouts: batched tensors scattered with the call's strides; packed ones as they are.
    let [qs, ks, vs, os] = p.tensor_strides().unwrap();
    let batched = matches!(c.rows, Rows::Batched { .. });
    let (dims_q, dims_k) = ([nb, max_q, hq, d], [nb, max_k, hkv, d]);
    let (dims_o, dims_v) = ([nb, max_q, hq, dv], [nb, max_k, hkv, dv]);
    let lay = |x: &[T], dims: [usize; 4], s: Strides| if batched { scatter(x, dims, s, s.extent(dims).unwrap().max(1)) } else if x.is_empty() { vec![T::default()] } else { x.to_vec() };
    let unlay = |x: &[T], dims: [usize; 4], s: Strides, n: usize| if batched { gather(x, dims, s) } else { x[..n].to_vec() };
    let up = |x: Vec<T>| DeviceBuffer::from_slice(&x).unwrap();
    let (q_d, k_d, v_d, do_d) = (up(lay(&q, dims_q, qs)), up(lay(&k, dims_k, ks)), up(lay(&v, dims_v, vs)), up(lay(&dout, dims_o, os)));
    let nan = T::from_f32(f32::NAN);
    let poison = |s: Strides, dims: [usize; 4], n: usize| DeviceBuffer::from_slice(&vec![nan; if batched { s.extent(dims).unwrap() } else { n }.max(1)]).unwrap();
    let mut o_d = poison(os, dims_o, tq * hq * dv);
    let (mut dq_d, mut dk_d, mut dv_d) = (poison(qs, dims_q, tq * hq * d), poison(ks, dims_k, tk * hkv * d), poison(vs, dims_v, tk * hkv * dv));
    let mut lse_d = DeviceBuffer::from_slice(&vec![f32::NAN; (tq * hq).max(1)]).unwrap();
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    match custom {
        // SAFETY: the tests' custom kernels read their user data within its length.
        Some(kernels) => unsafe { gpu.attention_forward_custom(kernels, &stream, &p, &q_d, &k_d, &v_d, &mut o_d, Some(&mut lse_d)) },
        None => gpu.attention_forward(&stream, &p, &q_d, &k_d, &v_d, &mut o_d, Some(&mut lse_d)),
    }
    .expect("forward launch");
    let mut pb = p.clone();
    pb.kernel = c.kernel;
    let mut dsinks_d = DeviceBuffer::from_slice(&vec![f32::NAN; hq.max(1)]).unwrap();
    match (c.sinks, custom) {
        // SAFETY: as for the forward.
        (false, Some(kernels)) => unsafe { gpu.attention_backward_custom(kernels, &stream, &pb, &q_d, &k_d, &v_d, &o_d, &lse_d, &do_d, &mut dq_d, &mut dk_d, &mut dv_d) },
        (true, _) => gpu.attention_backward_with_sinks(&stream, &pb, &q_d, &k_d, &v_d, &o_d, &lse_d, &do_d, &mut dq_d, &mut dk_d, &mut dv_d, &mut dsinks_d),
        (false, None) => gpu.attention_backward(&stream, &pb, &q_d, &k_d, &v_d, &o_d, &lse_d, &do_d, &mut dq_d, &mut dk_d, &mut dv_d),
    }
    .expect("backward launch");
    stream.synchronize().expect("kernels failed");
    let mut dsinks = vec![0.0f32; dsinks_d.len()];
    dsinks_d.copy_to(&mut dsinks[..]).unwrap();
    let host = |x: &DeviceBuffer<T>| {
        let mut h = vec![T::default(); x.len()];
        x.copy_to(&mut h[..]).unwrap();
        h
    };
    let dq = unlay(&host(&dq_d), dims_q, qs, tq * hq * d);
    let dk = unlay(&host(&dk_d), dims_k, ks, tk * hkv * d);
    let dv_got = unlay(&host(&dv_d), dims_v, vs, tk * hkv * dv);

    let f = |x: &[T]| x.iter().map(|v| v.to_f32()).collect::<Vec<f32>>();
    let (qf, kf, vf, dof) = (f(&q), f(&k), f(&v), f(&dout));
    let mut acc = [(0.0f64, 0.0f64); 3];
    let sinks64: Vec<f64> = sinks.iter().map(|&x| x as f64).collect();
    let slopes64: Vec<f64> = slopes.iter().map(|&x| x as f64).collect();
    let var = Variants { sinks: c.sinks.then_some(&sinks64[..]), alibi: c.alibi.then_some(&slopes64[..]), window: c.window, softcap: c.softcap.map(f64::from), ..Variants::NONE };
    // The sinks' gradient sums over every sequence.
    let mut want_dsinks = vec![0.0f64; hq];
    for (i, &(lq, lk)) in c.lens.iter().enumerate().filter(|_| c.check) {
        let (q0, k0) = (cq[i] as usize, ck[i] as usize);
        let sp = Problem { batch: 1, seqlen_q: lq, seqlen_k: lk, ..Problem::from(&p) };
        let (rq, rk) = (q0 * hq * d..(q0 + lq) * hq * d, k0 * hkv * d..(k0 + lk) * hkv * d);
        let (ro, rv) = (q0 * hq * dv..(q0 + lq) * hq * dv, k0 * hkv * dv..(k0 + lk) * hkv * dv);
        let x = RefInputs { q: &qf[rq.clone()], k: &kf[rk.clone()], v: &vf[rv.clone()] };
        // The relative bias of this sequence's diagonal.
        let offset = lk as i64 - lq as i64;
        let bias = |_: usize, h: usize, row: usize, key: usize| c.bias.as_ref().map_or(0.0, |b| b.at(h, key as i64 - row as i64 - offset) as f64);
        let blocks = c.blocks.as_ref().map(|m| ref_blocks(m, Some(i)));
        let var = Variants { bias: c.bias.is_some().then_some(Bias(&bias)), blocks: blocks.as_ref().map(blocks_of), ..var };
        let r = reference_backward_with(&sp, &var, &x, &dof[ro]);
        for (a, (got, want)) in acc.iter_mut().zip([(&dq[rq.clone()], &r.dq), (&dk[rk.clone()], &r.dk), (&dv_got[rv], &r.dv)]) {
            let (e, m) = rel_err(got, want);
            *a = (if e.is_nan() || a.0.is_nan() { f64::NAN } else { a.0.max(e) }, a.1.max(m));
        }
        for (w, g) in want_dsinks.iter_mut().zip(&r.dsinks) {
            *w += g;
        }
    }
    let rel3 = acc.map(|(e, m)| if e.is_nan() { f64::NAN } else if m == 0.0 { e } else { e / m });
    // A sink's gradient sums one term per row, `exp(sink - lse) dot(dO, O)`, of either sign:
    // its error is measured against the largest sum of the terms' magnitudes (from the GPU's
    // O and log-sum-exp), as the other gradients' against their largest magnitude.
    let sinks_rel = match c.sinks && c.check {
        true => {
            let o = f(&unlay(&host(&o_d), dims_o, os, tq * hq * dv));
            let mut lse = vec![0.0f32; lse_d.len()];
            lse_d.copy_to(&mut lse[..]).unwrap();
            let mut magnitude = vec![0.0f64; hq];
            for (i, &(lq, _)) in c.lens.iter().enumerate() {
                for (s, h) in (0..lq).flat_map(|s| (0..hq).map(move |h| (s, h))) {
                    let row = cq[i] as usize + s;
                    let l = if batched { lse[(i * hq + h) * max_q + s] } else { lse[h * tq + row] };
                    let at = (row * hq + h) * dv;
                    let dot: f64 = (0..dv).map(|x| dof[at + x] as f64 * o[at + x] as f64).sum();
                    if dot != 0.0 {
                        magnitude[h] += ((sinks[h] - l) as f64).exp() * dot.abs();
                    }
                }
            }
            let scale = magnitude.iter().fold(0.0f64, |m, &x| m.max(x));
            let err = dsinks.iter().zip(&want_dsinks).fold(0.0f64, |e, (&g, &w)| if (g as f64 - w).is_nan() || e.is_nan() { f64::NAN } else { e.max((g as f64 - w).abs()) });
            if scale == 0.0 { err } else { err / scale }
        }
        false => 0.0,
    };
    let rel = [rel3[0], rel3[1], rel3[2], sinks_rel];
    let mut bits: Vec<u32> = [dq, dk, dv_got].concat().iter().map(|x| x.to_f32().to_bits()).collect();
    bits.extend(dsinks.iter().take(if c.sinks { hq } else { 0 }).map(|x| x.to_bits()));
    (GradErrors { rel, seed }, bits)
}

/// Runs bf16 case `c` once against the reference, then `runs - 1` more times on the same
/// inputs, and panics unless every gradient's bits (dsinks' too) are the same each time.
pub fn assert_bit_identical(gpu: &Gpu, c: &GradCase, runs: usize) {
    let (e, first) = run_grad::<half::bf16>(gpu, c);
    assert!(e.passes(c.dtype), "{}: {e:?}", c.label());
    let again = GradCase { seed: Some(e.seed), check: false, ..c.clone() };
    for run in 1..runs {
        assert!(run_grad::<half::bf16>(gpu, &again).1 == first, "{}: run {run} differs from run 0", c.label());
    }
    println!("ok   {}: {runs} runs bit-identical", c.label());
}

/// Runs every case on its element type, printing a line each, and panics listing failures.
pub fn check_grads(gpu: &Gpu, cases: &[GradCase]) {
    check_grads_on(gpu, None, cases)
}

/// [`check_grads`] on the caller's own kernels (`custom`) when given.
pub fn check_grads_on(gpu: &Gpu, custom: Option<&CustomKernels>, cases: &[GradCase]) {
    let mut failures = Vec::new();
    for c in cases {
        let (e, _) = match c.dtype {
            DType::F16 => run_grad_on::<half::f16>(gpu, custom, c),
            DType::Bf16 => run_grad_on::<half::bf16>(gpu, custom, c),
            other => panic!("no element type {other:?}"),
        };
        let ok = e.passes(c.dtype);
        println!("{} {}: dq {:.2e} dk {:.2e} dv {:.2e} dsinks {:.2e} (tol {:.1e}, seed {})", if ok { "ok  " } else { "FAIL" }, c.label(), e.rel[0], e.rel[1], e.rel[2], e.rel[3], grad_tolerance(c.dtype), e.seed);
        if !ok {
            failures.push(format!("{}: {:?}", c.label(), e));
        }
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
}
