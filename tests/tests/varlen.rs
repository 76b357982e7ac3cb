//! Variable-length batches (packed rows, `cu_seqlens`) on the GPU against the CPU reference run
//! on each sequence separately: offsets on the host (validated) or on the GPU (clamped by the
//! kernels), K and V packed or in a paged cache; wild device offsets must keep every access
//! inside the buffers. Skips (saying so) without a GPU; the planner tests need none.
use std::ffi::c_void;

use cust::memory::{CopyDestination, DeviceBuffer};
use cust::stream::{Stream, StreamFlags};
use flashrs::{AttentionParams, AttentionParamsBuilder, BufferRef, Buffers, DType, DeviceIndex, DeviceOffsets, Error, Kernel, KernelPath, Offsets, PagedKv, Pages, Rows, Target, Variant};
use flashrs_tests::{H100, buffer_of, gpu_or_skip, params, with_splits};
use flashrs_tests::varlen::{KeyCounts, VarlenCase, VarlenKv, check_varlen_many};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn case(lens: &[(usize, usize)], hq: usize, hkv: usize, d: usize, causal: bool, dtype: DType) -> VarlenCase {
    VarlenCase::new(lens, hq, hkv, d, causal, dtype)
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
                    for device_offsets in [false, true] {
                        cases.push(VarlenCase { path, device_offsets, ..case(&lens, 4, 2, d, causal, dtype) });
                    }
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
        let c = VarlenCase { device_offsets: i % 4 >= 2, ..case(&lens, hq, hkv, [64, 128, 96][i % 3], i % 2 == 1, [DType::F16, DType::Bf16][i / 6]) };
        cases.extend(paths(&gpu).into_iter().map(|path| VarlenCase { path, ..c.clone() }));
    }
    check_varlen_many(&gpu, &cases);
}

#[test]
fn many_sequences_upload_their_offsets_in_several_launches() {
    let Some(gpu) = gpu_or_skip("many_sequences_upload_their_offsets_in_several_launches") else { return };
    // 700 sequences: 1402 offsets, more than one upload launch carries (1000); and the same
    // batch with its offsets on the GPU (no upload).
    let mut rng = StdRng::seed_from_u64(21);
    let lens: Vec<(usize, usize)> = (0..700).map(|_| (rng.random_range(0..9), rng.random_range(0..70))).collect();
    let mut cases = Vec::new();
    for path in paths(&gpu) {
        for device_offsets in [false, true] {
            cases.push(VarlenCase { path, device_offsets, ..case(&lens, 2, 1, 64, true, DType::F16) });
        }
    }
    check_varlen_many(&gpu, &cases);
}

/// A serving engine's mixed batch against a paged cache (vLLM's `flash_attn_varlen_func(...,
/// block_table=...)` call): decode rows (one query row against a long cache), chunked-prefill
/// chunks (a chunk of query rows at the end of a longer cache), a fresh prompt and an empty
/// sequence; every page size, key counts passed each of the three ways, offsets on the host
/// and on the GPU, GQA, every head dimension, causal and not; on each path (the Hopper kernels
/// on an H100/H200).
#[test]
fn paged_varlen_mixes_decode_rows_and_prefill_chunks() {
    let Some(gpu) = gpu_or_skip("paged_varlen_mixes_decode_rows_and_prefill_chunks") else { return };
    let lens = [(1, 1500), (37, 300), (1, 1), (256, 256), (0, 40), (129, 700), (1, 16)];
    let mut cases = Vec::new();
    for path in paths(&gpu) {
        for (i, page_size) in [16, 64, 256].into_iter().enumerate() {
            for counts in [KeyCounts::SequsedK, KeyCounts::KeyOffsets, KeyCounts::Longest] {
                for device_offsets in [false, true] {
                    let d = [64, 128, 256][i];
                    let dtype = if device_offsets { DType::Bf16 } else { DType::F16 };
                    let c = case(&lens, 8, 2, d, counts != KeyCounts::Longest || i != 1, dtype);
                    cases.push(VarlenCase { path, device_offsets, kv: VarlenKv::Paged { page_size, counts }, ..c });
                }
            }
        }
        // MQA with padded head_dim.
        let c = case(&lens, 6, 1, 72, true, DType::F16);
        cases.push(VarlenCase { path, device_offsets: true, kv: VarlenKv::Paged { page_size: 32, counts: KeyCounts::SequsedK }, ..c });
    }
    check_varlen_many(&gpu, &cases);
}

