//! FP8 attention (E4M3 Q, K and V; f16 or bf16 output) on sm_90a's wgmma: on the GPU against
//! the f64 CPU reference run on the dequantized inputs (`flashrs_tests::fp8`), fixed-length and
//! variable-length, causal and not, GQA and MHA, head_dim 64 / 128 / 256 (and ones padded up
//! to them), factors per tensor, per K/V head and per (sequence, K/V head); and the plans and
//! typed errors of FP8 calls (no GPU needed). GPU cases skip without an sm_90a GPU.
use flashrs::{AttentionParams, BufferRef, Buffers, DType, Descale, Fp8, Kernel, KernelPath, sm90};
use flashrs_tests::expect::{Want, result_matches};
use flashrs_tests::fp8::{Case, Factors, Store, check};
use flashrs::Target;
use flashrs_tests::{H100, hopper_or_skip, params};

#[test]
fn fp8_attention_matches_the_reference() {
    let Some(gpu) = hopper_or_skip("fp8_attention_matches_the_reference") else { return };
    let mut cases = vec![];
    let factors = [Factors::Scalar, Factors::PerHead, Factors::PerBatch];
    let mut i = 0;
    for d in [64, 128, 256, 80] {
        for store in [Store::Batched, Store::Varlen] {
            for causal in [false, true] {
                i += 1;
                let lens = match (store, i % 3) {
                    (Store::Batched, 0) => vec![(1037, 1037); 2],
                    (Store::Batched, 1) => vec![(128, 300); 3],
                    (Store::Batched, _) => vec![(300, 77)],
                    (_, 0) => vec![(300, 129), (17, 1037), (1, 1), (64, 64), (0, 5)],
                    (_, 1) => vec![(513, 513), (129, 700)],
                    (_, _) => vec![(1, 9), (200, 2000)],
                };
                cases.push(Case {
                    lens,
                    heads: if i % 2 == 0 { (4, 4) } else { (8, 2) },
                    dims: (d, d),
                    causal,
                    dtype: if i % 2 == 0 { DType::F16 } else { DType::Bf16 },
                    fp8: Fp8::E4m3,
                    store,
                    factors: factors[i % 3],
                    splits: None,
                    fp8_queries: true,
                });
            }
        }
    }
    // More work tiles than the GPU has SMs (4 x 8 heads x 8 query blocks at head_dim 64), so
    // that CTAs of a later wave reuse shared memory after the first's.
    cases.push(Case {
        lens: vec![(1024, 1024); 4],
        heads: (8, 2),
        dims: (64, 64),
        causal: true,
        dtype: DType::Bf16,
        fp8: Fp8::E4m3,
        store: Store::Batched,
        factors: Factors::PerBatch,
        splits: None,
        fp8_queries: true,
    });
    check(&gpu, &cases);
}

/// Made-up addresses for planning: E4M3 Q, K and V, bf16 output.
fn bufs() -> Buffers {
    let r = |i: u64| BufferRef::new(i << 32, 1 << 28);
    Buffers::new(DType::Bf16, r(1), r(2), r(3), r(4)).fp8_queries(Fp8::E4m3)
}

#[test]
fn fp8_calls_plan_on_the_hopper_fp8_kernels_and_bad_ones_are_typed_errors() {
    for (d, want) in [(64, 0), (128, 1), (256, 2), (96, 1), (48, 0)] {
        let p = params(2, 2048, 2048, 16, d).heads_kv(4).causal(true).build().unwrap();
        let pl = p.plan(&bufs(), &H100).unwrap();
        assert_eq!(pl.kernel, Kernel::Sm90 { dtype: DType::Bf16, inputs: Some(Fp8::E4m3), varlen: false, paged: false, config: sm90::FP8_CONFIGS[want], flavor: flashrs::Flavor::Plain }, "d{d}");
        // Persistent where the configuration keeps two Q tiles (not head_dim 256's 128-key
        // tiles): up to 4k keys, and causal at head_dim up to 128; not on long non-causal rows.
        let two_q = sm90::FP8_CONFIGS[want].fp8_q_buffers() == 2;
        assert_eq!(pl.persistent, two_q, "d{d}");
        let long = |causal| params(1, 16384, 16384, 16, d).causal(causal).build().unwrap().plan(&bufs(), &H100).unwrap().persistent;
        assert_eq!((long(false), long(true)), (false, two_q && d <= 128), "d{d}");
    }
    let p = |b: flashrs::AttentionParamsBuilder<'static>| b.build().unwrap();
    let mut e5m2 = bufs();
    e5m2.query_fp8 = Some(Fp8::E5m2);
    e5m2.kv = Some(Fp8::E5m2);
    let mut mixed = bufs();
    mixed.kv = Some(Fp8::E5m2);
    let mut short_q = bufs();
    short_q.q = BufferRef::new(1 << 32, 128 * 4 * 64 - 1);
    let sixteen = Buffers::new(DType::Bf16, BufferRef::new(1 << 32, 1 << 28), BufferRef::new(2 << 32, 1 << 28), BufferRef::new(3 << 32, 1 << 28), BufferRef::new(4 << 32, 1 << 28));
    let cases: Vec<(&str, AttentionParams<'static>, Buffers, Want)> = vec![
        ("e5m2 inputs", p(params(1, 128, 128, 4, 64)), e5m2, Want::Shape("dtype")),
        ("e4m3 Q with e5m2 K/V", p(params(1, 128, 128, 4, 64)), mixed, Want::Shape("dtype")),
        ("head_dim 72", p(params(1, 128, 128, 4, 72)), bufs(), Want::Shape("head_dim")),
        ("softcap", p(params(1, 128, 128, 4, 64).softcap(30.0)), bufs(), Want::Shape("mods")),
        ("mma.sync", p(params(1, 128, 128, 4, 64).path(KernelPath::MmaSync)), bufs(), Want::Shape("kernel")),
        (
            "a 16-bit configuration",
            p(params(1, 128, 128, 4, 64).kernel(flashrs::KernelChoice::Wgmma { config: Some(sm90::CONFIGS[3]), persistent: None })),
            bufs(),
            Want::Shape("wgmma path"),
        ),
        ("splits", p(params(1, 128, 4096, 4, 64).num_splits(4)), bufs(), Want::Shape("num_splits")),
        ("NaN q factor", p(params(1, 128, 128, 4, 64).q_descale(Descale::Scalar(f32::NAN))), bufs(), Want::Shape("q_descale")),
        ("q factor with 16-bit Q", p(params(1, 128, 128, 4, 64).q_descale(Descale::Scalar(2.0))), sixteen, Want::Shape("q_descale")),
        ("short Q", p(params(1, 128, 128, 4, 64)), short_q, Want::TooSmall("q", 128 * 4 * 64, 128 * 4 * 64 - 1)),
        ("Q stride of 8 bytes", p(params(1, 128, 128, 4, 64).q_strides(flashrs::Strides { batch: 128 * 264, row: 264, head: 66 })), bufs(), Want::Misaligned("q")),
    ];
    for (what, p, b, want) in cases {
        let r = p.plan(&b, &H100);
        assert!(result_matches(&r, &want), "{what}: {:?}", r.map(|pl| pl.kernel.to_string()));
    }
    // No FP8 tensor cores' wgmma before sm_90a.
    let r = params(1, 128, 128, 4, 64).build().unwrap().plan(&bufs(), &Target::A100);
    assert!(matches!(r, Err(flashrs::Error::PathUnavailable { path: "FP8 queries", .. })), "{:?}", r.map(|pl| pl.kernel.to_string()));
}
