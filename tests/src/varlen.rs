//! Variable-length batches on the GPU against the CPU reference run on each sequence alone.
use cust::memory::{CopyDestination, DeviceBuffer};
use cust::stream::{Stream, StreamFlags};
use flashrs::reference::{RefInputs, reference_forward};
use flashrs::{AttentionParams, DType, Element, Gpu, KernelPath};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};

use crate::attn::{CaseErrors, LSE_TOLERANCE, out_tolerance};

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
    /// Causal (bottom-right per sequence).
    pub causal: bool,
    /// Element type.
    pub dtype: DType,
    /// Kernel path (`Auto` takes the Hopper kernels on an H100/H200).
    pub path: KernelPath,
}

impl VarlenCase {
    /// The offsets (`cu_seqlens_q`, `cu_seqlens_k`).
    pub fn offsets(&self) -> (Vec<i32>, Vec<i32>) {
        let cum = |f: &dyn Fn(&(usize, usize)) -> usize| {
            let mut v = vec![0i32];
            for l in &self.lens {
                v.push(v.last().unwrap() + f(l) as i32);
            }
            v
        };
        (cum(&|l| l.0), cum(&|l| l.1))
    }

    /// The call's parameters.
    pub fn params(&self) -> AttentionParams {
        let (cq, ck) = self.offsets();
        AttentionParams::new_varlen(&cq, &ck, self.heads_q, self.head_dim).heads_kv(self.heads_kv).causal(self.causal).dtype(self.dtype).path(self.path)
    }
}

/// Errors of one variable-length case against the reference run on each sequence alone.
pub fn run_varlen<T: Element>(gpu: &Gpu, c: &VarlenCase) -> CaseErrors {
    let seed: u64 = rand::rng().random();
    let mut rng = StdRng::seed_from_u64(seed);
    let p = c.params();
    let (cq, ck) = c.offsets();
    let (tq, tk) = (*cq.last().unwrap() as usize, *ck.last().unwrap() as usize);
    let (hq, hkv, d) = (c.heads_q, c.heads_kv, c.head_dim);
    let mut rand_vec = |n: usize| (0..n).map(|_| T::from_f32(StandardNormal.sample(&mut rng))).collect::<Vec<T>>();
    let q = rand_vec(tq * hq * d);
    let k = rand_vec(tk * hkv * d);
    let v = rand_vec(tk * hkv * d);
    let one = [T::default()];
    let up = |x: &[T]| DeviceBuffer::from_slice(if x.is_empty() { &one[..] } else { x }).unwrap();
    let (q_d, k_d, v_d) = (up(&q), up(&k), up(&v));
    let mut o_d = DeviceBuffer::from_slice(&vec![T::from_f32(f32::NAN); (tq * hq * d).max(1)]).unwrap();
    let mut lse_d = DeviceBuffer::from_slice(&vec![f32::NAN; (hq * tq).max(1)]).unwrap();
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    gpu.attention_forward(&stream, &p, &q_d, &k_d, &v_d, &mut o_d, Some(&mut lse_d)).expect("launch failed");
    stream.synchronize().expect("kernel failed");
    let mut o_h = vec![T::default(); o_d.len()];
    o_d.copy_to(&mut o_h[..]).unwrap();
    let mut lse_h = vec![0f32; lse_d.len()];
    lse_d.copy_to(&mut lse_h[..]).unwrap();

    let f = |x: &[T]| x.iter().map(|v| v.to_f32()).collect::<Vec<f32>>();
    let (qf, kf, vf) = (f(&q), f(&k), f(&v));
    let mut e = CaseErrors::new(seed);
    for (b, &(lq, lk)) in c.lens.iter().enumerate() {
        let (q0, k0) = (cq[b] as usize, ck[b] as usize);
        let sp = AttentionParams::new(1, lq, lk, hq, d).heads_kv(hkv).causal(c.causal).dtype(c.dtype);
        let x = RefInputs { q: &qf[q0 * hq * d..(q0 + lq) * hq * d], k: &kf[k0 * hkv * d..(k0 + lk) * hkv * d], v: &vf[k0 * hkv * d..(k0 + lk) * hkv * d] };
        let (r_out, r_lse) = reference_forward(&sp, &x);
        for (g, &r) in o_h[q0 * hq * d..(q0 + lq) * hq * d].iter().zip(&r_out) {
            e.add_out(c.dtype, g.to_f32() as f64, r);
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
        };
        let tol = out_tolerance(c.dtype);
        let ok = out <= tol && lse <= LSE_TOLERANCE && mism == 0;
        let lens: Vec<String> = c.lens.iter().map(|(q, k)| format!("{q}/{k}")).collect();
        let line = format!(
            "{} varlen {:?} {} hq{} hkv{} d{} causal={} lens(q/k)=[{}]: out err {out:.2e} (tol {tol:.0e}), lse err {lse:.2e}, \
             lse -inf mismatches {mism} (seed {seed})",
            if ok { "ok  " } else { "FAIL" },
            c.dtype, c.path.name(), c.heads_q, c.heads_kv, c.head_dim, c.causal, lens.join(",")
        );
        println!("{line}");
        if !ok {
            failures.push(line);
        }
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
}