/// A serving engine's decode step through the variable-length entry: a few sequences of one
/// (or a few) query rows against long caches, whose grid alone would leave most SMs idle, so
/// the key ranges split across CTAs (forced counts, and the library's choice for this GPU),
/// the last split of each query block merging. Packed and paged K/V, host and device offsets,
/// GQA, causal, every head dimension; sequences without rows or keys among them.
#[test]
fn decode_batches_split_the_keys() {
    let Some(gpu) = gpu_or_skip("decode_batches_split_the_keys") else { return };
    let lens = [(1, 4000), (1, 1), (3, 2500), (0, 100), (16, 7000), (1, 0), (1, 129)];
    let mut cases = Vec::new();
    for (i, num_splits) in [None, Some(2), Some(7), Some(32)].into_iter().enumerate() {
        for kv in [VarlenKv::Packed, VarlenKv::Paged { page_size: 16, counts: KeyCounts::SequsedK }] {
            for device_offsets in [false, true] {
                let (d, dtype) = [(128, DType::F16), (64, DType::Bf16), (256, DType::F16), (96, DType::Bf16)][i];
                let c = case(&lens, 8, 2, d, (i + device_offsets as usize) % 2 == 0, dtype);
                cases.push(VarlenCase { device_offsets, kv, num_splits, ..c });
            }
        }
    }
    // One query row per sequence, MQA: the 16-row decode tiles.
    let rows: Vec<(usize, usize)> = (0..3).map(|b| (1, 3000 + 1000 * b)).collect();
    cases.push(VarlenCase { device_offsets: true, ..case(&rows, 32, 1, 128, false, DType::F16) });
    check_varlen_many(&gpu, &cases);
}

