//! V (and the output) with a head dimension of their own (`head_dim_v`, DeepSeek's 192 / 128):
//! the planner's kernel and parameters and its typed errors without a GPU; on a GPU, every
//! path against the CPU reference: fixed-length and variable-length, causal, GQA, split-KV,
//! paged caches, with modifications and block masks, on both kernel families.
use flashrs::{BufferRef, Buffers, DType, Error, GradBuffers, KernelPath, PagedKv, Pages, Target};
use flashrs_tests::attn::check_mods_many;
use flashrs_tests::mods::{HostMods, random_blocks};
use flashrs_tests::paged::{PagedCase, check_paged};
use flashrs_tests::varlen::{KeyCounts, VarlenCase, VarlenKv, check_varlen_many};
use flashrs_tests::fake::{self, K, LSE, O, Q, V};
use flashrs_tests::{H100, case_rng, gpu_or_skip, params, planning_index};


/// The planner hands the kernels both head dimensions and a kernel wide enough for the wider,
/// on every target and path; V and the output are sized (and their default strides laid out)
/// by `head_dim_v`.
#[test]
fn calls_plan_with_both_head_dims() {
    for (d, dv) in [(192, 128), (128, 64), (64, 128), (40, 72), (256, 64), (128, 256)] {
        let p = params(2, 1000, 1000, 8, d).heads_kv(2).head_dim_v(dv).build().unwrap();
        let n = p.contiguous_lens().unwrap();
        assert_eq!((n.q, n.k, n.v, n.out), (2 * 1000 * 8 * d, 2 * 1000 * 2 * d, 2 * 1000 * 2 * dv, 2 * 1000 * 8 * dv));
        // Exactly the elements each tensor needs: one fewer in V or the output is refused.
        let exact = Buffers::new(DType::Bf16, BufferRef::new(Q, n.q), BufferRef::new(K, n.k), BufferRef::new(V, n.v), BufferRef::new(O, n.out)).lse(BufferRef::new(LSE, n.lse));
        for t in [H100, Target::A100, Target::L4] {
            for path in [KernelPath::Auto, KernelPath::MmaSync] {
                let plan = p.to_builder().path(path).build().unwrap().plan(&exact, &t).unwrap();
                assert_eq!((plan.params.head_dim, plan.params.head_dim_v), (d as u32, dv as u32), "{d}/{dv} on {t:?}");
                assert!(plan.kernel.head_dim() >= d.max(dv), "{d}/{dv} on {t:?}: {:?}", plan.kernel);
                assert_eq!((plan.params.v_strides[1], plan.params.o_strides[1]), (2 * dv as i64, 8 * dv as i64));
            }
        }
        for tensor in ["v", "out"] {
            let mut short = exact;
            match tensor {
                "v" => short.v.len -= 1,
                _ => short.o.len -= 1,
            }
            let e = p.plan(&short, &H100).unwrap_err();
            assert!(matches!(e, Error::BufferTooSmall { tensor: t, .. } if t == tensor), "{d}/{dv}: {e:?}");
        }
    }
    // On Hopper, 192 / 128 has kernels of its own; other pairs run as wide as the wider.
    let native = params(2, 1000, 1000, 8, 192).head_dim_v(128).build().unwrap().plan(&fake::buffers(), &H100).unwrap();
    assert!(matches!(native.kernel, flashrs::Kernel::Sm90 { config, .. } if config == flashrs::sm90::CONFIGS[flashrs::sm90::VALUE_DIMS[0]]), "{:?}", native.kernel);
    let wide = params(2, 1000, 1000, 8, 128).head_dim_v(64).build().unwrap().plan(&fake::buffers(), &H100).unwrap();
    assert!(matches!(wide.kernel, flashrs::Kernel::Sm90 { config, .. } if config == flashrs::sm90::default_config(128).unwrap()), "{:?}", wide.kernel);
    // Split-KV decode and variable-length batches carry it too.
    let decode = params(4, 1, 8192, 16, 192).heads_kv(2).head_dim_v(128).path(KernelPath::MmaSync).num_splits(4).build().unwrap();
    let plan = decode.plan(&fake::buffers(), &H100).unwrap();
    assert!(plan.split.is_some() && plan.params.head_dim_v == 128, "{plan:?}");
    let v = flashrs::AttentionParams::builder().varlen(&[0, 100, 350], &[0, 200, 300]).heads_q(4).head_dim(192).head_dim_v(128).build().unwrap();
    assert_eq!(v.plan(&fake::buffers(), &H100).unwrap().params.head_dim_v, 128);
}

