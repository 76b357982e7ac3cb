//! Ring attention across the GPUs of this host (`flashrs::ring`) against one GPU and the CPU
//! reference: the same global inputs, sharded zigzag over 1, 2 and all GPUs, give per rank the
//! rows of the single-GPU call's output and log-sum-exp (causal and not, GQA, ragged shard
//! lengths, f16 and bf16). A call one rank gets wrong fails on every rank with every buffer
//! untouched. Needs a GPU and NCCL (`libnccl.so` on the library path); skips without them.
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DeviceRepr};
use cudarc::nccl::NcclType;
use flashrs::ring::{RankContext, launch, nccl_available, zigzag_rows};
use flashrs::{AttentionParams, DType, Element, Error, Gpu};
use flashrs_reference::{Problem, RefInputs, reference_forward};
use flashrs_tests::attn::{CaseErrors, LSE_TOLERANCE, out_tolerance};
use flashrs_tests::{case_rng, gpu_or_skip};
use half2::{bf16, f16};
use rand_distr::{Distribution, StandardNormal};

/// The GPUs present, or `None` (reported as a skip) without a GPU or NCCL.
fn gpus_or_skip(test: &str) -> Option<usize> {
    gpu_or_skip(test)?;
    if !nccl_available() {
        assert!(std::env::var("FLASHRS_REQUIRE_GPU").as_deref() != Ok("1"), "{test}: FLASHRS_REQUIRE_GPU=1, but NCCL (libnccl.so) is not on the library path");
        println!("SKIPPED {test}: no NCCL library (libnccl.so) on the library path");
        return None;
    }
    Some(CudaContext::device_count().expect("counting GPUs") as usize)
}

/// One global problem: shape and masking.
#[derive(Clone, Copy, Debug)]
struct Case {
    batch: usize,
    /// Rows per rank and two zigzag chunks of each: the global sequence is `world * rows`.
    chunk: usize,
    heads_q: usize,
    heads_kv: usize,
    head_dim: usize,
    causal: bool,
}

impl Case {
    fn params(&self, seqlen: usize) -> AttentionParams<'static> {
        AttentionParams::builder().batch(self.batch).seqlen(seqlen).heads_q(self.heads_q).heads_kv(self.heads_kv).head_dim(self.head_dim).causal(self.causal).build().unwrap()
    }
}

/// Rows `rows` (in order) of every batch entry of a `[batch, seqlen, heads, d]` tensor.
fn gather(x: &[f32], batch: usize, seqlen: usize, row: usize, rows: &[usize]) -> Vec<f32> {
    let mut out = Vec::with_capacity(batch * rows.len() * row);
    for b in 0..batch {
        for &r in rows {
            let at = (b * seqlen + r) * row;
            out.extend_from_slice(&x[at..at + row]);
        }
    }
    out
}

/// Uploads `x` rounded to `T`.
fn upload<T: Element + DeviceRepr>(stream: &Arc<CudaStream>, x: &[f32]) -> CudaSlice<T> {
    stream.clone_htod(&x.iter().map(|&v| T::from_f32(v)).collect::<Vec<T>>()).unwrap()
}

/// Output and log-sum-exp of one call, as f32.
type Result2 = (Vec<f32>, Vec<f32>);

