//! A small set of launches for compute-sanitizer (`scripts/sanitize.sh` runs this binary under
//! memcheck, racecheck and synccheck): every tile configuration forced with `.config(c)`, for
//! both dtypes, on ragged, causal, GQA and padded-head_dim shapes, plus edge shapes (no keys,
//! rows without keys, single rows, a strided layout, decode, V of its own head dimension, paged
//! caches with wild table entries, variable-length batches; on the default path, which is the
//! wgmma kernel on sm_90a GPUs, and on mma.sync). Buffers are sized exactly
//! (`flashrs_tests::attn::run_case`), so any access past a tensor's extent is outside its
//! allocation, where memcheck sees it. Each launch is also checked against the reference.
//! The backward pass on ragged, causal, GQA, variable-length and deterministic shapes
//! (`sanitize_backward`, with windows, softcap, ALiBi and sinks), the attention modifications' kernels (`sanitize_mods`), and the block-mask builder (`sanitize_dense_mask`), FP8 K/V caches (`sanitize_fp8_cache`). Small on purpose: the sanitizers slow kernels down 10-100x. Skips
//! without a GPU.
use flashrs::tiles::{CONFIGS, SMALL_D256};
use flashrs::{AttentionParams, AttentionParamsBuilder, DType, DimOrder, Fp8, KernelPath};
use flashrs_tests::attn::{check_many, check_mods_many, check_mods_many_on};
use flashrs_tests::mods::{HostMods, host_lists, random_bias, random_blocks, relative_bias_kernels};
use flashrs_tests::grad::{GradCase, check_grads_on};
use rand::SeedableRng;
use flashrs_tests::{gpu_or_skip, params, with_splits};
use flashrs_tests::paged::{PagedCase, TableFill, check_paged, run_paged};
use flashrs_tests::varlen::{VarlenCase, check_varlen_many};

#[test]
fn sanitize_every_config() {
    let Some(gpu) = gpu_or_skip("sanitize_every_config") else { return };
    let mut cases = Vec::new();
    for c in CONFIGS {
        for dtype in [DType::F16, DType::Bf16] {
            // Ragged causal GQA: partial query and key tiles, masked diagonal blocks.
            cases.push((params(1, 77, 133, 4, c.head_dim).heads_kv(2).causal(true).config(c).build().unwrap(), dtype));
            // head_dim below the kernel's (zero-filled chunks), more queries than keys.
            cases.push((params(2, 130, 65, 2, c.head_dim - 8).config(c).build().unwrap(), dtype));
        }
    }
    check_many(&gpu, &cases);
}

#[test]
fn sanitize_mods() {
    let Some(gpu) = gpu_or_skip("sanitize_mods") else { return };
    // Windows that skip key tiles on both sides, rows that see no key (with a sink), ALiBi per
    // batch entry, a softcap; ragged, GQA, padded head_dim; both paths; every head dimension.
    let all = HostMods { window: (Some(70), Some(20)), softcap: Some(4.0), alibi: Some((vec![0.1, 0.2, 0.3, 0.4, 0.5, 0.6], true)), sinks: Some(vec![1.0, -1.0, 0.0]), blocks: None, bias: None };
    let sinks = HostMods { sinks: Some(vec![0.5, 1.5]), ..HostMods::default() };
    // Block masks: per head with partial and full lists, and one whose indices point before
    // and past the keys (the kernels clamp them to a block of no key).
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let sparse = HostMods { blocks: Some(random_blocks(2, 3, 333, 517, 0.5, &mut rng)), window: (Some(200), None), ..HostMods::default() };
    let mut hostile = flashrs::HostBlockMask::causal(300, 300).unwrap();
    hostile.indices[0] = -5;
    hostile.full_indices[hostile.kv_blocks * 2] = 1000;
    let hostile = HostMods { blocks: Some(hostile), ..HostMods::default() };
    let mut cases = vec![];
    for path in [KernelPath::Auto, KernelPath::MmaSync] {
        for (d, dtype) in [(64, DType::F16), (120, DType::Bf16), (256, DType::F16)] {
            cases.push((params(2, 333, 517, 3, d).heads_kv(1).path(path).build().unwrap(), dtype, all.clone()));
            cases.push((params(1, 300, 40, 2, d).causal(true).path(path).build().unwrap(), dtype, sinks.clone()));
            cases.push((params(2, 333, 517, 3, d).heads_kv(1).path(path).build().unwrap(), dtype, sparse.clone()));
            cases.push((params(1, 300, 300, 2, d).path(path).build().unwrap(), dtype, hostile.clone()));
        }
    }
    check_mods_many(&gpu, &cases);
}

