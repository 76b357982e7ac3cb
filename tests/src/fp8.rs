//! FP8 K/V caches (E4M3, E5M2) read by f16 and bf16 queries, on the GPU against the f64 CPU
//! reference run on the dequantized caches (each stored value times its factor, exact): one
//! case in any layout (fixed-length, paged, variable-length), with its factors per tensor, per
//! K/V head or per (sequence, K/V head).
use cust::memory::{DeviceBuffer, DeviceCopy};
use cust::stream::{Stream, StreamFlags};
use flashrs::element::{fp8_from_f32, fp8_to_f32};
use flashrs::{AttentionParams, DType, Descale, DeviceArray, DeviceIndex, E4m3, E5m2, Fp8, KvElement, PagedKv, Pages};
use flashrs_reference::{Problem, RefInputs, reference_row};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};

use crate::attn::{CaseErrors, LSE_TOLERANCE, out_tolerance};
use crate::{CustElement, case_seed, params, to_host};

/// How a case stores its rows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Store {
    /// `[batch, seqlen, heads, head_dim]` tensors (every sequence of the same lengths).
    Batched,
    /// Batched queries, K and V in a paged cache of this many rows a page (per-sequence key
    /// counts through `seqused_k`).
    Paged(usize),
    /// Packed variable-length queries, keys and values (host offsets).
    Varlen,
    /// Packed variable-length queries against a paged cache.
    VarlenPaged(usize),
}

/// Where a case's dequantization factors come from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Factors {
    /// One host scalar per tensor.
    Scalar,
    /// One per K/V head, on the GPU.
    PerHead,
    /// One per (sequence, K/V head), on the GPU.
    PerBatch,
}

/// One FP8 cache case.
#[derive(Clone, Debug)]
pub struct Case {
    /// (query rows, keys) of each sequence.
    pub lens: Vec<(usize, usize)>,
    /// Query and K/V heads.
    pub heads: (usize, usize),
    /// Head dimensions of Q/K and of V.
    pub dims: (usize, usize),
    /// Causal masking.
    pub causal: bool,
    /// The queries' (and output's) type.
    pub dtype: DType,
    /// K's and V's format.
    pub fp8: Fp8,
    /// How rows are stored.
    pub store: Store,
    /// Where the factors come from.
    pub factors: Factors,
    /// Split-KV count to force.
    pub splits: Option<usize>,
    /// Q is of `fp8` too (then E4M3, on sm_90a), with factors from the same source.
    pub fp8_queries: bool,
}

impl Case {
    /// One line describing the case.
    pub fn label(&self) -> String {
        format!(
            "{:?}/{}{:?} {:?} {:?} lens {:?} h{}/{} d{}/{} causal={} splits {:?}",
            self.dtype, if self.fp8_queries { "QKV " } else { "" }, self.fp8, self.store, self.factors, self.lens, self.heads.0, self.heads.1, self.dims.0, self.dims.1, self.causal, self.splits
        )
    }
}

/// An FP8 element type of the library, from its bits.
pub trait Fp8Element: KvElement<half::f16> + KvElement<half::bf16> + DeviceCopy + From<u8> {
    /// Launches `p` with Q of this type too (bits `q`), K, V and outputs as given.
    #[allow(clippy::too_many_arguments)]
    fn forward_as_queries<T: CustElement>(gpu: &flashrs::Gpu, stream: &Stream, p: &AttentionParams, q: &[u8], k: &DeviceBuffer<Self>, v: &DeviceBuffer<Self>,
        o: &mut DeviceBuffer<T>, lse: &mut DeviceBuffer<f32>) where Self: KvElement<T>;
}

impl Fp8Element for E4m3 {
    fn forward_as_queries<T: CustElement>(gpu: &flashrs::Gpu, stream: &Stream, p: &AttentionParams, q: &[u8], k: &DeviceBuffer<Self>, v: &DeviceBuffer<Self>,
        o: &mut DeviceBuffer<T>, lse: &mut DeviceBuffer<f32>) {
        let q = DeviceBuffer::from_slice(&q.iter().map(|&x| E4m3(x)).collect::<Vec<E4m3>>()).unwrap();
        gpu.attention_forward(stream, p, &q, k, v, o, Some(lse)).expect("launch failed");
    }
}

impl Fp8Element for E5m2 {
    fn forward_as_queries<T: CustElement>(_: &flashrs::Gpu, _: &Stream, _: &AttentionParams, _: &[u8], _: &DeviceBuffer<Self>, _: &DeviceBuffer<Self>,
        _: &mut DeviceBuffer<T>, _: &mut DeviceBuffer<f32>) {
        unreachable!("FP8 queries are E4M3")
    }
}