/// Offsets on the GPU are the caller's, unchecked: decreasing, negative, past the totals,
/// longer than the maxima. The kernels clamp them, so the call completes, every output element
/// it writes is finite, and nothing outside the output and log-sum-exp (guard regions on both
/// sides, inside the same allocations) changes. Packed K/V on every path, and a paged cache
/// whose table and key counts are wild too. (`sanitize_shapes` runs memcheck on such calls.)
#[test]
fn wild_device_offsets_stay_inside_the_buffers() {
    let Some(gpu) = gpu_or_skip("wild_device_offsets_stay_inside_the_buffers") else { return };
    let (hq, hkv, d) = (4, 2, 128);
    let (tq, tk, max_q, max_k): (usize, usize, usize, usize) = (250, 700, 100, 300);
    let cq = [5, -4, 9, 1000, i32::MIN, i32::MAX, 3];
    let ck = [0, 250, 2, -1, 400, 699, 8];
    let batch = cq.len() - 1;
    let pg = Pages { page_size: 16, num_pages: 30, pages_per_seq: max_k.div_ceil(16) };
    let mut rng = StdRng::seed_from_u64(5);
    let f16s = |n: usize, rng: &mut StdRng| DeviceBuffer::from_slice(&(0..n).map(|_| half::f16::from_f32(rng.random_range(-1.0..1.0))).collect::<Vec<_>>()).unwrap();
    let q = f16s(tq * hq * d, &mut rng);
    let kv = [f16s(tk * hkv * d, &mut rng), f16s(tk * hkv * d, &mut rng)];
    let cache = [f16s(pg.num_pages * pg.page_size * hkv * d, &mut rng), f16s(pg.num_pages * pg.page_size * hkv * d, &mut rng)];
    let table: Vec<i32> = (0..batch * pg.pages_per_seq).map(|i| [-7, 3, 29, 30, i32::MAX, 11][i % 6]).collect();
    let table = DeviceBuffer::from_slice(&table).unwrap();
    let used = DeviceBuffer::from_slice(&[-5, 300, 1, i32::MAX, 0, 17]).unwrap();
    let (cq_d, ck_d) = (DeviceBuffer::from_slice(&cq).unwrap(), DeviceBuffer::from_slice(&ck).unwrap());
    // Output and lse with guards of 64 elements on each side (16-byte aligned inside).
    const GUARD: usize = 64;
    let canary_o = half::f16::from_f32(-7.0);
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    let r = |ptr: u64, len: usize| BufferRef { ptr, len };
    // (path, paged, forced splits): split launches write partials for the clamped rows too.
    let mut runs = Vec::new();
    for path in paths(&gpu) {
        runs.push((path, false, None));
    }
    runs.extend([(KernelPath::MmaSync, true, None), (KernelPath::MmaSync, false, Some(4)), (KernelPath::MmaSync, true, Some(3))]);
    for (path, paged, splits) in runs {
        let o = DeviceBuffer::from_slice(&vec![canary_o; tq * hq * d + 2 * GUARD]).unwrap();
        let lse = DeviceBuffer::from_slice(&vec![-9.0f32; hq * tq + 2 * GUARD]).unwrap();
        let offsets = DeviceOffsets::new(DeviceIndex::new(&cq_d), tq).keys(DeviceIndex::new(&ck_d), tk);
        let p = params(batch, max_q, max_k, hq, d).varlen_device(offsets).heads_kv(hkv).causal(true).path(path);
        let (p, k, v) = if paged {
            let cache_kv = PagedKv::new(pg, DeviceIndex::new(&table)).seqused_k(DeviceIndex::new(&used));
            (p.paged(cache_kv), buffer_of(&cache[0]), buffer_of(&cache[1]))
        } else {
            (p, buffer_of(&kv[0]), buffer_of(&kv[1]))
        };
        let p = with_splits(p, splits);
        let o_at = r(buffer_of(&o).ptr + 2 * GUARD as u64, tq * hq * d);
        let bufs = Buffers::new(DType::F16, buffer_of(&q), k, v, o_at).lse(r(buffer_of(&lse).ptr + 4 * GUARD as u64, hq * tq));
        // SAFETY: live buffers of at least these capacities, this GPU's stream.
        unsafe { gpu.attention_forward_raw(stream.as_inner() as *mut c_void, &p, &bufs) }.expect("launch failed");
        stream.synchronize().expect("the kernel faulted on wild offsets");
        let mut oh = vec![half::f16::ZERO; o.len()];
        o.copy_to(&mut oh[..]).unwrap();
        let mut lh = vec![0f32; lse.len()];
        lse.copy_to(&mut lh[..]).unwrap();
        let n = oh.len();
        let what = format!("{} {}, splits {splits:?}", path.name(), if paged { "paged" } else { "packed" });
        assert!(oh[..GUARD].iter().chain(&oh[n - GUARD..]).all(|&x| x == canary_o), "{what}: output guard overwritten");
        assert!(lh[..GUARD].iter().chain(&lh[lh.len() - GUARD..]).all(|&x| x == -9.0), "{what}: lse guard overwritten");
        let written = oh[GUARD..n - GUARD].iter().filter(|&&x| x != canary_o).count();
        assert!(oh[GUARD..n - GUARD].iter().all(|x| x.is_finite()), "{what}: non-finite output");
        // Clamped, the sequences' query rows are 5..5, 0..9, 9..109, 250..250, 0..100 and
        // 250..250: rows 0..109 are written (zeros where a sequence has no key), no other.
        // Packed keys clamp to 0..250, 250..250, 2..2, 0..300, 400..699, 699..699; paged key
        // counts (seqused_k overrides the key offsets) to 300, 1, 0 for sequences 1, 2, 4 (the
        // others have no query rows).
        assert_eq!(written, 109 * hq * d, "{what}: output elements written");
        println!("ok   wild device offsets, {what}: {written} output elements written, guards intact");
    }
}

/// Fake f16 buffers of these lengths (planning never touches them).
fn bufs(q: usize, k: usize, lse: usize) -> Buffers {
    let r = |ptr: u64, len: usize| BufferRef { ptr, len };
    Buffers::new(DType::F16, r(1 << 32, q), r(2 << 32, k), r(3 << 32, k), r(4 << 32, q)).lse(r(5 << 32, lse))
}

/// A variable-length call of `heads_q` heads of `head_dim` with host offsets.
fn varlen<'a>(cq: &[i32], ck: &[i32], heads_q: usize, head_dim: usize) -> AttentionParamsBuilder<'a> {
    AttentionParams::builder().varlen(cq, ck).heads_q(heads_q).head_dim(head_dim)
}

/// The mma.sync kernels' target (an A100): Auto runs them there.
const A100: Target = Target::A100;