/// A head_dim_v the kernels cannot take is a typed error naming it; paged caches take it.
#[test]
fn bad_value_head_dims_are_typed_errors() {
        for dv in [0, 12, 264, usize::MAX] {
        let e = params(2, 64, 64, 4, 64).head_dim_v(dv).build().unwrap().plan(&fake::buffers(), &H100).unwrap_err();
        assert!(matches!(e, Error::UnsupportedHeadDimV(x) if x == dv), "{dv}: {e:?}");
    }
    // head_dim is checked first: a bad one is named even with a bad head_dim_v.
    let e = params(2, 64, 64, 4, 12).head_dim_v(12).build().unwrap().plan(&fake::buffers(), &H100).unwrap_err();
    assert!(matches!(e, Error::UnsupportedHeadDim(12)), "{e:?}");
    let pages = Pages { page_size: 16, num_pages: 64, pages_per_seq: 4 };
    let paged = params(2, 1, 64, 4, 128).head_dim_v(64).paged(PagedKv::new(pages, planning_index(6 << 40, 8))).build().unwrap();
    assert_eq!(paged.plan(&fake::buffers(), &H100).unwrap().params.head_dim_v, 64);
}

/// The backward pass plans both head dimensions too: the kernel of the wider on either family,
/// both in its parameters, dO and dV sized by `head_dim_v` and dQ and dK by `head_dim` (one
/// element short of any is refused, naming it).
#[test]
fn backward_plans_with_both_head_dims() {
    use flashrs::KernelChoice;
    for (d, dv) in [(192, 128), (128, 64), (64, 128), (40, 72), (256, 64), (128, 256)] {
        let p = params(2, 1000, 1000, 8, d).heads_kv(2).head_dim_v(dv).build().unwrap();
        let n = p.contiguous_lens().unwrap();
        let exact = Buffers::new(DType::Bf16, BufferRef::new(Q, n.q), BufferRef::new(K, n.k), BufferRef::new(V, n.v), BufferRef::new(O, n.out)).lse(BufferRef::new(LSE, n.lse));
        let g = |at: u64, len: usize| BufferRef::new(at << 40, len);
        let grads = GradBuffers::new(g(8, n.out), g(9, n.q), g(10, n.k), g(11, n.v));
        let padded = [64, 128, 256].into_iter().find(|&x| x >= d.max(dv)).unwrap();
        for t in [H100, Target::A100] {
            for kernel in [KernelChoice::Auto, KernelChoice::MmaSync { config: None }] {
                let mut p = p.clone();
                p.kernel = kernel;
                let plan = p.plan_backward(&exact, &grads, &t).unwrap_or_else(|e| panic!("{d}/{dv} on {t:?}: {e}"));
                let f = &plan.params.fwd;
                assert_eq!((f.head_dim, f.head_dim_v, plan.kernels[1].head_dim(), plan.params.accum_dim), (d as u32, dv as u32, padded, padded as u32), "{d}/{dv} on {t:?}");
            }
        }
        for (tensor, short) in [("dout", 0), ("dq", 1), ("dk", 2), ("dv", 3)] {
            let mut lens = [n.out, n.q, n.k, n.v];
            lens[short] -= 1;
            let grads = GradBuffers::new(g(8, lens[0]), g(9, lens[1]), g(10, lens[2]), g(11, lens[3]));
            let e = p.plan_backward(&exact, &grads, &H100).unwrap_err();
            assert!(matches!(e, Error::BufferTooSmall { tensor: t, .. } if t == tensor), "{d}/{dv}, {tensor} short: {e:?}");
        }
    }
}

/// The paths a GPU runs: mma.sync everywhere, and the Hopper kernels where there are some.
fn paths(gpu: &flashrs::Gpu) -> Vec<KernelPath> {
    if gpu.arch() == flashrs::Arch::Sm90a { vec![KernelPath::MmaSync, KernelPath::Auto] } else { vec![KernelPath::MmaSync] }
}