#[test]
fn sanitize_custom_kernels() {
    let Some(gpu) = gpu_or_skip("sanitize_custom_kernels") else { return };
    // The relative_bias example's kernels: the bias alone and over every built-in
    // modification, ragged and GQA, on the Hopper entries (where the GPU has them) and mma.sync.
    let kernels = relative_bias_kernels(&gpu);
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let mut cases = vec![];
    for path in [KernelPath::Auto, KernelPath::MmaSync] {
        for (d, dtype) in [(64, DType::Bf16), (128, DType::F16)] {
            let bias = random_bias(3, 20, 517, &mut rng);
            let all = HostMods { window: (Some(70), Some(20)), softcap: Some(4.0), alibi: Some((vec![0.1, 0.2, 0.3], false)), sinks: Some(vec![1.0, -1.0, 0.0]), blocks: None, bias: Some(bias.clone()) };
            cases.push((params(2, 333, 517, 3, d).heads_kv(1).path(path).build().unwrap(), dtype, all));
            cases.push((params(1, 300, 40, 3, d).causal(true).path(path).build().unwrap(), dtype, HostMods { bias: Some(bias), ..HostMods::default() }));
        }
    }
    check_mods_many_on(&gpu, Some(&kernels), &cases);
    // Their backward main kernels, ragged and GQA, with and without the built-in ones.
    let bias = random_bias(4, 20, 333, &mut rng);
    let alone = GradCase { bias: Some(bias), ..GradCase::batched(2, 333, 200, 4, 2, 128, true, DType::F16) };
    let all = GradCase { window: (Some(70), Some(20)), softcap: Some(4.0), alibi: true, causal: false, head_dim: 64, dtype: DType::Bf16, ..alone.clone() };
    check_grads_on(&gpu, Some(&kernels), &[alone, all]);
}