/// The ring over GPUs `0..world` on the global inputs `(q, k, v)`: each rank's output and
/// log-sum-exp rows, with the global rows they are.
fn ring_run<T>(case: &Case, world: usize, x: &[Vec<f32>; 3]) -> Vec<(Vec<usize>, Result2)>
where
    T: Element + DeviceRepr + NcclType + cudarc::driver::ValidAsZeroBits,
{
    let seqlen = world * case.chunk;
    let (qrow, kvrow) = (case.heads_q * case.head_dim, case.heads_kv * case.head_dim);
    let ordinals: Vec<usize> = (0..world).collect();
    launch(&ordinals, |rc: RankContext| {
        let rows: Vec<usize> = zigzag_rows(seqlen, world, rc.rank).unwrap().into_iter().flatten().collect();
        let [q, k, v] = [(&x[0], qrow), (&x[1], kvrow), (&x[2], kvrow)].map(|(t, row)| upload::<T>(&rc.stream, &gather(t, case.batch, seqlen, row, &rows)));
        let mut out = upload::<T>(&rc.stream, &vec![f32::NAN; q.len()]);
        let mut lse = rc.stream.clone_htod(&vec![f32::NAN; case.batch * case.heads_q * rows.len()]).unwrap();
        let p = case.params(rows.len());
        rc.gpu.ring_attention_forward(&rc.ring, &rc.stream, &p, &q, &k, &v, &mut out, Some(&mut lse)).unwrap();
        let o: Vec<f32> = rc.stream.clone_dtoh(&out).unwrap().iter().map(|v: &T| v.to_f32()).collect();
        (rows, (o, rc.stream.clone_dtoh(&lse).unwrap()))
    })
    .unwrap()
}

/// The single-GPU call on GPU 0 over the whole sequence.
fn single_run<T: Element + DeviceRepr>(case: &Case, seqlen: usize, x: &[Vec<f32>; 3]) -> Result2 {
    let ctx = CudaContext::new(0).unwrap();
    let gpu = Gpu::from_cudarc(&ctx).unwrap();
    let stream = ctx.new_stream().unwrap();
    let [q, k, v] = [&x[0], &x[1], &x[2]].map(|t| upload::<T>(&stream, t));
    let mut out = upload::<T>(&stream, &vec![f32::NAN; q.len()]);
    let mut lse = stream.clone_htod(&vec![f32::NAN; case.batch * case.heads_q * seqlen]).unwrap();
    gpu.attention_forward(&stream, &case.params(seqlen), &q, &k, &v, &mut out, Some(&mut lse)).unwrap();
    let o = stream.clone_dtoh(&out).unwrap().iter().map(|v: &T| v.to_f32()).collect();
    (o, stream.clone_dtoh(&lse).unwrap())
}

/// Each rank's rows against the single-GPU call's and the CPU reference's.
fn check<T>(case: &Case, world: usize, dtype: DType)
where
    T: Element + DeviceRepr + NcclType + cudarc::driver::ValidAsZeroBits,
{
    let seqlen = world * case.chunk;
    let (mut rng, seed) = case_rng();
    let lens = [case.heads_q, case.heads_kv, case.heads_kv].map(|h| case.batch * seqlen * h * case.head_dim);
    let x: [Vec<f32>; 3] = lens.map(|n| (0..n).map(|_| StandardNormal.sample(&mut rng)).collect());
    // Both sides read the inputs rounded to T.
    let x = x.map(|t| t.iter().map(|&v| T::from_f32(v).to_f32()).collect::<Vec<f32>>());
    let single = single_run::<T>(case, seqlen, &x);
    let problem = Problem::from(&case.params(seqlen));
    let (ref_out, ref_lse) = reference_forward(&problem, &RefInputs { q: &x[0], k: &x[1], v: &x[2] });
    let qrow = case.heads_q * case.head_dim;
    let mut vs_ref = CaseErrors::new(seed);
    let mut vs_single = 0.0f64;
    let mut single_vs_ref = CaseErrors::new(seed);
    for (rows, (out, lse)) in ring_run::<T>(case, world, &x) {
        for b in 0..case.batch {
            for (i, &r) in rows.iter().enumerate() {
                for c in 0..qrow {
                    let (got, at) = (out[(b * rows.len() + i) * qrow + c] as f64, (b * seqlen + r) * qrow + c);
                    vs_ref.add_out(dtype, got, ref_out[at]);
                    single_vs_ref.add_out(dtype, single.0[at] as f64, ref_out[at]);
                    vs_single = if got.is_nan() { f64::NAN } else { vs_single.max((got - single.0[at] as f64).abs()) };
                }
                for h in 0..case.heads_q {
                    let got = lse[(b * case.heads_q + h) * rows.len() + i];
                    vs_ref.add_lse(got, ref_lse[(b * case.heads_q + h) * seqlen + r]);
                    let want = single.1[(b * case.heads_q + h) * seqlen + r];
                    assert!((got - want).abs() <= 1e-4 * want.abs().max(1.0), "{case:?} on {world} GPUs: lse {got} vs the single GPU's {want}");
                }
            }
        }
    }
    let tol = out_tolerance(dtype);
    println!("{case:?} {dtype:?} on {world} GPUs: out err {:.2e} (single GPU {:.2e}), lse err {:.1e}, vs single GPU {vs_single:.2e}", vs_ref.out, single_vs_ref.out, vs_ref.lse);
    assert!(vs_ref.out <= tol && vs_ref.lse <= LSE_TOLERANCE && vs_ref.lse_inf_mismatch == 0, "{case:?} on {world} GPUs: {vs_ref:?}");
    // The ring rounds each step's part to T once: about one unit in the last place of T.
    assert!(vs_single <= tol, "{case:?} on {world} GPUs: {vs_single} from the single-GPU output");
}