#[test]
fn plan_validates_offsets_and_packed_extents() {
    let (cq, ck) = (vec![0, 3, 3, 30], vec![0, 5, 7, 20]);
    let call = varlen(&cq, &ck, 4, 64).heads_kv(2).causal(true);
    let p = call.clone().build().unwrap();
    assert_eq!((p.batch, p.seqlen_q, p.seqlen_k), (3, 27, 13));
    let flashrs::TensorLens { q: nq, k: nk, lse: nl, .. } = p.contiguous_lens().unwrap();
    assert_eq!((nq, nk, nl), (30 * 4 * 64, 20 * 2 * 64, 4 * 30));
    let plan = p.plan(&bufs(nq, nk, nl), &A100).expect("valid varlen call");
    assert!(matches!(plan.kernel, Kernel::Mma { variant: Variant::Varlen, config, .. } if config.head_dim == 64), "{}", plan.kernel);
    assert_eq!(plan.grid, 3 * 4);
    assert_eq!(plan.params.q_strides, [0, 4 * 64, 64]);
    assert_eq!((plan.params.total_q, plan.params.total_k), (30, 20));
    assert_eq!(plan.upload.as_deref(), Some(&[0, 3, 3, 30, 0, 5, 7, 20][..]));
    assert!(plan.split.is_none() && plan.packed_rows.is_none());
    // On an H100 the Hopper kernel: the packed rows as one sequence, the grid sized for the
    // longest sequence (3 sequences x 4 heads x 1 block of 192 rows).
    let h = p.plan(&bufs(nq, nk, nl), &H100).unwrap();
    assert!(matches!(h.kernel, Kernel::Sm90 { varlen: true, paged: false, .. }), "{}", h.kernel);
    assert_eq!((h.packed_rows, h.tiles), (Some([30, 20]), 3 * 4));
    // Buffers one element short of the packed totals are refused.
    for b in [bufs(nq - 1, nk, nl), bufs(nq, nk - 1, nl), bufs(nq, nk, nl - 1)] {
        assert!(matches!(p.plan(&b, &H100), Err(Error::BufferTooSmall { .. })), "{b:?}");
    }
    let bad = |cq: &[i32], ck: &[i32]| {
        let q = call.clone().rows(Rows::Packed(Offsets::Host { cu_seqlens_q: cq.to_vec(), cu_seqlens_k: ck.to_vec() })).build().unwrap();
        q.plan(&bufs(nq, nk, nl), &H100)
    };
    assert!(bad(&[0, 3, 30], &ck).is_err(), "wrong count");
    assert!(bad(&[1, 3, 3, 30], &ck).is_err(), "not starting at 0");
    assert!(bad(&[0, 5, 3, 30], &ck).is_err(), "decreasing");
    assert!(bad(&[0, 3, 3, 40], &ck).is_err(), "longer than max_seqlen_q");
    assert!(bad(&cq, &[]).is_err(), "unpaged calls need key offsets");
    assert!(call.clone().path(KernelPath::Wgmma).build().unwrap().plan(&bufs(nq, nk, nl), &H100).unwrap().kernel.needs_sm90a());
    // Forced splits need at least two key tiles per call (13 keys: one); more than 32 is an
    // error, and the wgmma path does not split.
    assert!(call.clone().num_splits(4).build().unwrap().plan(&bufs(nq, nk, nl), &H100).unwrap().split.is_none());
    assert!(matches!(call.num_splits(33).build().unwrap().plan(&bufs(nq, nk, nl), &H100), Err(Error::InvalidShape { what: "num_splits", .. })));
}