#[test]
fn sanitize_edge_shapes() {
    let Some(gpu) = gpu_or_skip("sanitize_edge_shapes") else { return };
    let shapes = [
        (params(1, 200, 30, 2, 64).causal(true), DType::F16), // the first 170 rows see no key
        (params(1, 64, 0, 2, 64), DType::F16),                // no keys at all
        (params(3, 1, 1, 2, 128), DType::F16),                // single rows
        (params(2, 70, 90, 4, 64).dim_order(DimOrder::Bhsd).causal(true), DType::F16),
        (params(2, 1, 300, 8, 128).heads_kv(1), DType::F16), // decode, MQA
        (params(1, 129, 257, 2, 256).causal(true), DType::Bf16),
        (params(2, 150, 190, 3, 72).causal(true), DType::F16), // padded head_dim on the default path
        // V of its own head dimension: the Hopper 192 / 128 kernel, a wider V, a split decode.
        (params(2, 150, 190, 4, 192).heads_kv(2).head_dim_v(128).causal(true), DType::Bf16),
        (params(1, 77, 133, 2, 40).head_dim_v(136), DType::F16),
        (params(2, 1, 700, 8, 128).heads_kv(2).head_dim_v(64).num_splits(3), DType::Bf16),
        // 480 work tiles: on sm_90a, persistent CTAs claim tiles from the launch counter.
        (params(2, 1000, 300, 40, 64).heads_kv(8).causal(true), DType::F16),
    ];
    // Auto runs the wgmma kernel on sm_90a GPUs (default config per head_dim); MmaSync the
    // mma.sync one.
    let cases: Vec<(AttentionParams<'static>, DType)> =
        [KernelPath::Auto, KernelPath::MmaSync].iter().flat_map(|&path| shapes.iter().map(move |(p, dtype)| (p.clone().path(path).build().unwrap(), *dtype))).collect();
    check_many(&gpu, &cases);
}

#[test]
fn sanitize_varlen() {
    let Some(gpu) = gpu_or_skip("sanitize_varlen") else { return };
    // Packed rows sized exactly: the last sequence's tiles reach past the totals, and the others'
    // into the next sequence's rows. An empty sequence, one without keys, GQA, causal.
    let lens = vec![(130, 70), (0, 5), (1, 300), (200, 0), (77, 129)];
    let mut cases = Vec::new();
    for path in [KernelPath::Auto, KernelPath::MmaSync] {
        for (d, causal, dtype) in [(64, true, DType::F16), (128, false, DType::Bf16), (256, true, DType::F16)] {
            let c = VarlenCase { path, ..VarlenCase::new(&lens, 4, 2, d, causal, dtype) };
            cases.push(c.clone());
            // Offsets on the GPU: the kernels clamp them, here to the same rows.
            cases.push(VarlenCase { device_offsets: true, ..c.clone() });
            // Forced splits: partials in the workspace, the last split merging.
            cases.push(VarlenCase { num_splits: Some(3), path: KernelPath::MmaSync, ..c });
        }
    }
    check_varlen_many(&gpu, &cases);
}

/// The head_dim-256 configuration GPUs of 99 or 163 KB per CTA fall back to (`SMALL_D256`), on
/// every variant they run it in: plain, split, variable-length (unsplit and split, host and
/// device offsets), paged, and paged under packed queries. (The H100 never chooses it: it is
/// forced here.)
#[test]
fn sanitize_small_gpu_fallback() {
    use flashrs_tests::varlen::{KeyCounts, VarlenKv};
    let Some(gpu) = gpu_or_skip("sanitize_small_gpu_fallback") else { return };
    let small = |p: AttentionParamsBuilder<'static>| p.config(SMALL_D256).build().unwrap();
    check_many(
        &gpu,
        &[
            (small(params(1, 77, 133, 4, 256).heads_kv(2).causal(true)), DType::F16),
            (small(params(2, 1, 3000, 8, 256).heads_kv(2).num_splits(4)), DType::Bf16),
            (small(params(2, 16, 700, 4, 248).heads_kv(1).causal(true)), DType::F16),
        ],
    );
    let lens = vec![(130, 70), (0, 5), (1, 300), (200, 0), (77, 129)];
    let base = VarlenCase { path: KernelPath::MmaSync, config: Some(SMALL_D256), ..VarlenCase::new(&lens, 4, 2, 256, true, DType::F16) };
    let paged = VarlenKv::Paged { page_size: 16, counts: KeyCounts::SequsedK };
    check_varlen_many(
        &gpu,
        &[
            base.clone(),
            VarlenCase { device_offsets: true, dtype: DType::Bf16, ..base.clone() },
            VarlenCase { num_splits: Some(3), ..base.clone() },
            VarlenCase { kv: paged, ..base.clone() },
            VarlenCase { kv: paged, device_offsets: true, num_splits: Some(2), ..base },
        ],
    );
    let call = |sq, splits| with_splits(params(3, sq, 300, 8, 256).heads_kv(2).causal(sq > 1).config(SMALL_D256), splits);
    check_paged(&gpu, &[PagedCase::new(call(1, None), DType::F16, 16, Some(vec![300, 0, 17]), 1), PagedCase::new(call(5, Some(3)), DType::F16, 64, Some(vec![1, 299, 64]), 0)]);
}

/// The block-mask builder on ragged shapes, every buffer exactly as long as the build needs
/// (the dense mask's last byte is the last one read), word and byte loads, checked against
/// the host's builder.
#[test]
fn sanitize_dense_mask() {
    use cust::memory::{CopyDestination, DeviceBuffer};
    let Some(gpu) = gpu_or_skip("sanitize_dense_mask") else { return };
    let stream = cust::stream::Stream::new(cust::stream::StreamFlags::NON_BLOCKING, None).unwrap();
    for (b, h, sq, sk) in [(1, 2, 130, 260), (1, 1, 129, 259), (2, 1, 1, 1), (1, 1, 300, 7)] {
        let dense: Vec<u8> = (0..b * h * sq * sk).map(|i| ((i * 2654435761) >> 7 & 3 != 0) as u8).collect();
        let shape = flashrs::DenseMaskShape::new(b, h, sq, sk).unwrap();
        let dense_d = DeviceBuffer::from_slice(&dense).unwrap();
        let list = |n: usize| DeviceBuffer::from_slice(&vec![-1i32; n]).unwrap();
        let (mut c, mut i, mut fc, mut fi) = (list(shape.counts_len()), list(shape.indices_len()), list(shape.counts_len()), list(shape.indices_len()));
        gpu.block_mask_from_dense(&stream, &dense_d, shape, &mut c, &mut i, &mut fc, &mut fi).unwrap();
        stream.synchronize().unwrap();
        let want = host_lists(&dense, b, h, sq, sk);
        let host = |d: &DeviceBuffer<i32>| {
            let mut v = vec![0i32; d.len()];
            d.copy_to(&mut v[..]).unwrap();
            v
        };
        assert_eq!([host(&c), host(&i), host(&fc), host(&fi)], [want.counts, want.indices, want.full_counts, want.full_indices], "{b} x {h} x {sq} x {sk}");
    }
}

#[test]
fn sanitize_paged() {
    let Some(gpu) = gpu_or_skip("sanitize_paged") else { return };
    let call = |sq, splits| with_splits(params(3, sq, 300, 8, 128).heads_kv(2).causal(sq > 1), splits);
    let cases = [
        PagedCase::new(call(1, None), DType::F16, 16, Some(vec![300, 0, 17]), 1),
        PagedCase::new(call(5, Some(3)), DType::F16, 64, Some(vec![1, 299, 64]), 0),
        PagedCase::new(call(1, Some(1)), DType::Bf16, 256, None, 0),
        // Prefill chunks: the Hopper kernels on an H100/H200 (TMA boxes within pages, V's last
        // page row by row).
        PagedCase::new(call(40, None), DType::Bf16, 16, Some(vec![300, 0, 17]), 1),
        PagedCase::new(call(40, None), DType::F16, 256, Some(vec![1, 299, 64]), 0),
    ];
    check_paged(&gpu, &cases);
    // Wild table entries and counts: the kernel must stay inside the caches.
    for (sq, splits) in [(4, Some(2)), (40, None)] {
        let e = run_paged::<half::f16>(&gpu, &PagedCase::new(call(sq, splits), DType::F16, 16, Some(vec![300, 5, 0]), 1), TableFill::AllWild);
        assert_eq!(e.out, 0.0, "non-finite output with a wild table, {sq} rows (seed {})", e.seed);
    }
}

#[test]
fn sanitize_fp8_cache() {
    use flashrs_tests::fp8::{Case, Factors, Store, check};
    let Some(gpu) = gpu_or_skip("sanitize_fp8_cache") else { return };
    let case = |fp8, dtype, store, lens: Vec<(usize, usize)>, dims, factors, splits| Case { lens, heads: (8, 2), dims, causal: true, dtype, fp8, store, factors, splits, fp8_queries: false };
    let cases = [
        case(Fp8::E4m3, DType::F16, Store::Batched, vec![(1, 300); 2], (128, 128), Factors::Scalar, None),
        case(Fp8::E5m2, DType::Bf16, Store::Paged(16), vec![(3, 300), (3, 0), (3, 17)], (64, 64), Factors::PerHead, Some(3)),
        case(Fp8::E4m3, DType::Bf16, Store::Varlen, vec![(70, 129), (1, 1), (0, 9)], (256, 256), Factors::PerBatch, None),
        case(Fp8::E5m2, DType::F16, Store::VarlenPaged(64), vec![(1, 200), (5, 65)], (128, 64), Factors::PerBatch, Some(2)),
    ];
    check(&gpu, &cases);
}

#[test]
fn sanitize_fp8_forward() {
    use flashrs_tests::fp8::{Case, Factors, Store, check};
    let Some(gpu) = flashrs_tests::hopper_or_skip("sanitize_fp8_forward") else { return };
    let case = |dtype, store, lens: Vec<(usize, usize)>, d, factors, causal| Case {
        lens, heads: (8, 2), dims: (d, d), causal, dtype, fp8: Fp8::E4m3, store, factors, splits: None, fp8_queries: true,
    };
    let cases = [
        case(DType::Bf16, Store::Batched, vec![(300, 300); 2], 128, Factors::Scalar, true),
        case(DType::F16, Store::Batched, vec![(130, 77)], 64, Factors::PerHead, false),
        case(DType::Bf16, Store::Varlen, vec![(70, 129), (1, 1), (0, 9), (200, 65)], 256, Factors::PerBatch, true),
        // More work tiles (256) than SMs, so that persistent CTAs walk several: the Q tiles'
        // and the V rings' reuse across work tiles.
        case(DType::Bf16, Store::Batched, vec![(1024, 256); 4], 64, Factors::PerHead, false),
    ];
    check(&gpu, &cases);
}

#[test]
fn sanitize_backward() {
    use flashrs_tests::grad::{GradCase, Rows, check_grads};
    let Some(gpu) = gpu_or_skip("sanitize_backward") else { return };
    let mut cases = vec![];
    for d in [64, 128, 256, 40] {
        for dtype in [DType::F16, DType::Bf16] {
            // Ragged causal GQA: partial query and key blocks, rows that see no key.
            cases.push(GradCase::batched(1, 77, 50, 4, 2, d, true, dtype));
            let mut c = GradCase::batched(1, 1, 1, 2, 1, d, false, dtype);
            c.lens = vec![(33, 130), (0, 9), (70, 0), (1, 1)];
            c.rows = Rows::Varlen { device: true };
            cases.push(c);
        }
    }
    // Walks of several steps (both stages and both dS^T (and P^T) tiles of the Hopper kernel
    // reused).
    for d in [64, 128, 256] {
        cases.push(GradCase::batched(1, 300, 260, 4, 2, d, false, DType::Bf16));
    }
    // Deterministic mode's ordered turns (on sm_90a every Hopper split's), batched and
    // variable-length (several steps per walk, key tiles reaching into the next sequence).
    for d in [64, 128, 256] {
        let mut c = GradCase::batched(2, 130, 200, 4, 2, d, d == 64, DType::Bf16);
        c.deterministic = true;
        cases.push(c);
        let mut c = GradCase::batched(1, 1, 1, 4, 2, d, d != 64, DType::F16);
        c.lens = vec![(200, 300), (150, 129), (1, 70)];
        c.rows = Rows::Varlen { device: false };
        c.deterministic = d == 128;
        cases.push(c);
    }
    // The mma.sync kernels, forced (on sm_90a the automatic choice is the Hopper kernel): walks
    // of several steps through every stage of the query-side ring, ragged ends, and a
    // variable-length batch.
    for d in [64, 128, 256] {
        let mut c = GradCase::batched(1, 300, 260, 4, 2, d, d == 128, DType::Bf16);
        c.kernel = flashrs::KernelChoice::MmaSync { config: None };
        cases.push(c);
        // Deterministic turns; at head_dim 64, 128-row steps whose second half lies past the
        // sequence (on sm_90a added to the accumulator's padding block).
        let mut c = GradCase::batched(2, 200, 333, 4, 1, d, d == 64, DType::Bf16);
        c.kernel = flashrs::KernelChoice::MmaSync { config: None };
        c.deterministic = true;
        cases.push(c);
        let mut c = GradCase::batched(1, 1, 1, 2, 1, d, d != 128, DType::F16);
        c.lens = vec![(200, 300), (150, 129), (1, 70)];
        c.rows = Rows::Varlen { device: false };
        c.kernel = flashrs::KernelChoice::MmaSync { config: None };
        cases.push(c);
    }
    // V of its own head dimension, narrower and wider than K's (each tensor's columns read up
    // to its own width, the TMA boxes past it zero), on the automatic choice and mma.sync.
    for (d, dv) in [(192, 128), (64, 136), (128, 64)] {
        for kernel in [flashrs::KernelChoice::Auto, flashrs::KernelChoice::MmaSync { config: None }] {
            let mut c = GradCase::batched(1, 1, 1, 4, 2, d, d == 64, DType::Bf16);
            (c.head_dim_v, c.kernel) = (Some(dv), kernel);
            c.lens = vec![(130, 200), (1, 70), (77, 0)];
            c.rows = Rows::Varlen { device: d == 128 };
            cases.push(c);
        }
    }
    // Windows, softcap and ALiBi (the modification kernels: key blocks walking only the query blocks
    // that see them, deterministic turns from each block's first key block), and sinks (the
    // dQ kernel's shared-memory reduction of their gradient), on every head dim's kernel.
    for (i, d) in [64, 128, 256].into_iter().enumerate() {
        // On both families (the automatic choice is the Hopper twin on sm_90a).
        for kernel in [flashrs::KernelChoice::Auto, flashrs::KernelChoice::MmaSync { config: None }] {
            let mut c = GradCase::batched(2, 130, 200, 4, 2, d, i != 1, DType::Bf16);
            (c.window, c.alibi, c.deterministic, c.softcap, c.kernel) = ((Some(40), Some(8)), i != 0, i == 2, (i != 1).then_some(5.0), kernel);
            cases.push(c);
            let mut c = GradCase::batched(1, 1, 1, 4, 2, d, i == 1, DType::F16);
            (c.lens, c.rows, c.window, c.alibi, c.kernel) = (vec![(70, 150), (0, 9), (129, 64)], Rows::Varlen { device: true }, (None, Some(0)), true, kernel);
            (c.deterministic, c.softcap) = (i == 0, (i == 1).then_some(3.0));
            cases.push(c);
        }
        let mut c = GradCase::batched(2, 90, 300, 4, 2, d, i != 2, DType::Bf16);
        c.sinks = true;
        c.kernel = if i == 0 { flashrs::KernelChoice::MmaSync { config: None } } else { flashrs::KernelChoice::Auto };
        cases.push(c);
        // Block masks (the list launches, then the block-sparse kernels walking them), per head
        // and deterministic, or shared over variable-length rows; with lists whose indices lie
        // outside the key blocks.
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x5b + i as u64);
        let mut c = GradCase::batched(2, 300, 333, 4, 2, d, i != 1, DType::Bf16);
        let mut hostile = random_blocks(2, 4, 300, 333, 0.6, &mut rng);
        hostile.indices[..3].copy_from_slice(&[-5, 1000, 1]);
        (hostile.counts[0], hostile.full_counts[0]) = (3, 0);
        (c.blocks, c.deterministic) = (Some(hostile), i == 0);
        cases.push(c);
        let mut c = GradCase::batched(1, 1, 1, 4, 2, d, i == 2, DType::F16);
        (c.lens, c.rows, c.window) = (vec![(70, 150), (0, 9), (300, 64)], Rows::Varlen { device: i == 1 }, (Some(100), Some(0)));
        c.blocks = Some(random_blocks(1, 1, 300, 150, 0.5, &mut rng));
        cases.push(c);
    }
    check_grads(&gpu, &cases);
}
