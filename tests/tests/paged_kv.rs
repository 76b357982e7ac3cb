//! Paged K/V caches: on the GPU against the CPU reference of the unpaged equivalent (page sizes
//! 16 to 1024, per-sequence key counts, decode and chunked prefill on both kernel paths,
//! causal, GQA, split-KV forced and automatic, every head_dim, wild table contents); and the
//! planner's choices and typed errors for paged calls (no GPU needed). GPU cases skip without
//! a GPU.
use flashrs::{AttentionParams, AttentionParamsBuilder, BufferRef, Buffers, DType, Kernel, KernelPath, Offsets, PagedKv, Pages, Rows, Variant};
use flashrs_tests::expect::{Want, result_matches};
use flashrs_tests::{H100, gpu_or_skip, params, planning_index, with_splits};
use flashrs_tests::paged::{PagedCase, TableFill, check_paged, run_paged};

fn call(b: usize, sq: usize, sk: usize, hq: usize, hkv: usize, d: usize) -> AttentionParamsBuilder<'static> {
    params(b, sq, sk, hq, d).heads_kv(hkv)
}

/// Key counts for `b` sequences of at most `max`: empty, one key, a page boundary's
/// neighbours, full, and spread values.
fn counts(b: usize, max: usize, page: usize) -> Vec<usize> {
    let pick = [max, 0, 1, page - 1, page, page + 1, max / 2 + 3, max - 1];
    (0..b).map(|i| pick[i % pick.len()].min(max)).collect()
}

#[test]
fn every_page_size_decode_and_prefill() {
    let Some(gpu) = gpu_or_skip("every_page_size_decode_and_prefill") else { return };
    let mut cases = Vec::new();
    for (i, page) in [16, 32, 64, 128, 256].into_iter().enumerate() {
        for sq in [1, 4, 16] {
            for causal in [false, true] {
                let dtype = if i % 2 == 0 { DType::F16 } else { DType::Bf16 };
                let sk = 700;
                let p = call(8, sq, sk, 8, 2, 128).causal(causal).build().unwrap();
                cases.push(PagedCase::new(p, dtype, page, Some(counts(8, sk, page)), i));
            }
        }
    }
    check_paged(&gpu, &cases);
}

#[test]
fn splits_forced_and_automatic() {
    let Some(gpu) = gpu_or_skip("splits_forced_and_automatic") else { return };
    let mut cases = Vec::new();
    for splits in [Some(1), Some(2), Some(5), Some(16), None] {
        for (sq, causal) in [(1, false), (3, true)] {
            let p = with_splits(call(3, sq, 5000, 32, 8, 128).causal(causal), splits);
            cases.push(PagedCase::new(p, DType::F16, 64, Some(vec![5000, 1234, 17]), 0));
        }
    }
    // Every sequence at seqlen_k (no seqused_k), MHA and MQA.
    cases.push(PagedCase::new(call(2, 1, 3000, 4, 4, 128).num_splits(4).build().unwrap(), DType::F16, 16, None, 2));
    cases.push(PagedCase::new(call(2, 2, 3000, 8, 1, 128).causal(true).build().unwrap(), DType::F16, 256, None, 0));
    check_paged(&gpu, &cases);
}

#[test]
fn every_head_dim_and_long_caches() {
    let Some(gpu) = gpu_or_skip("every_head_dim_and_long_caches") else { return };
    let mut cases = Vec::new();
    for (d, dtype) in [(64, DType::F16), (96, DType::Bf16), (128, DType::F16), (256, DType::Bf16)] {
        for causal in [false, true] {
            let p = call(2, 5, 1100, 4, 2, d).causal(causal).build().unwrap();
            cases.push(PagedCase::new(p, dtype, 32, Some(vec![1100, 333]), 1));
        }
    }
    for page in [16, 256] {
        cases.push(PagedCase::new(call(2, 1, 32768, 32, 8, 128).build().unwrap(), DType::F16, page, Some(vec![32768, 20000]), 0));
    }
    check_paged(&gpu, &cases);
}

