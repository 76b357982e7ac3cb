//! Variable-length batches (packed rows, `cu_seqlens`) on the GPU against the CPU reference run
//! on each sequence separately; offsets validated on the host. Skips (saying so) without a GPU.
use flashrs::attention::{BufferRef, Buffers};
use flashrs::{AttentionParams, DType, Error, KernelPath};
use flashrs_tests::gpu_or_skip;
use flashrs_tests::varlen::{VarlenCase, check_varlen_many};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn case(lens: &[(usize, usize)], hq: usize, hkv: usize, d: usize, causal: bool, dtype: DType) -> VarlenCase {
    VarlenCase { lens: lens.to_vec(), heads_q: hq, heads_kv: hkv, head_dim: d, causal, dtype, path: KernelPath::Auto }
}

/// The paths `gpu` runs variable-length calls on: mma.sync, and on an H100/H200 the Hopper
/// kernels too.
fn paths(gpu: &flashrs::Gpu) -> Vec<KernelPath> {
    if gpu.arch() == flashrs::Arch::Sm90a { vec![KernelPath::MmaSync, KernelPath::Wgmma] } else { vec![KernelPath::MmaSync] }
}

#[test]
fn ragged_lengths_causal_and_gqa() {
    let Some(gpu) = gpu_or_skip("ragged_lengths_causal_and_gqa") else { return };
    let lens = [(1, 1), (1, 1037), (300, 300), (1037, 1100), (17, 5), (0, 64), (128, 128), (129, 0)];
    let mut cases = Vec::new();
    for path in paths(&gpu) {
        for dtype in [DType::F16, DType::Bf16] {
            for d in [64, 128, 256] {
                for causal in [false, true] {
                    cases.push(VarlenCase { path, ..case(&lens, 4, 2, d, causal, dtype) });
                }
            }
        }
    }
    check_varlen_many(&gpu, &cases);
}

#[test]
fn random_ragged_batches() {
    let Some(gpu) = gpu_or_skip("random_ragged_batches") else { return };
    let mut rng = StdRng::seed_from_u64(8);
    let mut cases = Vec::new();
    for i in 0..12 {
        let n = rng.random_range(1..7);
        let lens: Vec<(usize, usize)> = (0..n)
            .map(|_| {
                let q = if rng.random_bool(0.2) { 1 } else { rng.random_range(1..1500) };
                let k = if rng.random_bool(0.3) { q } else { rng.random_range(1..1500) };
                (q, k)
            })
            .collect();
        let (hq, hkv) = [(4, 4), (8, 2), (6, 1)][i % 3];
        let c = case(&lens, hq, hkv, [64, 128, 96][i % 3], i % 2 == 1, [DType::F16, DType::Bf16][i / 6]);
        cases.extend(paths(&gpu).into_iter().map(|path| VarlenCase { path, ..c.clone() }));
    }
    check_varlen_many(&gpu, &cases);
}

#[test]
fn many_sequences_upload_their_offsets_in_several_launches() {
    let Some(gpu) = gpu_or_skip("many_sequences_upload_their_offsets_in_several_launches") else { return };
    // 700 sequences: 1402 offsets, more than one upload launch carries (1000).
    let mut rng = StdRng::seed_from_u64(21);
    let lens: Vec<(usize, usize)> = (0..700).map(|_| (rng.random_range(0..9), rng.random_range(0..70))).collect();
    let cases: Vec<VarlenCase> = paths(&gpu).into_iter().map(|path| VarlenCase { path, ..case(&lens, 2, 1, 64, true, DType::F16) }).collect();
    check_varlen_many(&gpu, &cases);
}

fn bufs(q: usize, k: usize, lse: usize) -> Buffers {
    let r = |ptr: u64, len: usize| BufferRef { ptr, len };
    Buffers { q: r(1 << 32, q), k: r(2 << 32, k), v: r(3 << 32, k), o: r(4 << 32, q), lse: Some(r(5 << 32, lse)), paged: None }
}

#[test]
fn plan_validates_offsets_and_packed_extents() {
    let (cq, ck) = (vec![0, 3, 3, 10], vec![0, 5, 7, 20]);
    let p = AttentionParams::new_varlen(&cq, &ck, 4, 64).heads_kv(2).causal(true);
    assert_eq!((p.batch, p.seqlen_q, p.seqlen_k), (3, 7, 13));
    let (nq, nk, nl) = p.contiguous_lens();
    assert_eq!((nq, nk, nl), (10 * 4 * 64, 20 * 2 * 64, 4 * 10));
    let plan = p.plan(&bufs(nq, nk, nl)).expect("valid varlen call");
    assert!(plan.kernel.starts_with("flash_fwd_varlen_f16_d64_"), "{}", plan.kernel);
    assert_eq!(plan.grid, 3 * 4);
    assert_eq!(plan.params.q_strides, [0, 4 * 64, 64]);
    assert_eq!(plan.params.total_q, 10);
    assert_eq!(plan.varlen_offsets.as_deref(), Some(&[0, 3, 3, 10, 0, 5, 7, 20][..]));
    assert!(plan.split.is_none());
    // Auto carries the Hopper launch beside: the packed rows as one sequence, the grid sized
    // for the longest sequence (3 sequences x 4 heads x 1 block of 192 rows).
    let w = plan.wgmma.as_ref().expect("variable-length calls have a Hopper launch");
    assert_eq!((w.packed_rows, w.grid), (Some([10, 20]), 3 * 4));
    // Buffers one element short of the packed totals are refused.
    for b in [bufs(nq - 1, nk, nl), bufs(nq, nk - 1, nl), bufs(nq, nk, nl - 1)] {
        assert!(matches!(p.plan(&b), Err(Error::BufferTooSmall { .. })), "{b:?}");
    }
    let bad = |cq: &[i32], ck: &[i32]| {
        let mut q = p.clone();
        q.varlen = Some(flashrs::Varlen { cu_seqlens_q: cq.to_vec(), cu_seqlens_k: ck.to_vec() });
        q.plan(&bufs(nq, nk, nl))
    };
    assert!(bad(&[0, 3, 10], &ck).is_err(), "wrong count");
    assert!(bad(&[1, 3, 3, 10], &ck).is_err(), "not starting at 0");
    assert!(bad(&[0, 5, 3, 10], &ck).is_err(), "decreasing");
    assert!(bad(&[0, 3, 3, 20], &ck).is_err(), "longer than max_seqlen_q");
    assert!(p.clone().path(KernelPath::Wgmma).plan(&bufs(nq, nk, nl)).unwrap().is_wgmma());
    assert!(p.clone().num_splits(Some(4)).plan(&bufs(nq, nk, nl)).is_err());
}
