//! Plans that fit every GPU the build knows (no GPU needed): the calls the GPU suites run, and
//! more, planned for each of [`Target::PRESETS`] (A100: 163 KB per CTA; A10 and L4: 99 KB;
//! H100: 227 KB). Each plan runs a kernel its GPU's module holds, within its shared memory and
//! grid limits; a forced configuration that does not fit is a typed error at plan time, never
//! a failed launch.
use flashrs::sm90;
use flashrs::tiles::{CONFIGS, SPLIT_CONFIGS, VARLEN_CONFIGS};
use flashrs::{
    Arch, AttentionParams, BufferRef, Buffers, DType, DeviceOffsets, Error, Flavor, Kernel, KernelChoice, KernelPath, LaunchPlan, Offsets, PagedKv, Pages, Rows, Target,
    Variant,
};
use flashrs_tests::{params, planning_index, with_splits};

/// The ways a call stores its rows.
#[derive(Clone, Copy, Debug)]
enum Store {
    Fixed,
    HostOffsets,
    DeviceOffsets,
    Paged,
    PackedPaged,
}

/// `p` stored as `store` says: every sequence of the batch its own packed or paged rows.
fn stored(p: AttentionParams<'static>, store: Store) -> AttentionParams<'static> {
    let (b, sq, sk) = (p.batch, p.seqlen_q, p.seqlen_k);
    let cu = |len: usize| (0..=b).map(|i| (i * len) as i32).collect::<Vec<i32>>();
    let pages = Pages::for_batch(b, sk, 16).unwrap();
    let paged = PagedKv::new(pages, planning_index(8 << 40, b * pages.pages_per_seq)).seqused_k(planning_index(9 << 40, b));
    let p = p.to_builder();
    match store {
        Store::Fixed => p,
        Store::HostOffsets => p.rows(Rows::Packed(Offsets::Host { cu_seqlens_q: cu(sq), cu_seqlens_k: cu(sk) })),
        Store::DeviceOffsets => {
            let offsets = DeviceOffsets::new(planning_index(6 << 40, b + 1), b * sq).keys(planning_index(7 << 40, b + 1), b * sk);
            p.varlen_device(offsets)
        }
        Store::Paged => p.paged(paged),
        Store::PackedPaged => p.rows(Rows::Packed(Offsets::Host { cu_seqlens_q: cu(sq), cu_seqlens_k: vec![] })).paged(paged),
    }
    .build()
    .unwrap()
}

/// `p` planned for `t` on disjoint fake buffers of `dtype`, of exactly the contiguous sizes.
fn plan(p: &AttentionParams, dtype: DType, t: &Target) -> flashrs::Result<LaunchPlan> {
    let flashrs::TensorLens { q: nq, k: nk, lse: nl, .. } = p.contiguous_lens()?;
    let r = |i: u64, len: usize| BufferRef { ptr: i << 40, len };
    p.plan(&Buffers::new(dtype, r(1, nq), r(2, nk), r(3, nk), r(4, nq)).lse(r(5, nl)), t)
}

/// What every plan for `t` must be: a kernel of `t`'s module, instantiated, within its
/// shared memory, one block of the kernel's threads, a grid within the 1-D limit.
fn check_fits(what: &str, plan: &LaunchPlan, t: &Target) {
    let k = plan.kernel;
    assert!(k.is_instantiated(), "{what}: {k} is not instantiated");
    assert!(!k.needs_sm90a() || t.arch == Arch::Sm90a, "{what}: {k} on {:?}", t.compute_capability);
    assert!(plan.smem as usize == k.smem_bytes() && plan.smem <= t.max_smem_per_block, "{what}: {k} needs {} of {}", plan.smem, t.max_smem_per_block);
    assert_eq!(plan.block as usize, k.threads(), "{what}");
    assert!(plan.grid <= plan.tiles && plan.tiles <= i32::MAX as u32, "{what}: grid {} of {} tiles", plan.grid, plan.tiles);
    assert!(!plan.persistent || plan.grid <= t.sm_count, "{what}: persistent grid {} on {} SMs", plan.grid, t.sm_count);
}

#[test]
fn every_call_of_the_test_matrix_plans_on_every_target() {
    let mut planned = 0;
    for t in Target::PRESETS {
        let mut kernels = std::collections::HashSet::new();
        for head_dim in [8, 64, 72, 96, 128, 200, 256] {
            for (batch, sq, sk) in [(4, 1, 4096), (2, 16, 8192), (2, 127, 300), (1, 1037, 1500), (1, 4096, 4096), (8, 1, 1024)] {
                for (hq, hkv) in [(8, 8), (8, 2)] {
                    for store in [Store::Fixed, Store::HostOffsets, Store::DeviceOffsets, Store::Paged, Store::PackedPaged] {
                        for kernel in [KernelPath::Auto, KernelPath::MmaSync] {
                            for (causal, dtype, splits) in [(false, DType::F16, None), (true, DType::Bf16, None), (true, DType::F16, Some(4))] {
                                let base = params(batch, sq, sk, hq, head_dim).heads_kv(hkv).causal(causal);
                                let p = stored(with_splits(base.path(kernel), splits), store);
                                let what = format!("{t:?}: {dtype:?} {p:?}");
                                let plan = plan(&p, dtype, &t).unwrap_or_else(|e| panic!("{what}: {e}"));
                                check_fits(&what, &plan, &t);
                                kernels.insert(plan.kernel);
                                planned += 1;
                            }
                        }
                    }
                }
            }
        }
        // Head_dim 256 runs in 96 KB on the small-memory GPUs, in every variant.
        let small = kernels.iter().filter(|k| matches!(k, Kernel::Mma { config, .. } if *config == flashrs::tiles::SMALL_D256)).count();
        assert_eq!(small > 0, t.max_smem_per_block < 196_608, "{t:?}: {small} kernels of the small head_dim-256 configuration");
        println!("{:?} sm_{}{}: {} distinct kernels", t.arch, t.compute_capability.0, t.compute_capability.1, kernels.len());
    }
    println!("{planned} plans, every one within its GPU's limits");
}

/// The Hopper kernels only where the sm_90a module runs: `Auto` takes them on an H100 and
/// never elsewhere, and a forced wgmma path is a typed error on other GPUs.
#[test]
fn hopper_kernels_only_on_sm90a() {
    let p = params(2, 2048, 2048, 16, 128).causal(true).build().unwrap();
    for t in Target::PRESETS {
        let auto = plan(&p, DType::F16, &t).unwrap();
        assert_eq!(auto.kernel.needs_sm90a(), t.arch == Arch::Sm90a, "{t:?}: {}", auto.kernel);
        match plan(&p.to_builder().path(KernelPath::Wgmma).build().unwrap(), DType::F16, &t) {
            Ok(w) => assert!(t.arch == Arch::Sm90a && w.kernel.needs_sm90a()),
            Err(Error::PathUnavailable { path: "wgmma", .. }) => assert_ne!(t.arch, Arch::Sm90a),
            Err(e) => panic!("{t:?}: {e}"),
        }
    }
}

/// Forced configurations: each plans where it fits, and is `SharedMemory` where it does not;
/// forced Hopper configurations plan on an H100 in every combination.
#[test]
fn forced_configurations_fit_or_are_refused_at_plan_time() {
    for t in Target::PRESETS {
        for c in CONFIGS {
            let p = params(2, 300, 300, 4, c.head_dim).config(c).build().unwrap();
            match plan(&p, DType::F16, &t) {
                Ok(pl) => assert!(c.smem_bytes() <= t.max_smem_per_block as usize && pl.kernel == Kernel::Mma { dtype: DType::F16, kv: None, variant: Variant::Plain, config: c, flavor: Flavor::Plain }),
                Err(Error::SharedMemory { needed, available, .. }) => {
                    assert!(needed as usize == c.smem_bytes() && needed > available && available == t.max_smem_per_block as u64)
                }
                Err(e) => panic!("{t:?} {c:?}: {e}"),
            }
        }
        // Variable-length and split calls fall back to a configuration of their own table that
        // fits: none of those is refused.
        for d in [64, 128, 256] {
            for store in [Store::HostOffsets, Store::Paged] {
                let p = stored(params(2, 1, 5000, 8, d).heads_kv(2).num_splits(3).build().unwrap(), store);
                let pl = plan(&p, DType::F16, &t).unwrap();
                assert!(matches!(pl.kernel, Kernel::Mma { config, .. } if VARLEN_CONFIGS.contains(&config) || SPLIT_CONFIGS.contains(&config)));
                check_fits(&format!("{t:?} {d} {store:?}"), &pl, &t);
            }
        }
    }
    for c in sm90::CONFIGS {
        for persistent in [false, true] {
            let p = params(2, 1000, 700, 4, c.head_dim).head_dim_v(c.head_dim_v).kernel(KernelChoice::Wgmma { config: Some(c), persistent: Some(persistent) }).build().unwrap();
            let pl = plan(&p, DType::F16, &Target::H100).unwrap();
            assert_eq!(pl.kernel, Kernel::Sm90 { dtype: DType::F16, inputs: None, varlen: false, paged: false, config: c, flavor: Flavor::Plain });
            assert_eq!(pl.persistent, persistent);
            check_fits(&format!("{c:?}"), &pl, &Target::H100);
        }
    }
}
