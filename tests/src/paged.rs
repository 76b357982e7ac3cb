//! Paged K/V caches on the GPU against the CPU reference run on the unpaged equivalent: each
//! sequence's first `used` key rows, contiguous, alone.
use cust::memory::DeviceBuffer;
use cust::stream::{Stream, StreamFlags};
use flashrs::{AttentionParams, DType, DeviceIndex, Element, Gpu, PagedKv, Pages};
use flashrs_reference::{Problem, RefInputs, reference_row};
use rand::rngs::StdRng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand::SeedableRng;
use rand_distr::{Distribution, StandardNormal};

use crate::{CustElement, to_host};
use crate::attn::{CaseErrors, LSE_TOLERANCE, out_tolerance};

/// One paged case.
#[derive(Clone, Debug)]
pub struct PagedCase {
    /// The call without its layout: `seqlen_k` the longest sequence.
    pub p: AttentionParams<'static>,
    /// Element type of Q, K, V and the output.
    pub dtype: DType,
    /// The cache's pages.
    pub pages: Pages,
    /// Each sequence's key count, passed as `seqused_k`; `None` passes none (every sequence
    /// then has `seqlen_k` keys).
    pub used: Option<Vec<usize>>,
}

impl PagedCase {
    /// `batch` sequences of `used[b]` keys (or `seqlen_k` each) in `dtype`, `page_size`-row
    /// pages, a table row of exactly the pages the longest sequence needs plus
    /// `extra_entries`, and three spare pages no sequence uses (filled with NaN, like every row
    /// past a sequence's end).
    pub fn new(p: AttentionParams<'static>, dtype: DType, page_size: usize, used: Option<Vec<usize>>, extra_entries: usize) -> Self {
        let pages_per_seq = p.seqlen_k.div_ceil(page_size).max(1) + extra_entries;
        let needed = pages_needed(p.batch, page_size, &|b| used.as_ref().map_or(p.seqlen_k, |u| u[b]));
        let num_pages = needed + 3;
        PagedCase { p, dtype, pages: Pages { page_size, num_pages, pages_per_seq }, used }
    }

    fn used(&self, b: usize) -> usize {
        self.used.as_ref().map_or(self.p.seqlen_k, |u| u[b])
    }
}

/// How the block table is filled beyond the pages a case needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableFill {
    /// Entries past a sequence's pages hold wild values (negative, past `num_pages`): the
    /// kernel must never look them up.
    WildTail,
    /// Every entry, used or not, is wild: the kernel must clamp and stay inside the caches
    /// (the numbers are then meaningless; only completion and finiteness are checked).
    AllWild,
}

/// Paged caches and their block table, from contiguous K and V.
pub struct PagedCopy<T> {
    /// K cache, `[num_pages, page_size, heads_kv, head_dim]`.
    pub k: Vec<T>,
    /// V cache, laid out like K.
    pub v: Vec<T>,
    /// i32 `[batch, pages_per_seq]` block table.
    pub table: Vec<i32>,
}

/// Pages the first `used(b)` rows of each sequence `b` of contiguous `[batch, seqlen_k, ..]`
/// K and V (`row_elems` elements a row) into pages taken in random order; a page's unused rows
/// and the spare pages hold NaN, and table entries past a sequence's pages (with
/// [`TableFill::AllWild`]: all entries) hold wild values.
pub fn page_copy<T: Element>(
    rng: &mut StdRng,
    pg: Pages,
    batch: usize,
    seqlen_k: usize,
    [row_k, row_v]: [usize; 2],
    [k, v]: [&[T]; 2],
    used: &dyn Fn(usize) -> usize,
    fill: TableFill,
) -> PagedCopy<T> {
    let mut order: Vec<usize> = (0..pg.num_pages).collect();
    order.shuffle(rng);
    let wild = |rng: &mut StdRng| *[-1, i32::MIN, pg.num_pages as i32, i32::MAX, -(pg.num_pages as i32)].choose(rng).unwrap();
    let mut table = vec![0i32; batch * pg.pages_per_seq];
    let nan = T::from_f32(f32::NAN);
    let (mut kc, mut vc) = (vec![nan; pg.num_pages * pg.page_size * row_k], vec![nan; pg.num_pages * pg.page_size * row_v]);
    let mut next = order.into_iter();
    for bi in 0..batch {
        let used = used(bi);
        for (i, e) in table[bi * pg.pages_per_seq..(bi + 1) * pg.pages_per_seq].iter_mut().enumerate() {
            if i * pg.page_size < used && fill == TableFill::WildTail {
                let page = next.next().expect("enough pages");
                *e = page as i32;
                let rows = (used - i * pg.page_size).min(pg.page_size);
                let row0 = bi * seqlen_k + i * pg.page_size;
                for (cache, src, row) in [(&mut kc, k, row_k), (&mut vc, v, row_v)] {
                    cache[page * pg.page_size * row..][..rows * row].copy_from_slice(&src[row0 * row..][..rows * row]);
                }
            } else {
                *e = wild(rng);
            }
        }
    }
    PagedCopy { k: kc, v: vc, table }
}

/// The pages `batch` sequences of `used(b)` keys need, in pages of `page_size` rows.
pub fn pages_needed(batch: usize, page_size: usize, used: &dyn Fn(usize) -> usize) -> usize {
    (0..batch).map(|b| used(b).div_ceil(page_size)).sum()
}