/// Decode-shaped variable-length calls split their key ranges like fixed-length decode: the
/// split variable-length kernel on a split configuration (16-row decode tiles for one query
/// row per sequence), a workspace sized for the longest sequence's rows, mma.sync only.
#[test]
fn plan_splits_decode_shaped_varlen_calls() {
    let (cq, ck) = (vec![0, 1, 2, 3], vec![0, 4000, 4001, 7000]);
    let call = varlen(&cq, &ck, 8, 128).heads_kv(2);
    let p = call.clone().num_splits(5).build().unwrap();
    let flashrs::TensorLens { q: nq, k: nk, lse: nl, .. } = p.contiguous_lens().unwrap();
    let plan = p.plan(&bufs(nq, nk, nl), &H100).expect("valid split varlen call");
    assert_eq!(plan.kernel.to_string(), "flash_fwd_varlen_split_f16_d128_16x128w4s2");
    let s = plan.split.as_ref().expect("a split plan");
    // 4000 keys: 32 tiles of 128, 5 splits of 7 tiles.
    assert_eq!((s.num_splits, plan.params.split_tiles, plan.grid), (5, 7, 3 * 8 * 5));
    assert_eq!((s.counters_len, s.o_accum_len, s.lse_accum_len), (3 * 8, 5 * 3 * 8 * 128, 5 * 3 * 8));
    assert_eq!(plan.upload.as_deref(), Some(&[0, 1, 2, 3, 0, 4000, 4001, 7000][..]));
    assert!(p.to_builder().path(KernelPath::Wgmma).build().unwrap().plan(&bufs(nq, nk, nl), &H100).is_err(), "the wgmma path does not split");
    // The planner's own choice for the target: 24 CTAs on 132 SMs split.
    assert!(call.clone().build().unwrap().plan(&bufs(nq, nk, nl), &H100).unwrap().split.is_some_and(|s| s.num_splits > 1));
    // Decode-shaped calls run on the decode tiles even unsplit, except on a forced wgmma path,
    // which keeps its own variable-length kernel; on GPUs of 99 KB per CTA, 64-key tiles.
    let one = call.num_splits(1);
    let unsplit = one.clone().build().unwrap();
    assert_eq!(unsplit.plan(&bufs(nq, nk, nl), &H100).unwrap().kernel.to_string(), "flash_fwd_varlen_split_f16_d128_16x128w4s2");
    assert_eq!(unsplit.plan(&bufs(nq, nk, nl), &Target::L4).unwrap().kernel.to_string(), "flash_fwd_varlen_split_f16_d128_16x64w4s2");
    let forced = one.path(KernelPath::Wgmma).build().unwrap().plan(&bufs(nq, nk, nl), &H100).unwrap();
    assert!(matches!(forced.kernel, Kernel::Sm90 { varlen: true, paged: false, .. }), "{}", forced.kernel);
}

/// Offsets on the GPU: the plan points the kernel at them (no upload), sizes the packed
/// tensors by the given totals, checks the offsets' own buffers with typed errors naming them.
/// (Device offsets for a fixed-length call, or none for a device-offset one, cannot be
/// written: the offsets are part of the call's layout.)
#[test]
fn plan_takes_device_offsets_and_names_their_problems() {
    let idx = flashrs_tests::planning_index;
    let offsets = DeviceOffsets::new(idx(6 << 32, 4), 30).keys(idx(7 << 32, 4), 20);
    let call = |o: DeviceOffsets<'static>| params(3, 27, 13, 4, 64).varlen_device(o).heads_kv(2).causal(true).build().unwrap();
    // `offsets` with one field changed.
    let edit = |f: &dyn Fn(&mut DeviceOffsets<'static>)| {
        let mut o = offsets;
        f(&mut o);
        o
    };
    let p = call(offsets);
    let flashrs::TensorLens { q: nq, k: nk, lse: nl, .. } = p.contiguous_lens().unwrap();
    assert_eq!((nq, nk, nl), (30 * 4 * 64, 20 * 2 * 64, 4 * 30));
    let plan = p.plan(&bufs(nq, nk, nl), &A100).expect("valid device-offset call");
    assert!(matches!(plan.kernel, Kernel::Mma { variant: Variant::Varlen, .. }), "{}", plan.kernel);
    assert_eq!((plan.params.cu_seqlens_q, plan.params.cu_seqlens_k), (6 << 32, 7 << 32));
    assert_eq!((plan.params.total_q, plan.params.total_k, plan.grid), (30, 20, 3 * 4));
    assert!(plan.upload.is_none(), "device offsets are not uploaded");
    assert_eq!(p.plan(&bufs(nq, nk, nl), &H100).unwrap().packed_rows, Some([30, 20]));

    let err = |o: DeviceOffsets<'static>| call(o).plan(&bufs(nq, nk, nl), &H100).unwrap_err();
    assert!(matches!(err(edit(&|o| o.cu_seqlens_q = idx(6 << 32, 3))), Error::BufferTooSmall { tensor: "cu_seqlens_q", needed: 4, len: 3 }));
    assert!(matches!(err(edit(&|o| o.cu_seqlens_k = Some(idx(7 << 32, 1)))), Error::BufferTooSmall { tensor: "cu_seqlens_k", needed: 4, len: 1 }));
    assert!(matches!(err(edit(&|o| o.cu_seqlens_q = idx((6 << 32) + 2, 4))), Error::Misaligned { tensor: "cu_seqlens_q", .. }));
    assert!(matches!(err(edit(&|o| o.cu_seqlens_q = idx(0, 4))), Error::InvalidBuffer { tensor: "cu_seqlens_q", .. }));
    assert!(matches!(err(edit(&|o| o.cu_seqlens_k = None)), Error::InvalidBuffer { tensor: "cu_seqlens_k", .. }));
    // The output may not overlap the offsets (they are read while it is written).
    assert!(matches!(err(edit(&|o| o.cu_seqlens_q = idx(4 << 32, 4))), Error::InvalidBuffer { tensor: "out", .. }));
    // Too-small packed buffers for the given totals.
    assert!(matches!(p.plan(&bufs(nq - 1, nk, nl), &H100), Err(Error::BufferTooSmall { tensor: "q", .. })));
    // No packed query rows: nothing to launch.
    assert!(call(edit(&|o| o.total_q = 0)).plan(&bufs(nq, nk, nl), &H100).unwrap().is_empty());
    // Totals past the 32-bit row indices.
    assert!(matches!(err(edit(&|o| o.total_q = 1 << 31)), Error::InvalidShape { what: "total_q", .. }));
}