/// Every pair of head dimensions against the reference on both kernel families: DeepSeek's
/// 192 / 128, a narrower and a wider V, sizes no kernel has natively, causal, GQA, ragged
/// lengths, split-KV decode, and with a window, softcap, ALiBi, sinks or a block mask.
#[test]
fn value_head_dims_match_the_reference() {
    let Some(gpu) = gpu_or_skip("value_head_dims_match_the_reference") else { return };
    let (mut rng, _) = case_rng();
    let shapes = [
        (2, 300, 300, 4, 2, 192, 128),
        (1, 127, 1037, 4, 1, 128, 64),
        (2, 1037, 127, 2, 2, 64, 128),
        (1, 17, 17, 3, 1, 40, 72),
        (1, 257, 257, 2, 2, 256, 64),
        (1, 200, 333, 2, 1, 128, 256),
        (3, 1, 700, 8, 2, 192, 128),
    ];
    let mut cases = vec![];
    for (i, &(b, sq, sk, hq, hkv, d, dv)) in shapes.iter().enumerate() {
        for &path in &paths(&gpu) {
            for causal in [false, true] {
                let dtype = if (i + causal as usize) % 2 == 0 { DType::Bf16 } else { DType::F16 };
                let p = params(b, sq, sk, hq, d).heads_kv(hkv).head_dim_v(dv).causal(causal).path(path).build().unwrap();
                cases.push((p, dtype, HostMods::default()));
            }
        }
    }
    let sinks: Vec<f32> = (0..4).map(|x| 0.5 * x as f32 - 1.0).collect();
    let mods = [
        HostMods { window: (Some(100), Some(20)), softcap: Some(20.0), ..HostMods::default() },
        HostMods { alibi: Some(((0..4).map(|x| 0.02 * (x + 1) as f32).collect(), false)), sinks: Some(sinks), ..HostMods::default() },
        HostMods { blocks: Some(random_blocks(2, 4, 700, 700, 0.5, &mut rng)), ..HostMods::default() },
    ];
    for (j, m) in mods.into_iter().enumerate() {
        for &path in &paths(&gpu) {
            let p = params(2, 700, 700, 4, 192).heads_kv(2).head_dim_v(128).causal(j == 1).path(path).build().unwrap();
            cases.push((p, if j % 2 == 0 { DType::Bf16 } else { DType::F16 }, m.clone()));
        }
    }
    // Split-KV decode (mma.sync): the partial outputs' merge writes V's columns.
    for (d, dv) in [(192, 128), (64, 128)] {
        let p = params(3, 1, 3000, 8, d).heads_kv(2).head_dim_v(dv).path(KernelPath::MmaSync).num_splits(3).build().unwrap();
        cases.push((p, DType::Bf16, HostMods::default()));
    }
    check_mods_many(&gpu, &cases);

    let lens = [(300, 300), (0, 5), (1, 900), (517, 200), (64, 0), (1037, 1037)];
    let (mut cases, mut cases_paged) = (vec![], vec![]);
    for &path in &paths(&gpu) {
        for (i, (d, dv)) in [(192, 128), (128, 64), (64, 256)].into_iter().enumerate() {
            let mut c = VarlenCase::new(&lens, 4, 2, d, i != 1, if i % 2 == 0 { DType::Bf16 } else { DType::F16 });
            c.head_dim_v = Some(dv);
            c.path = path;
            c.device_offsets = i == 2;
            cases.push(c);
        }
    }
    // Paged caches (V's pages of its own width), split and not, fixed-length and under
    // packed queries.
    for (i, (d, dv)) in [(192, 128), (64, 128)].into_iter().enumerate() {
        let p = params(3, 1, 1500, 8, d).heads_kv(2).head_dim_v(dv).num_splits(1 + 2 * i).build().unwrap();
        cases_paged.push(PagedCase::new(p, DType::Bf16, 64, Some(vec![1500, 17, 700]), 1));
        let mut c = VarlenCase::new(&[(1, 900), (37, 300), (0, 40), (129, 700)], 4, 2, d, true, DType::F16);
        c.head_dim_v = Some(dv);
        c.kv = VarlenKv::Paged { page_size: 16, counts: KeyCounts::SequsedK };
        cases.push(c);
    }
    check_varlen_many(&gpu, &cases);
    check_paged(&gpu, &cases_paged);
}