#[test]
fn wild_table_entries_and_counts_stay_inside_the_caches() {
    let Some(gpu) = gpu_or_skip("wild_table_entries_and_counts_stay_inside_the_caches") else { return };
    // Prefill-shaped rows (40) run on the Hopper kernels on an H100/H200.
    for (sq, splits) in [(1, None), (4, Some(3)), (16, Some(1)), (40, None)] {
        let c = PagedCase::new(with_splits(call(4, sq, 900, 8, 2, 128), splits), DType::F16, 16, Some(vec![900, 5, 0, 64]), 1);
        let e = run_paged::<half::f16>(&gpu, &c, TableFill::AllWild);
        println!("wild table, sq {sq}, splits {splits:?}: completed, outputs finite: {}", e.out == 0.0);
        assert_eq!(e.out, 0.0, "non-finite output with a wild table (seed {})", e.seed);
    }
}

/// Plans `p` for an H100 on fake, disjoint f16 buffers sized for `sized_for` (planning never
/// touches them).
fn planned(p: &AttentionParams, sized_for: &AttentionParams) -> flashrs::Result<flashrs::LaunchPlan> {
    let flashrs::TensorLens { q: nq, k: nk, lse: nl, .. } = sized_for.contiguous_lens().unwrap();
    let r = |i: u64, len: usize| BufferRef { ptr: i << 36, len };
    let bufs = Buffers::new(DType::F16, r(1, nq), r(2, nk), r(3, nk), r(4, nq)).lse(r(5, nl));
    p.plan(&bufs, &H100)
}

/// (A paged call without a block table, or a table given to an unpaged call, cannot be
/// written: the table is part of the call's layout.)
#[test]
fn planner_refuses_bad_paged_calls() {
    let pages = Pages { page_size: 16, num_pages: 100, pages_per_seq: 40 };
    let table = |ptr: u64, len: usize| planning_index(ptr, len);
    let good = PagedKv::new(pages, table(6 << 36, 160)).seqused_k(table(7 << 36, 4));
    let with = |pg: PagedKv<'static>| call(4, 1, 600, 32, 8, 128).paged(pg);
    // `good` with one field changed.
    let edit = |f: &dyn Fn(&mut PagedKv<'static>)| {
        let mut pg = good;
        f(&mut pg);
        with(pg).build().unwrap()
    };
    let geometry = |pages: Pages| edit(&|pg| pg.pages = pages);
    let ok = with(good);
    let packed = |cu_k: Vec<i32>| ok.clone().rows(Rows::Packed(Offsets::Host { cu_seqlens_q: vec![0, 1, 2, 3, 4], cu_seqlens_k: cu_k }));
    let cases: Vec<(&str, AttentionParams, Want)> = vec![
        ("valid", ok.clone().build().unwrap(), Want::Ok),
        ("valid without seqused_k", edit(&|pg| pg.seqused_k = None), Want::Ok),
        ("page_size 24", geometry(Pages { page_size: 24, ..pages }), Want::Shape("page_size")),
        ("page_size 8", geometry(Pages { page_size: 8, ..pages }), Want::Shape("page_size")),
        ("no pages", geometry(Pages { num_pages: 0, ..pages }), Want::Shape("num_pages")),
        ("empty table rows", geometry(Pages { pages_per_seq: 0, ..pages }), Want::Shape("pages_per_seq")),
        ("seqlen_k past the table row", geometry(Pages { pages_per_seq: 37, ..pages }), Want::Shape("seqlen_k")),
        ("table one row short", edit(&|pg| pg.block_table = table(6 << 36, 120)), Want::TooSmall("block_table", 160, 120)),
        ("table misaligned", edit(&|pg| pg.block_table = table((6 << 36) + 2, 160)), Want::Misaligned("block_table")),
        ("table null", edit(&|pg| pg.block_table = table(0, 160)), Want::Buffer("block_table")),
        ("seqused_k short", edit(&|pg| pg.seqused_k = Some(table(7 << 36, 3))), Want::TooSmall("seqused_k", 4, 3)),
        ("table overlaps the output", edit(&|pg| pg.block_table = table(4 << 36, 160)), Want::Buffer("out")),
        ("k cache short", geometry(Pages { num_pages: 101, ..pages }), Want::TooSmall("k", 101 * 16 * 8 * 128, 100 * 16 * 8 * 128)),
        ("wgmma path", ok.clone().path(KernelPath::Wgmma).build().unwrap(), Want::Ok),
        ("wgmma path, split", ok.clone().path(KernelPath::Wgmma).num_splits(2).build().unwrap(), Want::Shape("wgmma path")),
        ("variable-length, a key count past seqlen_k", packed(vec![0, 1, 2, 3, 604]).build().unwrap(), Want::Shape("cu_seqlens_k")),
        ("variable-length, more splits than allowed", packed(vec![]).num_splits(33).build().unwrap(), Want::Shape("num_splits")),
    ];
    let ok = ok.build().unwrap();
    for (name, p, want) in cases {
        // Buffers sized for the valid call: "k cache short" claims one page more.
        let got = planned(&p, &ok);
        assert!(result_matches(&got, &want), "{name}: got {:?}, want {want:?}", got.map(|pl| pl.kernel));
    }
    // The valid plan runs the paged kernel with its table parameters.
    let plan = planned(&ok, &ok).unwrap();
    assert!(matches!(plan.kernel, Kernel::Mma { variant: Variant::Paged, config, .. } if config.head_dim == 128), "{}", plan.kernel);
    assert_eq!((plan.params.table_stride, plan.params.page_shift, plan.params.last_page), (40, 4, 99));
    assert_eq!(plan.params.block_table, 6 << 36);
    // Batch 4 x 8 KV heads cannot fill 132 SMs: decode splits automatically.
    assert!(plan.split.is_some(), "no automatic split for a 600-key decode of 32 CTAs");
    // Prefill chunks (more rows than a decode tile holds) take the Hopper kernel of the head
    // dimension, its K/V maps in boxes within a page; decode rows forced onto it run unsplit.
    let prefill = call(4, 300, 600, 32, 8, 128).paged(good).build().unwrap();
    let plan = planned(&prefill, &prefill).unwrap();
    let want = flashrs::sm90::paged_config(128).unwrap();
    assert!(matches!(plan.kernel, Kernel::Sm90 { paged: true, varlen: false, config, .. } if config == want), "{}", plan.kernel);
    assert_eq!(plan.kernel.to_string(), "flash_fwd_sm90_paged_f16_d128_128x128s2");
    assert_eq!((plan.params.table_stride, plan.params.page_shift, plan.params.last_page, plan.split.is_none()), (40, 4, 99, true));
    let forced = planned(&ok.to_builder().path(KernelPath::Wgmma).build().unwrap(), &ok).unwrap();
    assert!(matches!(forced.kernel, Kernel::Sm90 { paged: true, .. }) && forced.split.is_none(), "{}", forced.kernel);
    let mma = planned(&prefill.to_builder().path(KernelPath::MmaSync).build().unwrap(), &prefill).unwrap();
    assert!(matches!(mma.kernel, Kernel::Mma { variant: Variant::Paged, .. }), "{}", mma.kernel);
}