/// Paged variable-length calls: the queries packed, K and V from the cache (page strides kept),
/// key offsets optional; the kernel is the paged variable-length one, on Hopper or mma.sync.
#[test]
fn plan_pages_the_keys_of_packed_queries() {
    let idx = flashrs_tests::planning_index;
    let pages = Pages { page_size: 16, num_pages: 40, pages_per_seq: 20 };
    let cache = PagedKv::new(pages, idx(8 << 32, 3 * 20)).seqused_k(idx(9 << 32, 3));
    for cu_k in [vec![], vec![0, 300, 301, 320]] {
        let call = varlen(&[0, 1, 38, 40], &cu_k, 8, 128).seqlen_k(300).heads_kv(2).causal(true).paged(cache);
        let p = call.clone().build().unwrap();
        let flashrs::TensorLens { q: nq, k: nk, lse: nl, .. } = p.contiguous_lens().unwrap();
        assert_eq!((nq, nk, nl), (40 * 8 * 128, 40 * 16 * 2 * 128, 8 * 40));
        let b = bufs(nq, nk, nl);
        // Prefill chunks (38 rows) take the Hopper kernel; mma.sync's when asked.
        let hopper = p.plan(&b, &H100).expect("valid paged varlen call");
        assert!(matches!(hopper.kernel, Kernel::Sm90 { varlen: true, paged: true, .. }), "{}", hopper.kernel);
        assert_eq!((hopper.params.k_strides, hopper.packed_rows), (p.plan(&b, &H100).unwrap().params.k_strides, Some([40, 0])));
        let plan = call.clone().path(KernelPath::MmaSync).build().unwrap().plan(&b, &H100).expect("valid paged varlen call");
        assert!(matches!(plan.kernel, Kernel::Mma { variant: Variant::VarlenPaged, .. }), "{}", plan.kernel);
        assert_eq!(plan.params.k_strides[0], 16 * 2 * 128, "page stride kept");
        assert_eq!(plan.params.q_strides[0], 0, "queries packed");
        assert_eq!(plan.upload.as_ref().map(Vec::len), Some(4 + cu_k.len()));
        let split = call.clone().num_splits(2).build().unwrap().plan(&b, &H100).expect("paged varlen calls split too");
        assert_eq!(split.split.as_ref().map(|s| s.num_splits), Some(2));
        assert!(matches!(split.kernel, Kernel::Mma { variant: Variant::VarlenPaged, .. }), "{}", split.kernel);
        let wgmma = call.clone().path(KernelPath::Wgmma).build().unwrap().plan(&b, &H100).expect("paged calls on wgmma");
        assert_eq!(wgmma.kernel, hopper.kernel);
        assert!(call.path(KernelPath::Wgmma).num_splits(2).build().unwrap().plan(&b, &H100).is_err(), "split calls run on mma.sync");
    }
}
