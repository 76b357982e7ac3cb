//! Variable-length batches on the GPU against the CPU reference run on each sequence alone:
//! offsets on the host or on the GPU, K and V packed or in a paged cache.
use cust::memory::DeviceBuffer;
use cust::stream::{Stream, StreamFlags};
use flashrs::{AttentionParams, DType, DeviceIndex, DeviceOffsets, Gpu, KernelPath, PagedKv, Pages};
use flashrs_reference::{Problem, RefInputs, reference_forward_with};
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, StandardNormal};

use crate::{CustElement, to_host};
use crate::mods::HostMods;
use crate::attn::{CaseErrors, LSE_TOLERANCE, out_tolerance};
use crate::paged::{PagedCopy, TableFill, page_copy, pages_needed};

/// Where a case's K and V live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VarlenKv {
    /// Packed `[total_k, heads_kv, head_dim]` tensors.
    Packed,
    /// A paged cache of pages of `page_size` rows (every sequence's pages shuffled), each
    /// sequence's key count given as `counts` says.
    Paged {
        /// Rows per page.
        page_size: usize,
        /// How the kernel learns each sequence's key count.
        counts: KeyCounts,
    },
}

/// How a paged variable-length call passes its sequences' key counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyCounts {
    /// `seqused_k` (vLLM's way); no key offsets.
    SequsedK,
    /// Key offsets, whose differences are the counts (FlashAttention-2's `cu_seqlens_k` with a
    /// block table).
    KeyOffsets,
    /// Neither: every sequence has `seqlen_k` (the longest sequence's) keys.
    Longest,
}

/// One variable-length case: per-sequence (query rows, key rows).
#[derive(Clone, Debug)]
pub struct VarlenCase {
    /// (seqlen_q, seqlen_k) of each sequence.
    pub lens: Vec<(usize, usize)>,
    /// Query heads.
    pub heads_q: usize,
    /// Key/value heads.
    pub heads_kv: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// V's (and the output's) head dimension, when it differs.
    pub head_dim_v: Option<usize>,
    /// Causal (bottom-right per sequence).
    pub causal: bool,
    /// Element type.
    pub dtype: DType,
    /// Kernel path (`Auto` takes the Hopper kernels on an H100/H200).
    pub path: KernelPath,
    /// Offsets already on the GPU ([`flashrs::Offsets::Device`]) instead of the host.
    pub device_offsets: bool,
    /// Packed K/V or a paged cache.
    pub kv: VarlenKv,
    /// Split-KV count to force (`None`: the library's choice for this GPU).
    pub num_splits: Option<usize>,
    /// An `mma.sync` tile configuration to force (`None`: the library's choice).
    pub config: Option<flashrs::TileConfig>,
    /// Attention modifications.
    pub mods: HostMods,
}

impl VarlenCase {
    /// A case of `lens` with packed K/V and host offsets.
    pub fn new(lens: &[(usize, usize)], heads_q: usize, heads_kv: usize, head_dim: usize, causal: bool, dtype: DType) -> Self {
        let path = KernelPath::Auto;
        VarlenCase { lens: lens.to_vec(), heads_q, heads_kv, head_dim, head_dim_v: None, causal, dtype, path, device_offsets: false, kv: VarlenKv::Packed, num_splits: None, config: None, mods: HostMods::default() }
    }

    /// The key count sequence `b` is computed with: its own, or the longest where no counts
    /// are passed.
    fn keys(&self, b: usize) -> usize {
        match self.kv {
            VarlenKv::Paged { counts: KeyCounts::Longest, .. } => self.lens.iter().map(|l| l.1).max().unwrap_or(0),
            _ => self.lens[b].1,
        }
    }

    /// The offsets (`cu_seqlens_q`, `cu_seqlens_k`).
    pub fn offsets(&self) -> (Vec<i32>, Vec<i32>) {
        offsets_of(&self.lens)
    }

    /// Whether the call passes key offsets.
    pub fn passes_key_offsets(&self) -> bool {
        matches!(self.kv, VarlenKv::Packed | VarlenKv::Paged { counts: KeyCounts::KeyOffsets, .. })
    }

