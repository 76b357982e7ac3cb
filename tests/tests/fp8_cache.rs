//! FP8 K/V caches (E4M3, E5M2) read by f16 and bf16 queries: on the GPU against the f64 CPU
//! reference run on the dequantized caches (`flashrs_tests::fp8`), for fixed-length, paged and
//! variable-length batches, decode and prefill, causal, GQA, split-KV forced and automatic, and
//! factors per tensor, per K/V head and per (sequence, K/V head); and the typed errors of bad
//! FP8 calls (no GPU needed). GPU cases skip without a GPU.
use flashrs::{AttentionParams, BufferRef, Buffers, DType, Descale, DeviceArray, Fp8, Kernel, KernelPath, Variant};
use flashrs_tests::expect::{Want, result_matches};
use flashrs_tests::fp8::{Case, Factors, Store, check};
use flashrs_tests::{H100, gpu_or_skip, params};

#[test]
fn decode_and_prefill_on_every_layout() {
    let Some(gpu) = gpu_or_skip("decode_and_prefill_on_every_layout") else { return };
    let mut cases = vec![];
    let stores = [Store::Batched, Store::Paged(16), Store::Paged(256), Store::Varlen, Store::VarlenPaged(64)];
    let factors = [Factors::Scalar, Factors::PerHead, Factors::PerBatch];
    let mut i = 0;
    for fp8 in Fp8::ALL {
        for (si, store) in stores.into_iter().enumerate() {
            for decode in [true, false] {
                i += 1;
                let dims = [(64, 64), (128, 128), (256, 256), (128, 64)][i % 4];
                let lens = match (store, decode) {
                    (Store::Batched, true) => vec![(1, 1037); 3],
                    (Store::Batched, false) => vec![(127, 700); 2],
                    (Store::Paged(_), true) => vec![(1, 1037), (1, 1), (1, 0), (1, 300)],
                    (Store::Paged(_), false) => vec![(37, 900), (37, 37), (37, 17)],
                    (_, true) => vec![(1, 1037), (1, 17), (0, 5), (1, 0)],
                    (_, false) => vec![(300, 129), (17, 1037), (1, 1), (64, 64)],
                };
                cases.push(Case {
                    lens,
                    heads: if i % 3 == 0 { (4, 4) } else { (8, 2) },
                    dims,
                    causal: i % 2 == 0,
                    dtype: if (si + decode as usize) % 2 == 0 { DType::F16 } else { DType::Bf16 },
                    fp8,
                    store,
                    factors: factors[i % 3],
                    splits: if decode && i % 4 == 1 { Some(3) } else { None },
                    fp8_queries: false,
                });
            }
        }
    }
    check(&gpu, &cases);
}

#[test]
fn long_caches_split_across_ctas() {
    let Some(gpu) = gpu_or_skip("long_caches_split_across_ctas") else { return };
    let mut cases = vec![];
    for (fp8, dtype, d) in [(Fp8::E4m3, DType::Bf16, 128), (Fp8::E5m2, DType::F16, 64), (Fp8::E4m3, DType::F16, 256)] {
        for splits in [None, Some(1), Some(7)] {
            cases.push(Case {
                lens: vec![(1, 9000), (1, 4097), (1, 1)],
                heads: (16, 2),
                dims: (d, d),
                causal: false,
                dtype,
                fp8,
                store: Store::Paged(128),
                factors: Factors::PerBatch,
                splits,
                fp8_queries: false,
            });
        }
    }
    check(&gpu, &cases);
}

/// Made-up addresses for planning.
fn bufs(kv: Fp8) -> Buffers {
    let r = |i: u64| BufferRef::new(i << 32, 1 << 28);
    Buffers::new(DType::Bf16, r(1), r(2), r(3), r(4)).kv(kv)
}