fn worlds(gpus: usize) -> Vec<usize> {
    let mut w = vec![1, 2, gpus];
    w.retain(|&n| n <= gpus);
    w.dedup();
    w
}

#[test]
fn ring_matches_one_gpu_and_the_reference() {
    let Some(gpus) = gpus_or_skip("ring_matches_one_gpu_and_the_reference") else { return };
    let cases = [
        // Causal GQA with chunks that are not multiples of any tile.
        Case { batch: 2, chunk: 200, heads_q: 8, heads_kv: 2, head_dim: 128, causal: true },
        Case { batch: 1, chunk: 154, heads_q: 4, heads_kv: 4, head_dim: 64, causal: false },
        Case { batch: 1, chunk: 128, heads_q: 2, heads_kv: 1, head_dim: 256, causal: true },
        // One row per zigzag chunk.
        Case { batch: 1, chunk: 2, heads_q: 2, heads_kv: 2, head_dim: 64, causal: true },
    ];
    for world in worlds(gpus) {
        for case in &cases {
            check::<bf16>(case, world, DType::Bf16);
            check::<f16>(case, world, DType::F16);
        }
    }
}

/// A call rank `world - 1` gets wrong (an output buffer one element short) fails on every rank
/// before anything is queued: that rank with its own error, the others with the ring's, and
/// every output keeps its bytes.
#[test]
fn a_bad_call_on_one_rank_fails_on_every_rank_untouched() {
    let Some(gpus) = gpus_or_skip("a_bad_call_on_one_rank_fails_on_every_rank_untouched") else { return };
    for world in worlds(gpus) {
        let case = Case { batch: 1, chunk: 64, heads_q: 4, heads_kv: 2, head_dim: 64, causal: true };
        let results = launch(&(0..world).collect::<Vec<_>>(), |rc: RankContext| {
            let rows = case.chunk;
            let n = case.batch * rows * case.heads_q * case.head_dim;
            let nkv = n / case.heads_q * case.heads_kv;
            let up = |len: usize, v: f32| rc.stream.clone_htod(&vec![bf16::from_f32(v); len]).unwrap();
            let (q, k, v) = (up(n, 0.5), up(nkv, 0.25), up(nkv, 1.0));
            let short = rc.rank + 1 == rc.world;
            let mut out = up(if short { n - 1 } else { n }, f32::NAN);
            let r = rc.gpu.ring_attention_forward(&rc.ring, &rc.stream, &case.params(rows), &q, &k, &v, &mut out, None);
            let kept = rc.stream.clone_dtoh(&out).unwrap().iter().all(|x| x.is_nan());
            (r, kept)
        })
        .unwrap();
        for (rank, (r, kept)) in results.into_iter().enumerate() {
            assert!(kept, "rank {rank} of {world}: the output was written");
            match (rank + 1 == world, r) {
                (true, Err(Error::BufferTooSmall { tensor: "out", .. })) => {}
                (false, Err(Error::InvalidShape { what: "ring attention call", reason })) => assert!(reason.contains("another rank"), "{reason}"),
                (_, other) => panic!("rank {rank} of {world}: {other:?}"),
            }
        }
    }
}