/// Runs a paged case of element type `T`; returns its errors against the reference (with
/// [`TableFill::AllWild`], `out` is 0 when every output is finite and NaN otherwise, the other
/// fields 0).
pub fn run_paged<T: CustElement>(gpu: &Gpu, c: &PagedCase, fill: TableFill) -> CaseErrors {
    assert_eq!(c.dtype, T::DTYPE, "a {:?} case run on {:?} buffers", c.dtype, T::DTYPE);
    let seed = crate::case_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let pg = c.pages;
    let (b, sq, sk, hq, hkv, d, dv) = (c.p.batch, c.p.seqlen_q, c.p.seqlen_k, c.p.heads_q, c.p.heads_kv, c.p.head_dim, c.p.head_dim_v());
    let mut normal = |n: usize| (0..n).map(|_| T::from_f32(StandardNormal.sample(&mut rng))).collect::<Vec<T>>();
    let q = normal(b * sq * hq * d);
    // The unpaged equivalent: contiguous [b, sk, hkv, d] (V: dv).
    let k = normal(b * sk * hkv * d);
    let v = normal(b * sk * hkv * dv);

    let (row_k, row_v) = (hkv * d, hkv * dv);
    let PagedCopy { k: mut kc, v: mut vc, table } = page_copy(&mut rng, pg, b, sk, [row_k, row_v], [&k, &v], &|bi| c.used(bi), fill);
    let nan = T::from_f32(f32::NAN);
    if fill == TableFill::AllWild {
        // Finite caches: only the clamping is under test, not where NaN could come from.
        kc.iter_mut().chain(vc.iter_mut()).for_each(|x| *x = T::from_f32(0.5));
    }

    let up = |x: &[T]| DeviceBuffer::from_slice(x).unwrap();
    let (q_d, k_d, v_d, t_d) = (up(&q), up(&kc), up(&vc), DeviceBuffer::from_slice(&table).unwrap());
    // Counts as given: in-range ones, or (AllWild) some past seqlen_k that must be clamped.
    let counts: Vec<i32> = (0..b).map(|bi| if fill == TableFill::AllWild && bi % 2 == 1 { i32::MAX } else { c.used(bi) as i32 }).collect();
    let u_d = DeviceBuffer::from_slice(&counts).unwrap();
    let mut o_d = DeviceBuffer::from_slice(&vec![nan; (b * sq * hq * dv).max(1)]).unwrap();
    let n_lse = b * hq * sq;
    let mut lse_d = DeviceBuffer::from_slice(&vec![f32::NAN; n_lse.max(1)]).unwrap();
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    let mut paged = PagedKv::new(pg, DeviceIndex::new(&t_d));
    paged.seqused_k = c.used.as_ref().map(|_| DeviceIndex::new(&u_d));
    let p = &c.p.to_builder().paged(paged).build().unwrap();
    gpu.attention_forward(&stream, p, &q_d, &k_d, &v_d, &mut o_d, Some(&mut lse_d)).expect("launch failed");
    stream.synchronize().expect("kernel failed");
    let (out, lse) = (to_host(&o_d), to_host(&lse_d));

    let mut e = CaseErrors::new(seed);
    if fill == TableFill::AllWild {
        e.out = if out[..b * sq * hq * dv].iter().all(|x| x.to_f32().is_finite()) { 0.0 } else { f64::NAN };
        return e;
    }
    let f = |x: &[T]| x.iter().map(|v| v.to_f32()).collect::<Vec<f32>>();
    for bi in 0..b {
        let used = c.used(bi);
        // Sequence `bi` alone, unpaged, with its own key count.
        let one = Problem { batch: 1, seqlen_k: used, ..Problem::from(p) };
        let qs = f(&q[bi * sq * hq * d..][..sq * hq * d]);
        let ks = f(&k[bi * sk * row_k..][..used * row_k]);
        let vs = f(&v[bi * sk * row_v..][..used * row_v]);
        let x = RefInputs { q: &qs, k: &ks, v: &vs };
        for h in 0..hq {
            for i in 0..sq {
                let r = reference_row(&one, &x, 0, h, i);
                let o = &out[((bi * sq + i) * hq + h) * dv..][..dv];
                for (g, &want) in o.iter().zip(&r.out) {
                    e.add_out(T::DTYPE, g.to_f32() as f64, want);
                }
                e.add_lse(lse[(bi * hq + h) * sq + i], r.lse);
            }
        }
    }
    e
}

/// Runs every case, printing one line each, and panics at the end listing those out of
/// tolerance.
pub fn check_paged(gpu: &Gpu, cases: &[PagedCase]) {
    let mut failures = Vec::new();
    for c in cases {
        let e = match c.dtype {
            DType::F16 => run_paged::<half::f16>(gpu, c, TableFill::WildTail),
            DType::Bf16 => run_paged::<half::bf16>(gpu, c, TableFill::WildTail),
            dtype => unreachable!("no kernels for {dtype:?}"),
        };
        let (p, pg) = (&c.p, c.pages);
        let tol = out_tolerance(c.dtype);
        let ok = e.out <= tol && e.lse <= LSE_TOLERANCE && e.lse_inf_mismatch == 0;
        let line = format!(
            "{} {:?} b{} sq{} sk{} hq{} hkv{} d{}/{} causal={} page {} splits {:?} used {:?}: out err {:.2e} (tol {tol:.0e}), \
             lse err {:.2e}, -inf mismatches {} (seed {})",
            if ok { "ok  " } else { "FAIL" },
            c.dtype, p.batch, p.seqlen_q, p.seqlen_k, p.heads_q, p.heads_kv, p.head_dim, p.head_dim_v(), p.causal, pg.page_size, p.num_splits,
            c.used, e.out, e.lse, e.lse_inf_mismatch, e.seed
        );
        println!("{line}");
        if !ok {
            failures.push(line);
        }
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
}