/// Prefill chunks against paged caches on every path this GPU has: on an H100/H200 `Auto` and
/// `Wgmma` take the Hopper kernels (K and V in TMA boxes within a page, a sequence's last page
/// of V loaded row-exactly past the NaN its unused rows hold), `MmaSync` the portable ones.
/// Every page size, ragged key counts (none a multiple of 8 past the page boundaries), causal,
/// GQA, head dimensions native and padded, V of its own head dimension.
#[test]
fn prefill_chunks_on_every_path() {
    let Some(gpu) = gpu_or_skip("prefill_chunks_on_every_path") else { return };
    let paths = if gpu.arch() == flashrs::Arch::Sm90a { vec![KernelPath::Auto, KernelPath::Wgmma, KernelPath::MmaSync] } else { vec![KernelPath::Auto] };
    let dims = [(64, None), (128, None), (256, None), (72, None), (192, Some(128))];
    let mut cases = Vec::new();
    for path in paths {
        for (i, page) in [16, 32, 64, 128, 256, 1024].into_iter().enumerate() {
            for causal in [false, true] {
                let (d, dv) = dims[(i + causal as usize) % dims.len()];
                let dtype = if i % 2 == 0 { DType::Bf16 } else { DType::F16 };
                let b = call(3, 150, 700, 4, 2, d).causal(causal).path(path);
                let b = match dv {
                    Some(dv) => b.head_dim_v(dv),
                    None => b,
                };
                let used = vec![700, 263, 151];
                cases.push(PagedCase::new(b.build().unwrap(), dtype, page, Some(used), i % 2));
            }
        }
        // A fresh prompt (as many keys as rows), every sequence at seqlen_k, MQA.
        cases.push(PagedCase::new(call(2, 517, 517, 4, 1, 128).causal(true).path(path).build().unwrap(), DType::Bf16, 16, None, 0));
    }
    check_paged(&gpu, &cases);
}