/// Output tolerance with FP8 queries: the kernels round P to E4M3 (3 mantissa bits, a relative
/// error up to 2^-4) for the FP8 `P V`, which the reference (exact P) does not; a row of few
/// keys (the first rows of a causal block) sees that error on each of its terms undiluted.
pub const FP8_QUERY_TOLERANCE: f64 = 8e-2;

/// Log-sum-exp tolerance with FP8 queries: FP8 `wgmma` accumulates `Q K^T` with fewer bits
/// kept than f32 (about 14 on Hopper, as DeepSeek-V3's report measured), so a 256-term score
/// of unit-size products is off by a few 1e-4, and a row of one or two keys carries that
/// straight into its log-sum-exp (seen up to 1.4e-3 at head_dim 256, against 1e-3 for
/// 16-bit inputs).
pub const FP8_QUERY_LSE_TOLERANCE: f64 = 4e-3;

/// The NaN pattern of both formats.
const NAN: u8 = 0x7f;

/// Runs case `c` with queries of `T` and K/V of `C`; its errors against the reference.
pub fn run<T: CustElement, C: Fp8Element + KvElement<T>>(gpu: &flashrs::Gpu, c: &Case) -> CaseErrors {
    let seed = case_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let (hq, hkv) = c.heads;
    let (d, dv) = c.dims;
    let b = c.lens.len();
    let sq = c.lens.iter().map(|l| l.0).max().unwrap_or(0);
    let sk = c.lens.iter().map(|l| l.1).max().unwrap_or(0);
    let packed = matches!(c.store, Store::Varlen | Store::VarlenPaged(_));
    if !packed {
        assert!(c.lens.iter().all(|l| l.0 == sq), "batched queries share a length");
        assert!(c.store != Store::Batched || c.lens.iter().all(|l| l.1 == sk), "batched keys share a length");
    }
    // Factors of K, V and (FP8 queries, indexed as FA3's by K/V head) Q per (sequence, K/V
    // head): one per tensor, per K/V head repeated over the sequences, or one each.
    let mut draw = |scalar: f32| -> Vec<f32> {
        let mut factor = || rng.random_range(0.25f32..2.0);
        match c.factors {
            Factors::Scalar => vec![scalar; b * hkv],
            Factors::PerHead => {
                let per_head: Vec<f32> = (0..hkv).map(|_| factor()).collect();
                (0..b).flat_map(|_| per_head.iter().copied()).collect()
            }
            Factors::PerBatch => (0..b * hkv).map(|_| factor()).collect(),
        }
    };
    let (kd, vd, qd) = (draw(0.375), draw(1.75), draw(0.625));
    // Each sequence's rows, contiguous: queries in T, keys and values as stored (FP8 bits of
    // values spread over the formats' exponents), and dequantized.
    let normal = |rng: &mut StdRng, n: usize, scale: f32| (0..n).map(|_| { let x: f32 = StandardNormal.sample(rng); x * scale }).collect::<Vec<f32>>();
    let group = hq / hkv.max(1);
    // FP8 queries: their bits, and (below) their dequantized values in `q`'s place.
    let q8: Vec<Vec<u8>> = if c.fp8_queries {
        let quantize = |(s, x): (usize, Vec<f32>)| x.into_iter().enumerate().map(|(i, x)| fp8_from_f32(c.fp8, x / qd[s * hkv + (i / d) % hq / group])).collect();
        c.lens.iter().map(|&(r, _)| normal(&mut rng, r * hq * d, 1.0)).enumerate().map(quantize).collect()
    } else {
        vec![]
    };
    // The queries the reference sees: FP8 ones dequantized exactly (in f32, as the kernels
    // fold the factor into the scale), else the 16-bit values uploaded.
    let q: Vec<Vec<T>> = if c.fp8_queries { vec![] } else { c.lens.iter().map(|&(r, _)| normal(&mut rng, r * hq * d, 1.0).into_iter().map(T::from_f32).collect()).collect() };
    let q_ref: Vec<Vec<f32>> = if c.fp8_queries {
        let deq = |(s, x): (usize, &Vec<u8>)| x.iter().enumerate().map(|(i, &x)| fp8_to_f32(c.fp8, x) * qd[s * hkv + (i / d) % hq / group]).collect();
        q8.iter().enumerate().map(deq).collect()
    } else {
        q.iter().map(|r| r.iter().map(|x| x.to_f32()).collect()).collect()
    };
    // Standard normal K and V quantized as a cache is: each value over its (sequence, head)'s
    // factor, rounded; dequantized, they are unit-scale again (as the 16-bit tests' inputs).
    let stored = |rng: &mut StdRng, s: usize, keys: usize, width: usize, f: &[f32]| {
        let x = normal(rng, keys * hkv * width, 1.0);
        x.into_iter().enumerate().map(|(i, x)| fp8_from_f32(c.fp8, x / f[s * hkv + (i / width) % hkv])).collect::<Vec<u8>>()
    };
    let k: Vec<Vec<u8>> = c.lens.iter().enumerate().map(|(s, &(_, n))| stored(&mut rng, s, n, d, &kd)).collect();
    let v: Vec<Vec<u8>> = c.lens.iter().enumerate().map(|(s, &(_, n))| stored(&mut rng, s, n, dv, &vd)).collect();

    // The device layout.
    let rows_q = if packed { c.lens.iter().map(|l| l.0).sum() } else { b * sq };
    let mut q_rows: Vec<T> = Vec::with_capacity(rows_q * hq * d);
    for qs in &q {
        q_rows.extend_from_slice(qs);
    }
    // FP8 queries go up as bytes (below); a placeholder keeps the 16-bit buffer non-empty.
    if q_rows.is_empty() {
        q_rows.push(T::default());
    }
    let (mut kc, mut vc, mut table, mut pages) = (vec![], vec![], vec![], None);
    match c.store {
        Store::Batched | Store::Varlen => {
            for (ks, vs) in k.iter().zip(&v) {
                kc.extend_from_slice(ks);
                vc.extend_from_slice(vs);
            }
        }
        Store::Paged(page) | Store::VarlenPaged(page) => {
            let per_seq = sk.div_ceil(page).max(1);
            let needed: usize = c.lens.iter().map(|l| l.1.div_ceil(page)).sum();
            let pg = Pages { page_size: page, num_pages: needed + 2, pages_per_seq: per_seq };
            let mut order: Vec<usize> = (0..pg.num_pages).collect();
            order.shuffle(&mut rng);
            let mut next = order.into_iter();
            // Rows no sequence owns hold NaN: a read of one shows.
            kc = vec![NAN; pg.num_pages * page * hkv * d];
            vc = vec![NAN; pg.num_pages * page * hkv * dv];
            table = vec![-1i32; b * per_seq];
            for (s, &(_, n)) in c.lens.iter().enumerate() {
                for i in 0..n.div_ceil(page) {
                    let at = next.next().unwrap();
                    table[s * per_seq + i] = at as i32;
                    let rows = (n - i * page).min(page);
                    kc[at * page * hkv * d..][..rows * hkv * d].copy_from_slice(&k[s][i * page * hkv * d..][..rows * hkv * d]);
                    vc[at * page * hkv * dv..][..rows * hkv * dv].copy_from_slice(&v[s][i * page * hkv * dv..][..rows * hkv * dv]);
                }
            }
            pages = Some(pg);
        }
    }
    let as_fp8 = |x: Vec<u8>| x.into_iter().map(C::from).collect::<Vec<C>>();
    let (q_d, k_d, v_d) = (DeviceBuffer::from_slice(&q_rows).unwrap(), DeviceBuffer::from_slice(&as_fp8(kc)).unwrap(), DeviceBuffer::from_slice(&as_fp8(vc)).unwrap());
    let nan = T::from_f32(f32::NAN);
    let mut o_d = DeviceBuffer::from_slice(&vec![nan; (rows_q * hq * dv).max(1)]).unwrap();
    let mut lse_d = DeviceBuffer::from_slice(&vec![f32::NAN; (rows_q * hq).max(1)]).unwrap();
    let t_d = DeviceBuffer::from_slice(&table.clone().into_iter().chain([0]).collect::<Vec<i32>>()).unwrap();
    let used_d = DeviceBuffer::from_slice(&c.lens.iter().map(|l| l.1 as i32).collect::<Vec<i32>>()).unwrap();
    let on_gpu = |x: &[f32]| DeviceBuffer::from_slice(if c.factors == Factors::PerHead { &x[..hkv] } else { x }).unwrap();
    let (kd_d, vd_d, qd_d) = (on_gpu(&kd), on_gpu(&vd), on_gpu(&qd));
    fn descale<'a>(f: Factors, x: &[f32], on: &'a DeviceBuffer<f32>) -> Descale<'a> {
        match f {
            Factors::Scalar => Descale::Scalar(x[0]),
            f => Descale::Device { factors: DeviceArray::new(on), per_batch: f == Factors::PerBatch },
        }
    }
    let (k_desc, v_desc) = (descale(c.factors, &kd, &kd_d), descale(c.factors, &vd, &vd_d));

    let offsets = |pick: &dyn Fn(&(usize, usize)) -> usize| {
        std::iter::once(0).chain(c.lens.iter().scan(0, |acc, l| {
            *acc += pick(l) as i32;
            Some(*acc)
        }))
        .collect::<Vec<i32>>()
    };
    let mut builder = params(b, sq, sk, hq, d).heads_kv(hkv).head_dim_v(dv).causal(c.causal).kv_descale(k_desc, v_desc);
    if packed {
        let keys = if matches!(c.store, Store::Varlen) { offsets(&|l| l.1) } else { vec![] };
        builder = builder.varlen(&offsets(&|l| l.0), &keys).seqlen_k(sk);
    }
    if let Some(pg) = pages {
        builder = builder.paged(PagedKv::new(pg, DeviceIndex::new(&t_d)).seqused_k(DeviceIndex::new(&used_d)));
    }
    if let Some(n) = c.splits {
        builder = builder.num_splits(n);
    }
    if c.fp8_queries {
        builder = builder.q_descale(descale(c.factors, &qd, &qd_d));
    }
    let p: AttentionParams = builder.build().unwrap();
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    if c.fp8_queries {
        C::forward_as_queries(gpu, &stream, &p, &q8.concat(), &k_d, &v_d, &mut o_d, &mut lse_d);
    } else {
        gpu.attention_forward(&stream, &p, &q_d, &k_d, &v_d, &mut o_d, Some(&mut lse_d)).expect("launch failed");
    }
    stream.synchronize().expect("kernel failed");
    let (out, lse) = (to_host(&o_d), to_host(&lse_d));

    let mut e = CaseErrors::new(seed);
    let mut row0 = 0;
    for (s, &(nq, nk)) in c.lens.iter().enumerate() {
        let one = Problem { batch: 1, seqlen_q: nq, seqlen_k: nk, ..Problem::from(&p) };
        let deq = |bits: &[u8], width: usize, f: &[f32]| bits.iter().enumerate().map(|(i, &x)| fp8_to_f32(c.fp8, x) * f[s * hkv + (i / width) % hkv]).collect::<Vec<f32>>();
        let (ks, vs) = (deq(&k[s], d, &kd), deq(&v[s], dv, &vd));
        let x = RefInputs { q: &q_ref[s], k: &ks, v: &vs };
        let first = if packed { row0 } else { s * sq };
        for h in 0..hq {
            for i in 0..nq {
                let r = reference_row(&one, &x, 0, h, i);
                let o = &out[((first + i) * hq + h) * dv..][..dv];
                for (g, &want) in o.iter().zip(&r.out) {
                    e.add_out(T::DTYPE, g.to_f32() as f64, want);
                }
                let at = if packed { h * rows_q + first + i } else { (s * hq + h) * sq + i };
                e.add_lse(lse[at], r.lse);
            }
        }
        row0 += nq;
    }
    e
}

