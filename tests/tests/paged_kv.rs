//! Paged K/V caches: on the GPU against the CPU reference of the unpaged equivalent (page sizes
//! 16 to 256, per-sequence key counts, decode and chunked prefill, causal, GQA, split-KV forced
//! and automatic, every head_dim, wild table contents); and the planner's typed errors for bad
//! paged calls (no GPU needed). GPU cases skip without a GPU.
use flashrs::attention::{BufferRef, Buffers, PagedBuffers};
use flashrs::{AttentionParams, DType, KernelPath, PagedKv, Varlen};
use flashrs_tests::expect::{Want, result_matches};
use flashrs_tests::gpu_or_skip;
use flashrs_tests::paged::{PagedCase, TableFill, check_paged, run_paged};

fn call(b: usize, sq: usize, sk: usize, hq: usize, hkv: usize, d: usize) -> AttentionParams {
    AttentionParams::new(b, sq, sk, hq, d).heads_kv(hkv)
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
                let p = call(8, sq, sk, 8, 2, 128).causal(causal).dtype(dtype);
                cases.push(PagedCase::new(p, page, Some(counts(8, sk, page)), i));
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
            let p = call(3, sq, 5000, 32, 8, 128).causal(causal).num_splits(splits);
            cases.push(PagedCase::new(p, 64, Some(vec![5000, 1234, 17]), 0));
        }
    }
    // Every sequence at seqlen_k (no seqused_k), MHA and MQA.
    cases.push(PagedCase::new(call(2, 1, 3000, 4, 4, 128).num_splits(Some(4)), 16, None, 2));
    cases.push(PagedCase::new(call(2, 2, 3000, 8, 1, 128).causal(true), 256, None, 0));
    check_paged(&gpu, &cases);
}

#[test]
fn every_head_dim_and_long_caches() {
    let Some(gpu) = gpu_or_skip("every_head_dim_and_long_caches") else { return };
    let mut cases = Vec::new();
    for (d, dtype) in [(64, DType::F16), (96, DType::Bf16), (128, DType::F16), (256, DType::Bf16)] {
        for causal in [false, true] {
            let p = call(2, 5, 1100, 4, 2, d).causal(causal).dtype(dtype);
            cases.push(PagedCase::new(p, 32, Some(vec![1100, 333]), 1));
        }
    }
    for page in [16, 256] {
        cases.push(PagedCase::new(call(2, 1, 32768, 32, 8, 128), page, Some(vec![32768, 20000]), 0));
    }
    check_paged(&gpu, &cases);
}

#[test]
fn wild_table_entries_and_counts_stay_inside_the_caches() {
    let Some(gpu) = gpu_or_skip("wild_table_entries_and_counts_stay_inside_the_caches") else { return };
    for (sq, splits) in [(1, None), (4, Some(3)), (16, Some(1))] {
        let c = PagedCase::new(call(4, sq, 900, 8, 2, 128).num_splits(splits), 16, Some(vec![900, 5, 0, 64]), 1);
        let e = run_paged::<half::f16>(&gpu, &c, TableFill::AllWild);
        println!("wild table, sq {sq}, splits {splits:?}: completed, outputs finite: {}", e.out == 0.0);
        assert_eq!(e.out, 0.0, "non-finite output with a wild table (seed {})", e.seed);
    }
}

/// Plans `p` on fake, disjoint buffers sized for `sized_for` (planning never touches them).
fn planned(p: &AttentionParams, sized_for: &AttentionParams, paged: Option<PagedBuffers>) -> flashrs::Result<flashrs::LaunchPlan> {
    let (nq, nk, nl) = sized_for.contiguous_lens();
    let r = |i: u64, len: usize| BufferRef { ptr: i << 36, len };
    let bufs = Buffers { q: r(1, nq), k: r(2, nk), v: r(3, nk), o: r(4, nq), lse: Some(r(5, nl)), paged, varlen: None };
    p.plan_for_sms(&bufs, 132)
}