    /// The call's parameters (without a paged cache): with `device`, the offsets on the GPU
    /// (the case must ask for them), else its host offsets.
    pub fn params<'a>(&self, device: Option<DeviceOffsets<'a>>) -> AttentionParams<'a> {
        let (cq, ck) = self.offsets();
        let (b, max_q, max_k) = (self.lens.len(), self.lens.iter().map(|l| l.0).max().unwrap_or(0), self.lens.iter().map(|l| l.1).max().unwrap_or(0));
        assert_eq!(device.is_some(), self.device_offsets, "device offsets exactly for a case that asks for them");
        let p = AttentionParams::builder().heads_q(self.heads_q).heads_kv(self.heads_kv).head_dim(self.head_dim).causal(self.causal).path(self.path);
        let p = match self.head_dim_v {
            Some(dv) => p.head_dim_v(dv),
            None => p,
        };
        let p = match device {
            Some(offsets) => p.varlen_device(offsets).batch(b).seqlen_q(max_q),
            None => p.varlen(&cq, if self.passes_key_offsets() { &ck } else { &[] }),
        };
        let p = p.seqlen_k(max_k);
        let mut p = match self.config {
            Some(c) => p.config(c),
            None => p,
        }
        .build()
        .unwrap();
        p.num_splits = self.num_splits;
        p
    }

    /// One line describing the case.
    pub fn label(&self) -> String {
        let lens: Vec<String> = self.lens.iter().map(|(q, k)| format!("{q}/{k}")).collect();
        format!(
            "{:?} {}{} hq{} hkv{} d{}{} causal={} {} {} offsets, {:?}, splits {:?}, lens(q/k)=[{}]",
            self.dtype,
            self.path.name(),
            self.config.map_or(String::new(), |c| format!(" {c:?}")),
            self.heads_q,
            self.heads_kv,
            self.head_dim,
            self.head_dim_v.map_or(String::new(), |dv| format!("/{dv}")),
            self.causal,
            self.mods.label(),
            if self.device_offsets { "device" } else { "host" },
            self.kv,
            self.num_splits,
            lens.join(",")
        )
    }
}

/// The offsets (`cu_seqlens_q`, `cu_seqlens_k`) of sequences of (query, key) lengths `lens`.
pub fn offsets_of(lens: &[(usize, usize)]) -> (Vec<i32>, Vec<i32>) {
    let cum = |f: &dyn Fn(&(usize, usize)) -> usize| {
        let mut v = vec![0i32];
        for l in lens {
            v.push(v.last().unwrap() + f(l) as i32);
        }
        v
    };
    (cum(&|l| l.0), cum(&|l| l.1))
}