#[test]
fn fp8_calls_plan_on_split_capable_kernels_and_bad_ones_are_typed_errors() {
    let t = H100;
    let plan = |p: &AttentionParams, b: &Buffers| p.plan(b, &t);
    // A prefill call takes the split-capable kernel, unsplit, on every GPU (Hopper too).
    let prefill = params(2, 512, 4096, 8, 128).heads_kv(2).causal(true).build().unwrap();
    let pl = plan(&prefill, &bufs(Fp8::E4m3)).unwrap();
    assert!(matches!(pl.kernel, Kernel::Mma { kv: Some(Fp8::E4m3), variant: Variant::Split, .. }), "{}", pl.kernel);
    let decode = params(2, 1, 8192, 32, 64).heads_kv(8).build().unwrap();
    let pl = plan(&decode, &bufs(Fp8::E5m2)).unwrap();
    assert!(matches!(pl.kernel, Kernel::Mma { kv: Some(Fp8::E5m2), variant: Variant::Split, .. }), "{}", pl.kernel);
    // Head_dim 256 takes the FP8 table's one configuration.
    let wide = params(2, 1, 8192, 32, 256).heads_kv(8).build().unwrap();
    let pl = plan(&wide, &bufs(Fp8::E4m3)).unwrap();
    assert!(matches!(pl.kernel, Kernel::Mma { config, .. } if config == flashrs::tiles::SMALL_D256), "{}", pl.kernel);
    let p = |b: flashrs::AttentionParamsBuilder<'static>| b.build().unwrap();
    // SAFETY: planning only; nothing is launched.
    let factors: DeviceArray<'static, f32> = unsafe { DeviceArray::from_raw(10 << 32, 3) };
    let mut short_k = bufs(Fp8::E4m3);
    short_k.k = BufferRef::new(2 << 32, 64 * 4 * 64 - 1);
    let cases: Vec<(&str, AttentionParams<'static>, Buffers, Want)> = vec![
        ("head_dim 72", p(params(1, 1, 64, 4, 72)), bufs(Fp8::E4m3), Want::Shape("head_dim")),
        ("head_dim_v 40", p(params(1, 1, 64, 4, 64).head_dim_v(40)), bufs(Fp8::E4m3), Want::Shape("head_dim")),
        ("softcap", p(params(1, 1, 64, 4, 64).softcap(30.0)), bufs(Fp8::E5m2), Want::Shape("mods")),
        ("window", p(params(1, 8, 64, 4, 64).window(Some(16), None)), bufs(Fp8::E4m3), Want::Shape("mods")),
        ("wgmma", p(params(1, 128, 64, 4, 64).path(KernelPath::Wgmma)), bufs(Fp8::E4m3), Want::Shape("wgmma path")),
        ("NaN factor", p(params(1, 1, 64, 4, 64).kv_descale(Descale::Scalar(f32::NAN), Descale::default())), bufs(Fp8::E4m3), Want::Shape("k_descale")),
        ("infinite factor", p(params(1, 1, 64, 4, 64).kv_descale(Descale::default(), Descale::Scalar(f32::INFINITY))), bufs(Fp8::E4m3), Want::Shape("v_descale")),
        (
            "short per-batch factors",
            p(params(2, 1, 64, 4, 64).heads_kv(2).kv_descale(Descale::Device { factors, per_batch: true }, Descale::default())),
            bufs(Fp8::E4m3),
            Want::TooSmall("k_descale", 4, 3),
        ),
        (
            "factors with 16-bit K/V",
            p(params(1, 1, 64, 4, 64).kv_descale(Descale::Scalar(2.0), Descale::default())),
            Buffers::new(DType::Bf16, BufferRef::new(1 << 32, 1 << 28), BufferRef::new(2 << 32, 1 << 28), BufferRef::new(3 << 32, 1 << 28), BufferRef::new(4 << 32, 1 << 28)),
            Want::Shape("kv_descale"),
        ),
        // One byte short of K's last row.
        ("short K", p(params(1, 1, 64, 4, 64)), short_k, Want::TooSmall("k", 64 * 4 * 64, 64 * 4 * 64 - 1)),
        ("K stride of 8 bytes", p(params(1, 1, 64, 4, 64).k_strides(flashrs::Strides { batch: 64 * 264, row: 264, head: 66 })), bufs(Fp8::E4m3), Want::Misaligned("k")),
    ];
    for (what, p, b, want) in cases {
        let r = plan(&p, &b);
        assert!(result_matches(&r, &want), "{what}: {:?}", r.map(|pl| pl.kernel.to_string()));
    }
    // The per-batch factors' right length plans.
    // SAFETY: planning only.
    let enough: DeviceArray<'static, f32> = unsafe { DeviceArray::from_raw(10 << 32, 4) };
    let ok = params(2, 1, 64, 4, 64).heads_kv(2).kv_descale(Descale::Device { factors: enough, per_batch: true }, Descale::Device { factors: enough, per_batch: false }).build().unwrap();
    assert!(plan(&ok, &bufs(Fp8::E4m3)).is_ok());
    // The backward pass takes no FP8 K/V.
    let grads = flashrs::GradBuffers::new(BufferRef::new(5 << 32, 1 << 28), BufferRef::new(6 << 32, 1 << 28), BufferRef::new(7 << 32, 1 << 28), BufferRef::new(8 << 32, 1 << 28));
    let fwd = params(1, 64, 64, 4, 64).build().unwrap();
    let with_lse = bufs(Fp8::E4m3).lse(BufferRef::new(11 << 32, 1 << 20));
    assert!(result_matches(&fwd.plan_backward(&with_lse, &grads, &t), &Want::Shape("kv")));
}