#[test]
fn planner_refuses_bad_paged_calls() {
    let pg = PagedKv { page_size: 16, num_pages: 100, pages_per_seq: 40 };
    let ok = call(4, 1, 600, 32, 8, 128).paged(pg);
    let table = |len: usize| BufferRef { ptr: 6 << 36, len };
    let good = Some(PagedBuffers { block_table: table(160), seqused_k: Some(BufferRef { ptr: 7 << 36, len: 4 }) });
    let with = |pg: PagedKv| call(4, 1, 600, 32, 8, 128).paged(pg);
    let cases: Vec<(&str, AttentionParams, Option<PagedBuffers>, Want)> = vec![
        ("valid", ok.clone(), good, Want::Ok),
        ("valid without seqused_k", ok.clone(), Some(PagedBuffers { seqused_k: None, ..good.unwrap() }), Want::Ok),
        ("page_size 24", with(PagedKv { page_size: 24, ..pg }), good, Want::Shape("page_size")),
        ("page_size 8", with(PagedKv { page_size: 8, ..pg }), good, Want::Shape("page_size")),
        ("no pages", with(PagedKv { num_pages: 0, ..pg }), good, Want::Shape("num_pages")),
        ("empty table rows", with(PagedKv { pages_per_seq: 0, ..pg }), good, Want::Shape("pages_per_seq")),
        ("seqlen_k past the table row", with(PagedKv { pages_per_seq: 37, ..pg }), good, Want::Shape("seqlen_k")),
        ("no paged buffers", ok.clone(), None, Want::Buffer("block_table")),
        ("paged buffers, unpaged call", call(4, 1, 600, 32, 8, 128), good, Want::Buffer("block_table")),
        ("table one row short", ok.clone(), Some(PagedBuffers { block_table: table(120), ..good.unwrap() }), Want::TooSmall("block_table", 160, 120)),
        ("table misaligned", ok.clone(), Some(PagedBuffers { block_table: BufferRef { ptr: (6 << 36) + 2, len: 160 }, ..good.unwrap() }), Want::Misaligned("block_table")),
        ("table null", ok.clone(), Some(PagedBuffers { block_table: BufferRef { ptr: 0, len: 160 }, ..good.unwrap() }), Want::Buffer("block_table")),
        (
            "seqused_k short",
            ok.clone(),
            Some(PagedBuffers { seqused_k: Some(BufferRef { ptr: 7 << 36, len: 3 }), ..good.unwrap() }),
            Want::TooSmall("seqused_k", 4, 3),
        ),
        (
            "table overlaps the output",
            ok.clone(),
            Some(PagedBuffers { block_table: BufferRef { ptr: 4 << 36, len: 160 }, ..good.unwrap() }),
            Want::Buffer("out"),
        ),
        ("k cache short", ok.clone().paged(PagedKv { num_pages: 101, ..pg }), good, Want::TooSmall("k", 101 * 16 * 8 * 128, 100 * 16 * 8 * 128)),
        ("wgmma path", ok.clone().path(KernelPath::Wgmma), good, Want::Shape("wgmma path")),
        (
            "variable-length, a key count past seqlen_k",
            AttentionParams { varlen: Some(Varlen::Host { cu_seqlens_q: vec![0, 1, 2, 3, 4], cu_seqlens_k: vec![0, 1, 2, 3, 604] }), ..ok.clone() },
            good,
            Want::Shape("cu_seqlens_k"),
        ),
        (
            "variable-length, more splits than allowed",
            AttentionParams { varlen: Some(Varlen::Host { cu_seqlens_q: vec![0, 1, 2, 3, 4], cu_seqlens_k: vec![] }), ..ok.clone().num_splits(Some(33)) },
            good,
            Want::Shape("num_splits"),
        ),
    ];
    for (name, p, paged, want) in cases {
        // Buffers sized for the valid call: "k cache short" claims one page more.
        let got = planned(&p, &ok, paged);
        assert!(result_matches(&got, &want), "{name}: got {:?}, want {want:?}", got.map(|pl| pl.kernel));
    }
    // The valid plan runs the paged kernel with its table parameters.
    let plan = planned(&ok, &ok, good).unwrap();
    assert!(plan.kernel.starts_with("flash_fwd_paged_f16_d128_"), "{}", plan.kernel);
    assert_eq!((plan.params.table_stride, plan.params.page_shift, plan.params.last_page), (40, 4, 99));
    assert_eq!(plan.params.block_table, 6 << 36);
    // Batch 4 x 8 KV heads cannot fill 132 SMs: decode splits automatically.
    assert!(plan.split.is_some(), "no automatic split for a 600-key decode of 32 CTAs");
}