/// Errors of one variable-length case (of element type `T`) against the reference run on each
/// sequence alone.
pub fn run_varlen<T: CustElement>(gpu: &Gpu, c: &VarlenCase) -> CaseErrors {
    assert_eq!(c.dtype, T::DTYPE, "a {:?} case run on {:?} buffers", c.dtype, T::DTYPE);
    let seed = crate::case_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let (cq, ck) = c.offsets();
    let (b, tq, tk) = (c.lens.len(), *cq.last().unwrap() as usize, *ck.last().unwrap() as usize);
    let (cq_d, ck_d) = (DeviceBuffer::from_slice(&cq).unwrap(), DeviceBuffer::from_slice(&ck).unwrap());
    let device = c.device_offsets.then(|| {
        let offsets = DeviceOffsets::new(DeviceIndex::new(&cq_d), tq);
        if c.passes_key_offsets() { offsets.keys(DeviceIndex::new(&ck_d), tk) } else { offsets }
    });
    let mod_bufs = c.mods.upload();
    let p = c.mods.apply(c.params(device).to_builder(), &mod_bufs).build().unwrap();
    let (hq, hkv, d, dv) = (c.heads_q, c.heads_kv, c.head_dim, p.head_dim_v());
    let (row_q, row_o) = (hq * d, hq * dv);
    let (row_kv, row_v) = (hkv * d, hkv * dv);
    let mut rand_vec = |n: usize| (0..n).map(|_| T::from_f32(StandardNormal.sample(&mut rng))).collect::<Vec<T>>();
    let q = rand_vec(tq * row_q);
    // K and V as the reference sees them: packed (sequence b's keys from ck[b]), or for a paged
    // cache padded to the longest sequence, `[batch, seqlen_k, heads_kv, head_dim]`.
    let (k, v, key0): (Vec<T>, Vec<T>, Box<dyn Fn(usize) -> usize>) = match c.kv {
        VarlenKv::Packed => (rand_vec(tk * row_kv), rand_vec(tk * row_v), Box::new(|bi| ck[bi] as usize)),
        VarlenKv::Paged { .. } => {
            let rows = b * p.seqlen_k;
            let sk = p.seqlen_k;
            (rand_vec(rows * row_kv), rand_vec(rows * row_v), Box::new(move |bi| bi * sk))
        }
    };

    let one = [T::default()];
    let up = |x: &[T]| DeviceBuffer::from_slice(if x.is_empty() { &one[..] } else { x }).unwrap();
    let up_i32 = |x: &[i32]| DeviceBuffer::from_slice(x).unwrap();
    let q_d = up(&q);
    let mut o_d = DeviceBuffer::from_slice(&vec![T::from_f32(f32::NAN); (tq * row_o).max(1)]).unwrap();
    let mut lse_d = DeviceBuffer::from_slice(&vec![f32::NAN; (hq * tq).max(1)]).unwrap();
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    let launched = match c.kv {
        VarlenKv::Packed => {
            let (k_d, v_d) = (up(&k), up(&v));
            gpu.attention_forward(&stream, &p, &q_d, &k_d, &v_d, &mut o_d, Some(&mut lse_d)).map(|()| stream.synchronize())
        }
        VarlenKv::Paged { page_size, counts } => {
            let used = |bi: usize| c.keys(bi);
            let pages_per_seq = p.seqlen_k.div_ceil(page_size).max(1);
            let pg = Pages { page_size, num_pages: pages_needed(b, page_size, &used) + 2, pages_per_seq };
            let PagedCopy { k: kc, v: vc, table } = page_copy(&mut rng, pg, b, p.seqlen_k, [row_kv, row_v], [&k, &v], &used, TableFill::WildTail);
            let (k_d, v_d, t_d) = (up(&kc), up(&vc), up_i32(&table));
            let counts_d = up_i32(&c.lens.iter().map(|l| l.1 as i32).collect::<Vec<_>>());
            let mut paged = PagedKv::new(pg, DeviceIndex::new(&t_d));
            paged.seqused_k = (counts == KeyCounts::SequsedK).then(|| DeviceIndex::new(&counts_d));
            let p = p.to_builder().paged(paged).build().unwrap();
            gpu.attention_forward(&stream, &p, &q_d, &k_d, &v_d, &mut o_d, Some(&mut lse_d)).map(|()| stream.synchronize())
        }
    };
    launched.expect("launch failed").expect("kernel failed");
    let (o_h, lse_h) = (to_host(&o_d), to_host(&lse_d));

    let f = |x: &[T]| x.iter().map(|v| v.to_f32()).collect::<Vec<f32>>();
    let (qf, kf, vf) = (f(&q), f(&k), f(&v));
    let mut e = CaseErrors::new(seed);
    for (bi, &(lq, _)) in c.lens.iter().enumerate() {
        let (q0, k0, lk) = (cq[bi] as usize, key0(bi), c.keys(bi));
        let sp = Problem { batch: 1, seqlen_q: lq, seqlen_k: lk, ..Problem::from(&p) };
        let x = RefInputs { q: &qf[q0 * row_q..(q0 + lq) * row_q], k: &kf[k0 * row_kv..(k0 + lk) * row_kv], v: &vf[k0 * row_v..(k0 + lk) * row_v] };
        let ref_mods = c.mods.reference(hq, Some(bi), lk as i64 - lq as i64);
        let (r_out, r_lse) = reference_forward_with(&sp, &ref_mods.variants(), &x);
        for (g, &r) in o_h[q0 * row_o..(q0 + lq) * row_o].iter().zip(&r_out) {
            e.add_out(T::DTYPE, g.to_f32() as f64, r);
        }
        // Reference lse is [1, hq, lq]; the GPU's is [hq, total_q].
        for h in 0..hq {
            for i in 0..lq {
                e.add_lse(lse_h[h * tq + q0 + i], r_lse[h * lq + i]);
            }
        }
    }
    e
}

/// Runs every case, printing one line each, and panics at the end listing the failures.
pub fn check_varlen_many(gpu: &Gpu, cases: &[VarlenCase]) {
    let mut failures = Vec::new();
    for c in cases {
        let CaseErrors { out, lse, lse_inf_mismatch: mism, seed } = match c.dtype {
            DType::F16 => run_varlen::<half::f16>(gpu, c),
            DType::Bf16 => run_varlen::<half::bf16>(gpu, c),
            dtype => unreachable!("no kernels for {dtype:?}"),
        };
        let tol = out_tolerance(c.dtype);
        let ok = out <= tol && lse <= LSE_TOLERANCE && mism == 0;
        let line = format!(
            "{} varlen {}: out err {out:.2e} (tol {tol:.0e}), lse err {lse:.2e}, lse -inf mismatches {mism} (seed {seed})",
            if ok { "ok  " } else { "FAIL" },
            c.label()
        );
        println!("{line}");
        if !ok {
            failures.push(line);
        }
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
}