/// Runs every case, printing one line each, and panics at the end listing those out of
/// tolerance.
pub fn check(gpu: &flashrs::Gpu, cases: &[Case]) {
    let mut failures = vec![];
    for c in cases {
        let e = match (c.dtype, c.fp8) {
            (DType::F16, Fp8::E4m3) => run::<half::f16, E4m3>(gpu, c),
            (DType::Bf16, Fp8::E4m3) => run::<half::bf16, E4m3>(gpu, c),
            (DType::F16, Fp8::E5m2) => run::<half::f16, E5m2>(gpu, c),
            (DType::Bf16, Fp8::E5m2) => run::<half::bf16, E5m2>(gpu, c),
            (dtype, _) => unreachable!("no kernels for {dtype:?}"),
        };
        let (tol, lse_tol) = if c.fp8_queries { (FP8_QUERY_TOLERANCE, FP8_QUERY_LSE_TOLERANCE) } else { (out_tolerance(c.dtype), LSE_TOLERANCE) };
        let ok = e.out <= tol && e.lse <= lse_tol && e.lse_inf_mismatch == 0;
        let line = format!(
            "{} {}: out err {:.2e} (tol {tol:.0e}), lse err {:.2e} (tol {lse_tol:.0e}), -inf mismatches {} (seed {})",
            if ok { "ok  " } else { "FAIL" },
            c.label(),
            e.out,
            e.lse,
            e.lse_inf_mismatch,
            e.seed
        );
        println!("{line}");
        if !ok {
            failures.push(line);
        }
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
}
