//! Attention modifications (sliding window, softcap, ALiBi, sinks, block masks): the planner's kernel choice
//! and its typed errors without a GPU; on a GPU, every modification alone and together against
//! the CPU reference with the same ones, on both kernel paths, fixed-length and
//! variable-length.
use cust::memory::{CopyDestination, DeviceBuffer};
use cust::stream::{Stream, StreamFlags};
use flashrs::abi::bwd::{BWD_CONFIGS, BWD_MODS};
use flashrs::tiles::MODS_CONFIGS;
use flashrs::{
    AccumLayout, AttentionParams, AttentionParamsBuilder, BufferRef, BwdStep, DType, DeviceArray, Error, Flavor, GradBuffers, Kernel, KernelPath, Mods,
    PagedKv, Pages, Target, Variant, Window, sm90,
};
use flashrs_tests::attn::check_mods_many;
use flashrs_tests::mods::{HostMods, random_blocks};
use flashrs_tests::varlen::{VarlenCase, check_varlen_many};
use flashrs_tests::fake::{self, LSE, O};
use flashrs_tests::{H100, case_rng, gpu_or_skip, params, planning_index};
use rand::Rng;

/// Made-up addresses of the modifications' arrays, past [`fake`]'s tensors.
const SLOPES: u64 = 6 << 40;
const SINKS: u64 = 7 << 40;

/// An f32 array at a made-up address, for planning.
fn planning_array(ptr: u64, len: usize) -> DeviceArray<'static, f32> {
    // SAFETY: only planned, never launched.
    unsafe { DeviceArray::from_raw(ptr, len) }
}

/// Where [`planning_mask`]'s arrays lie.
const MASK: u64 = 12 << 40;

/// A block mask of ample arrays at made-up addresses, for planning.
fn planning_mask(batch: usize, heads: usize, q_blocks: usize, kv_blocks: usize) -> flashrs::BlockMask<'static> {
    let a = |i: u64| planning_index(MASK + (i << 36), 1 << 30);
    flashrs::BlockMask { counts: a(0), indices: a(1), full: Some((a(2), a(3))), batch, heads, q_blocks, kv_blocks }
}

/// ALiBi slopes as BLOOM sets them for `heads` heads: `2^(-8 (h + 1) / heads)`.
fn bloom_slopes(heads: usize) -> Vec<f32> {
    (0..heads).map(|h| 2f32.powf(-8.0 * (h + 1) as f32 / heads as f32)).collect()
}

/// Calls with modifications run on their own kernels: the Hopper ones on an H100 (head_dim 64
/// with two consumer warpgroups), `mma.sync` from the modification table elsewhere and when
/// asked for; never split or GQA-packed, also when decode-shaped; plain calls keep theirs.
#[test]
fn modification_calls_plan_their_own_kernels() {
    let win = |p: AttentionParamsBuilder<'static>| p.window(Some(128), Some(0)).build().unwrap();
    for d in [64, 96, 128, 256] {
        let p = win(params(2, 1000, 1000, 8, d));
        let plan = p.plan(&fake::buffers(), &H100).unwrap();
        let want = sm90::mods_config(d).unwrap();
        assert_eq!(plan.kernel, Kernel::Sm90 { dtype: DType::Bf16, inputs: None, varlen: false, paged: false, config: want, flavor: Flavor::Mods }, "d{d}");
        assert_eq!(plan.params.mods.window_left, 128);
        for t in [Target::A100, Target::L4] {
            let plan = p.plan(&fake::buffers(), &t).unwrap();
            let Kernel::Mma { variant: Variant::Plain, config, flavor: Flavor::Mods, .. } = plan.kernel else { panic!("d{d} on {t:?}: {:?}", plan.kernel) };
            assert!(MODS_CONFIGS.contains(&config) && config.smem_bytes() <= t.max_smem_per_block as usize);
        }
        let forced = win(params(2, 1000, 1000, 8, d).path(KernelPath::MmaSync)).plan(&fake::buffers(), &H100).unwrap();
        assert!(matches!(forced.kernel, Kernel::Mma { variant: Variant::Plain, flavor: Flavor::Mods, .. }), "{:?}", forced.kernel);
        let plain = params(2, 1000, 1000, 8, d).build().unwrap().plan(&fake::buffers(), &H100).unwrap();
        assert!(!plain.kernel.mods() && plain.params.mods == flashrs::ModParams::NONE);
    }
    // Decode-shaped GQA: the plain call packs the group and splits the keys; with sinks, one
    // CTA per query head and no split.
    let decode = params(4, 1, 32768, 32, 128).heads_kv(4);
    let plain = decode.clone().path(KernelPath::MmaSync).build().unwrap().plan(&fake::buffers(), &H100).unwrap();
    assert!(plain.packs_gqa && plain.split.is_some());
    let sinks = decode.path(KernelPath::MmaSync).sinks(planning_array(SINKS, 32)).build().unwrap().plan(&fake::buffers(), &H100).unwrap();
    assert!(!sinks.packs_gqa && sinks.split.is_none() && sinks.kernel.mods(), "{sinks:?}");
    assert_eq!(sinks.params.mods.sinks, SINKS);
    // Variable-length: the variable-length modification kernels.
    let v = AttentionParams::builder().varlen(&[0, 100, 350], &[0, 200, 300]).heads_q(4).head_dim(128).softcap(30.0).build().unwrap();
    let plan = v.plan(&fake::buffers(), &H100).unwrap();
    assert!(matches!(plan.kernel, Kernel::Sm90 { varlen: true, paged: false, flavor: Flavor::Mods, .. }), "{:?}", plan.kernel);
    let plan = v.to_builder().path(KernelPath::MmaSync).build().unwrap().plan(&fake::buffers(), &H100).unwrap();
    assert!(matches!(plan.kernel, Kernel::Mma { variant: Variant::Varlen, flavor: Flavor::Mods, .. }), "{:?}", plan.kernel);
    // The softcap's factors and causal masking folded into the window's right side.
    let c = params(1, 64, 64, 2, 64).causal(true).window(Some(8), Some(5)).softcap(4.0).softmax_scale(0.5).build().unwrap();
    let m = c.plan(&fake::buffers(), &H100).unwrap().params.mods;
    assert_eq!((m.window_left, m.window_right, m.softcap_post), (8, 0, 8.0));
    assert!((m.softcap_pre - 0.25 * std::f32::consts::LOG2_E).abs() < 1e-7);
    // Block masks: the block-sparse kernels, alone or with other modifications, fixed or
    // variable length, both paths; the mask's arrays and strides in the parameters.
    for d in [64, 128, 256] {
        let sparse = params(2, 1000, 1000, 8, d).block_mask(planning_mask(1, 8, 8, 8)).build().unwrap();
        let plan = sparse.plan(&fake::buffers(), &H100).unwrap();
        assert_eq!(plan.kernel, Kernel::Sm90 { dtype: DType::Bf16, inputs: None, varlen: false, paged: false, config: sm90::mods_config(d).unwrap(), flavor: Flavor::Sparse });
        let b = plan.params.mods.blocks;
        assert_eq!((b.counts, b.full_counts, b.batch_stride, b.head_stride, b.kv_blocks), (MASK, MASK + (2 << 36), 0, 8, 8));
        let mma = sparse.to_builder().softcap(30.0).path(KernelPath::MmaSync).build().unwrap().plan(&fake::buffers(), &Target::A100).unwrap();
        assert!(matches!(mma.kernel, Kernel::Mma { variant: Variant::Plain, flavor: Flavor::Sparse, .. }), "{:?}", mma.kernel);
        // Long non-causal keys: a block-sparse call's work tiles are its visited blocks, so it
        // runs persistent where the Hopper configuration keeps two Q tiles (not head_dim 256),
        // unlike the same call without the mask.
        let long = params(1, 8192, 8192, 8, d).block_mask(planning_mask(1, 8, 64, 64)).build().unwrap();
        let dense = params(1, 8192, 8192, 8, d).window(Some(100), None).build().unwrap();
        let persistent = |p: &AttentionParams| p.plan(&fake::buffers(), &H100).unwrap().persistent;
        assert_eq!((persistent(&long), persistent(&dense)), (d != 256, false), "head_dim {d}");
    }
    let v = AttentionParams::builder().varlen(&[0, 100, 350], &[0, 200, 300]).heads_q(4).head_dim(128).block_mask(planning_mask(2, 1, 2, 2)).build().unwrap();
    assert!(matches!(v.plan(&fake::buffers(), &H100).unwrap().kernel, Kernel::Sm90 { varlen: true, paged: false, flavor: Flavor::Sparse, .. }));
}

/// Bad modifications are typed errors naming the problem, planned or launched (with the
/// caller's buffers untouched where a GPU runs it).
#[test]
fn bad_modifications_are_typed_errors() {
    let base = || params(2, 64, 64, 4, 64);
    let shape = |what: &'static str| move |e: &Error| matches!(e, Error::InvalidShape { what: w, .. } if *w == what);
    let buffer = |tensor: &'static str| move |e: &Error| matches!(e, Error::InvalidBuffer { tensor: t, .. } if *t == tensor);
    let small = |tensor: &'static str, needed: u64| move |e: &Error| matches!(e, Error::BufferTooSmall { tensor: t, needed: n, .. } if *t == tensor && *n == needed);
    let misaligned = |tensor: &'static str| move |e: &Error| matches!(e, Error::Misaligned { tensor: t, .. } if *t == tensor);
    let pages = Pages { page_size: 16, num_pages: 64, pages_per_seq: 4 };
    let cases: Vec<(&str, AttentionParams<'static>, Box<dyn Fn(&Error) -> bool>)> = vec![
        ("softcap 0", base().softcap(0.0).build().unwrap(), Box::new(shape("softcap"))),
        ("softcap -1", base().softcap(-1.0).build().unwrap(), Box::new(shape("softcap"))),
        ("softcap NaN", base().softcap(f32::NAN).build().unwrap(), Box::new(shape("softcap"))),
        ("softcap inf", base().softcap(f32::INFINITY).build().unwrap(), Box::new(shape("softcap"))),
        ("softcap underflowing", base().softcap(f32::MAX).softmax_scale(1e-30).build().unwrap(), Box::new(shape("softcap"))),
        ("slopes per head too few", base().alibi(planning_array(SLOPES, 3), false).build().unwrap(), Box::new(small("alibi_slopes", 4))),
        ("slopes per batch too few", base().alibi(planning_array(SLOPES, 4), true).build().unwrap(), Box::new(small("alibi_slopes", 8))),
        ("slopes null", base().alibi(planning_array(0, 4), false).build().unwrap(), Box::new(buffer("alibi_slopes"))),
        (
            "slopes under a subnormal scale",
            base().alibi(planning_array(SLOPES, 4), false).softmax_scale(1e-40).build().unwrap(),
            Box::new(shape("softmax_scale")),
        ),
        ("sinks too few", base().sinks(planning_array(SINKS, 2)).build().unwrap(), Box::new(small("sinks", 4))),
        ("sinks misaligned", base().sinks(planning_array(SINKS + 2, 4)).build().unwrap(), Box::new(misaligned("sinks"))),
        ("output over the sinks", base().sinks(planning_array(O + 64, 4)).build().unwrap(), Box::new(buffer("out"))),
        ("lse over the slopes", base().alibi(planning_array(LSE, 4), false).build().unwrap(), Box::new(buffer("lse"))),
        ("paged cache", base().window(Some(4), None).paged(PagedKv::new(pages, planning_index(SLOPES, 8))).build().unwrap(), Box::new(shape("mods"))),
        ("split keys", base().softcap(5.0).num_splits(4).build().unwrap(), Box::new(shape("num_splits"))),
        ("block mask of 3 heads", base().block_mask(planning_mask(2, 3, 1, 1)).build().unwrap(), Box::new(shape("block_mask"))),
        ("block mask of 3 batch entries", base().block_mask(planning_mask(3, 1, 1, 1)).build().unwrap(), Box::new(shape("block_mask"))),
        ("block mask short of query blocks", params(1, 300, 64, 4, 64).block_mask(planning_mask(1, 1, 2, 1)).build().unwrap(), Box::new(shape("block_mask"))),
        ("block mask of no key block", base().block_mask(planning_mask(1, 1, 1, 0)).build().unwrap(), Box::new(shape("block_mask"))),
        ("block mask short of key blocks", params(1, 64, 300, 4, 64).block_mask(planning_mask(1, 1, 1, 2)).build().unwrap(), Box::new(shape("block_mask"))),
        (
            "block mask counts too few",
            base().block_mask(flashrs::BlockMask { counts: planning_index(MASK, 1), ..planning_mask(2, 4, 1, 2) }).build().unwrap(),
            Box::new(small("block_mask.counts", 8)),
        ),
        (
            "block mask indices too few",
            base().block_mask(flashrs::BlockMask { indices: planning_index(MASK, 15), ..planning_mask(2, 4, 1, 2) }).build().unwrap(),
            Box::new(small("block_mask.indices", 16)),
        ),
        (
            "block mask entries past i32",
            base().block_mask(planning_mask(2, 4, 1 << 16, 1 << 14)).build().unwrap(),
            Box::new(shape("block_mask")),
        ),
        ("output over the block mask", base().block_mask(flashrs::BlockMask { indices: planning_index(O + 64, 4), ..planning_mask(1, 1, 1, 1) }).build().unwrap(), Box::new(buffer("out"))),
        ("paged cache with a block mask", base().block_mask(planning_mask(1, 1, 1, 1)).paged(PagedKv::new(pages, planning_index(SLOPES, 8))).build().unwrap(), Box::new(shape("mods"))),
        (
            "config outside the table",
            base().window(Some(4), None).config(flashrs::tiles::CONFIGS[1]).build().unwrap(),
            Box::new(shape("config")),
        ),
    ];
    for (name, p, want) in &cases {
        match p.plan(&fake::buffers(), &H100) {
            Err(e) => assert!(want(&e), "{name}: wrong error {e:?}"),
            Ok(plan) => panic!("{name}: planned {:?}", plan.kernel),
        }
    }
    let grads = GradBuffers::new(BufferRef::new(8 << 40, 1 << 20), BufferRef::new(9 << 40, 1 << 20), BufferRef::new(10 << 40, 1 << 20), BufferRef::new(11 << 40, 1 << 20));
    // Block masks take the block-sparse twins (with a window, those of the `mma.sync`
    // modification kernels; alone, on sm_90a, the Hopper kernel's), after the two launches that
    // turn the mask around: a CTA per row of the mask (2 x 4 x 1), a warp per 32 key blocks of
    // each (batch entry, K/V head); the lists (bitmaps, counts, steps; turns when
    // deterministic) after the workspace's counters.
    for (deterministic, window) in [(false, Some(8)), (true, Some(8)), (false, None), (true, None)] {
        let p = base().window(window, None).block_mask(planning_mask(2, 4, 1, 1)).deterministic(deterministic).build().unwrap();
        for target in [&H100, &Target::A100, &Target::L4] {
            let plan = p.plan_backward(&fake::buffers(), &grads, target).unwrap();
            let hopper = window.is_none() && target.arch == flashrs::Arch::Sm90a;
            let (dtype, block_m) = match plan.kernels[1] {
                Kernel::Bwd { step: BwdStep::Main { config, flavor: Flavor::Sparse, .. }, dtype } if !hopper => {
                    assert!(BWD_MODS.iter().any(|&i| BWD_CONFIGS[i] == config));
                    (dtype, config.block_m)
                }
                Kernel::Bwd { step: BwdStep::MainSm90 { config, flavor: Flavor::Sparse, varlen: false }, dtype } if hopper => (dtype, config.block_m),
                k => panic!("{k:?}"),
            };
            assert!(plan.kernels[1].is_instantiated());
            let lists = plan.lists.clone().unwrap();
            assert_eq!(lists.kernels, [(Kernel::Bwd { dtype, step: BwdStep::SparseBits }, 8), (Kernel::Bwd { dtype, step: BwdStep::SparseLists }, 2 * 4)]);
            let l = plan.params.lists;
            // 64 rows and keys: one key block, and per list the group's heads' steps.
            let group = (plan.params.fwd.group) as usize;
            assert_eq!((l.words, l.kv_blocks, l.block_m, l.per_list as usize), (1, 1, block_m as u32, group * 64usize.div_ceil(block_m)));
            let counts = 2 * (4 / group);
            let entries = counts * l.per_list as usize;
            let want = [8, counts, entries, if deterministic { entries } else { 0 }].map(|n| (4 * n).next_multiple_of(16));
            assert_eq!(lists.bytes, want);
            assert_eq!(plan.workspace_bytes, lists.offset + want.iter().sum::<usize>());
            assert!(lists.offset > 0 && lists.offset % 16 == 0 && (l.bits, l.counts, l.entries, l.turns) == (0, 0, 0, 0));
        }
        // With a window, not on the Hopper kernel yet.
        let mut hopper = p.clone();
        hopper.kernel = flashrs::KernelChoice::Wgmma { config: None, persistent: None };
        match hopper.plan_backward(&fake::buffers(), &grads, &H100) {
            Err(Error::InvalidShape { what: "kernel", reason }) if window.is_some() => assert!(reason.contains("window"), "{reason}"),
            Ok(plan) if window.is_none() => assert_eq!(plan.kernels[1].flavor(), Flavor::Sparse),
            other => panic!("{other:?}"),
        }
    }
    // Lists pack a step and a query head in 16 bits each: past 65536 steps of a query head, or
    // 65536 query heads, a typed error.
    let big = GradBuffers::new(BufferRef::new(8 << 40, 1 << 30), BufferRef::new(9 << 40, 1 << 30), BufferRef::new(10 << 40, 1 << 30), BufferRef::new(11 << 40, 1 << 30));
    let long = params(1, 9_000_000, 128, 1, 64).block_mask(planning_mask(1, 1, 9_000_000usize.div_ceil(128), 1)).build().unwrap();
    let many_heads = params(1, 1, 128, 65537, 64).heads_kv(1).block_mask(planning_mask(1, 1, 1, 1)).build().unwrap();
    for (p, target) in [&long, &many_heads].into_iter().flat_map(|p| [(p, &H100), (p, &Target::A100)]) {
        match p.plan_backward(&fake::buffers(), &big, target) {
            Err(Error::InvalidShape { what: "block_mask", reason }) => assert!(reason.contains("65536"), "{reason}"),
            other => panic!("{other:?}"),
        }
    }
    // Without a block mask, no list launches.
    assert!(base().window(Some(8), None).build().unwrap().plan_backward(&fake::buffers(), &grads, &H100).unwrap().lists.is_none());
    // Windows and ALiBi take the modification twin of the Hopper kernel on sm_90a, softcap
    // (whose derivative pass does not fit it) and other GPUs those of `mma.sync` (dQ in
    // fragment order on sm_90a, in rows elsewhere), with the window, the cap and the slopes in
    // the parameters; sinks alone keep the plain kernels.
    let softcap = base().softcap(5.0).sinks(planning_array(SINKS, 4)).causal(true).build().unwrap();
    for p in [base().window(Some(8), None).build().unwrap(), base().alibi(planning_array(SLOPES, 4), false).causal(true).build().unwrap(), softcap] {
        let capped = p.mods.softcap.is_some();
        for target in [&H100, &Target::A100, &Target::L4] {
            let (hopper, frag) = (target.arch == flashrs::Arch::Sm90a, target.arch == flashrs::Arch::Sm90a);
            let hopper = hopper && !capped;
            let mut mma = p.clone();
            mma.kernel = flashrs::KernelChoice::MmaSync { config: None };
            let frag = if frag { AccumLayout::Fragments } else { AccumLayout::Rows };
            match mma.plan_backward(&fake::buffers(), &grads, target).unwrap().kernels[1] {
                Kernel::Bwd { step: BwdStep::Main { config, accum, flavor: Flavor::Mods }, .. } => {
                    assert!(BWD_MODS.iter().any(|&i| BWD_CONFIGS[i] == config) && config.head_dim == 64 && accum == frag)
                }
                k => panic!("{k:?}"),
            }
            let plan = p.plan_backward(&fake::buffers(), &grads, target).unwrap();
            match plan.kernels[1] {
                Kernel::Bwd { step: BwdStep::MainSm90 { config, varlen: false, flavor: Flavor::Mods }, .. } if hopper => assert_eq!(config.head_dim, 64),
                Kernel::Bwd { step: BwdStep::Main { flavor: Flavor::Mods, .. }, .. } if !hopper => {}
                k => panic!("{k:?}"),
            }
            assert!(matches!(plan.kernels[0], Kernel::Bwd { step: BwdStep::Prep(a), .. } if a == frag));
            assert!(plan.kernels[1].is_instantiated() && plan.kernels[1].mods());
        }
        assert_eq!(p.plan_backward(&fake::buffers(), &grads, &H100).unwrap().params.fwd.mods, p.plan(&fake::buffers(), &H100).unwrap().params.mods);
        // Forced onto the Hopper family it is the same plan (a softcap: a typed error); with a
        // block mask too, a typed error (the block-sparse Hopper twin takes none of these).
        let mut hopper = p.clone();
        hopper.kernel = flashrs::KernelChoice::Wgmma { config: None, persistent: None };
        match hopper.plan_backward(&fake::buffers(), &grads, &H100) {
            Err(Error::InvalidShape { what: "kernel", .. }) if capped => {}
            Ok(plan) if !capped => assert_eq!(plan.kernels, p.plan_backward(&fake::buffers(), &grads, &H100).unwrap().kernels),
            r => panic!("{r:?}"),
        }
        let index = |i: u64| flashrs_tests::planning_index((1 << 45) + (i << 40), 64);
        hopper.mods.blocks = Some(flashrs::BlockMask { counts: index(0), indices: index(1), full: None, batch: 1, heads: 1, q_blocks: 1, kv_blocks: 1 });
        assert!(matches!(hopper.plan_backward(&fake::buffers(), &grads, &H100), Err(Error::InvalidShape { what: "kernel", .. })));
    }
    // Head dim 128 takes the two-stage 64 x 64 twin where it fits, the one-stage one on 99 KB.
    let d128 = params(2, 64, 64, 4, 128).window(Some(8), None).kernel(flashrs::KernelChoice::MmaSync { config: None }).build().unwrap();
    for (target, stages) in [(&H100, 2), (&Target::A100, 2), (&Target::L4, 1)] {
        match d128.plan_backward(&fake::buffers(), &grads, target).unwrap().kernels[1] {
            Kernel::Bwd { step: BwdStep::Main { config, flavor: Flavor::Mods, .. }, .. } => assert_eq!((config.block_m, config.block_n, config.stages), (64, 64, stages)),
            k => panic!("{k:?}"),
        }
    }
    let with_sinks = base().sinks(planning_array(SINKS, 4)).build().unwrap();
    let dsinks = BufferRef::new(12 << 40, 4);
    for target in [&H100, &flashrs::Target::A100] {
        let plan = with_sinks.plan_backward(&fake::buffers(), &grads.dsinks(dsinks), target).unwrap();
        // The dQ kernel writes the sinks' gradient and reads the logits; the main kernel is the
        // plain one (the log-sum-exp already counts the sinks).
        assert_eq!((plan.params.dsinks, plan.params.fwd.mods.sinks, plan.dsinks), (12 << 40, SINKS, Some(BufferRef::new(12 << 40, 4))));
        assert!(matches!(plan.kernels[1], Kernel::Bwd { .. }));
        // Without dsinks: the gradients of Q, K and V alone.
        assert_eq!(with_sinks.plan_backward(&fake::buffers(), &grads, target).unwrap().params.dsinks, 0);
    }
    let refused = |p: &AttentionParams, g: GradBuffers| p.plan_backward(&fake::buffers(), &g, &H100).unwrap_err();
    assert!(matches!(refused(&base().build().unwrap(), grads.dsinks(dsinks)), Error::InvalidBuffer { tensor: "dsinks", .. }));
    assert!(matches!(refused(&with_sinks, grads.dsinks(BufferRef::new(12 << 40, 3))), Error::BufferTooSmall { tensor: "dsinks", needed: 4, .. }));
    assert!(matches!(refused(&with_sinks, grads.dsinks(BufferRef::new((12 << 40) + 2, 4))), Error::Misaligned { tensor: "dsinks", .. }));
    for (at, other) in [(SINKS, "sinks"), (11 << 40, "dv"), (O, "out"), (LSE, "lse")] {
        match refused(&with_sinks, grads.dsinks(BufferRef::new(at, 4))) {
            Error::InvalidBuffer { tensor: "dsinks", reason } => assert!(reason.contains(other), "{other}: {reason}"),
            e => panic!("{other}: {e:?}"),
        }
    }
    // A call with nothing to compute still zeroes the sinks' gradient.
    let empty = params(0, 64, 64, 4, 64).sinks(planning_array(SINKS, 4)).build().unwrap();
    let plan = empty.plan_backward(&fake::buffers(), &grads.dsinks(dsinks), &H100).unwrap();
    assert!(plan.grids.iter().all(|&g| g == 0) && !plan.is_empty() && plan.dsinks == Some(dsinks));

    // On a GPU: a launch with a bad modification writes nothing.
    let Some(gpu) = gpu_or_skip("bad_modifications_are_typed_errors (GPU part)") else { return };
    let n = 2 * 64 * 4 * 64;
    let x = DeviceBuffer::from_slice(&vec![half::f16::ONE; n]).unwrap();
    let pattern = half::f16::from_bits(0x7e5a);
    let mut out = DeviceBuffer::from_slice(&vec![pattern; n]).unwrap();
    let mut lse = DeviceBuffer::from_slice(&vec![f32::from_bits(0x7fc0_1234); 2 * 4 * 64]).unwrap();
    let few = DeviceBuffer::from_slice(&[0.5f32; 3]).unwrap();
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    for p in [base().alibi(DeviceArray::new(&few), false).build().unwrap(), base().sinks(DeviceArray::new(&few)).build().unwrap(), base().softcap(f32::NAN).build().unwrap()] {
        assert!(gpu.attention_forward(&stream, &p, &x, &x, &x, &mut out, Some(&mut lse)).is_err());
    }
    stream.synchronize().unwrap();
    let (mut o_h, mut l_h) = (vec![half::f16::ZERO; n], vec![0f32; 2 * 4 * 64]);
    out.copy_to(&mut o_h[..]).unwrap();
    lse.copy_to(&mut l_h[..]).unwrap();
    assert!(o_h.iter().all(|v| v.to_bits() == 0x7e5a) && l_h.iter().all(|v| v.to_bits() == 0x7fc0_1234), "a refused call wrote");
}

/// The modifications of the GPU cases: each alone (windows of every shape), then together.
fn mod_sets(heads_q: usize, batch: usize, rng: &mut impl Rng) -> Vec<(HostMods, bool)> {
    let sinks: Vec<f32> = (0..heads_q).map(|_| rng.random_range(-3.0..3.0)).collect();
    let per_batch: Vec<f32> = (0..batch * heads_q).map(|_| rng.random_range(0.01..0.5)).collect();
    let w = |l, r| HostMods { window: (l, r), ..HostMods::default() };
    vec![
        (w(Some(64), Some(0)), false),
        (w(Some(100), None), true),
        (w(None, Some(32)), false),
        (w(Some(0), Some(0)), false),
        (w(Some(300), Some(200)), false),
        (HostMods { softcap: Some(5.0), ..HostMods::default() }, false),
        (HostMods { softcap: Some(1.5), ..HostMods::default() }, true),
        (HostMods { alibi: Some((bloom_slopes(heads_q), false)), ..HostMods::default() }, false),
        (HostMods { alibi: Some((per_batch.clone(), true)), ..HostMods::default() }, true),
        (HostMods { sinks: Some(sinks.clone()), ..HostMods::default() }, true),
        (HostMods { sinks: Some(sinks.clone()), ..HostMods::default() }, false),
        (HostMods { window: (Some(200), Some(0)), softcap: Some(30.0), alibi: Some((bloom_slopes(heads_q), false)), sinks: Some(sinks), blocks: None, bias: None }, false),
    ]
}

/// Every modification, alone and together, against the reference: fixed-length calls of
/// ragged lengths (1, 17, 127, 1037, seqlen_q != seqlen_k both ways), GQA, head_dim 64, 80,
/// 128 and 256, f16 and bf16, on `mma.sync` and (on an H100/H200) the Hopper kernels.
#[test]
fn modifications_match_the_reference() {
    let Some(gpu) = gpu_or_skip("modifications_match_the_reference") else { return };
    let (mut rng, _) = case_rng();
    let shapes = [(2, 300, 300, 4, 2, 64), (1, 127, 1037, 4, 1, 128), (2, 1037, 127, 2, 2, 256), (1, 17, 17, 3, 1, 80), (3, 1, 700, 8, 2, 128)];
    let paths = if gpu.arch() == flashrs::Arch::Sm90a { vec![KernelPath::MmaSync, KernelPath::Auto] } else { vec![KernelPath::MmaSync] };
    let mut cases = vec![];
    for (i, &(b, sq, sk, hq, hkv, d)) in shapes.iter().enumerate() {
        for (j, (mods, causal)) in mod_sets(hq, b, &mut rng).into_iter().enumerate() {
            for &path in &paths {
                let dtype = if (i + j) % 2 == 0 { DType::Bf16 } else { DType::F16 };
                cases.push((params(b, sq, sk, hq, d).heads_kv(hkv).causal(causal).path(path).build().unwrap(), dtype, mods.clone()));
            }
        }
    }
    check_mods_many(&gpu, &cases);
}

/// Variable-length batches with modifications, offsets on the host and on the GPU: windows
/// with softcap and GQA, per-sequence ALiBi slopes, sinks with sequences that see no key.
#[test]
fn variable_length_modifications_match_the_reference() {
    let Some(gpu) = gpu_or_skip("variable_length_modifications_match_the_reference") else { return };
    let lens = [(300, 300), (0, 5), (1, 900), (517, 200), (64, 0), (1037, 1037)];
    let hq = 4;
    let mut cases = vec![];
    let paths = if gpu.arch() == flashrs::Arch::Sm90a { vec![KernelPath::MmaSync, KernelPath::Auto] } else { vec![KernelPath::MmaSync] };
    for &path in &paths {
        for (i, d) in [64, 128, 256].into_iter().enumerate() {
            let dtype = if i % 2 == 0 { DType::Bf16 } else { DType::F16 };
            let mut c = VarlenCase::new(&lens, hq, 2, d, i != 1, dtype);
            c.path = path;
            c.device_offsets = i == 2;
            c.mods = match i {
                0 => HostMods { window: (Some(100), Some(0)), softcap: Some(20.0), ..HostMods::default() },
                1 => HostMods { window: (Some(50), Some(70)), alibi: Some(((0..lens.len() * hq).map(|x| 0.02 * x as f32).collect(), true)), ..HostMods::default() },
                _ => HostMods { sinks: Some(vec![0.5, -1.0, 2.0, 0.0]), alibi: Some((bloom_slopes(hq), false)), ..HostMods::default() },
            };
            cases.push(c);
        }
    }
    check_varlen_many(&gpu, &cases);
}

/// Block-sparse calls against the reference: random masks (per head and shared, partial and
/// full lists) alone and with causal masking, a window, softcap, ALiBi and sinks (rows whose
/// blocks are all skipped then see only the sink), the causal pattern against plain causal
/// attention's reference, GQA, head_dim 64/128/256, ragged lengths; fixed-length and
/// variable-length (host and device offsets), on both kernel paths.
#[test]
fn block_sparse_calls_match_the_reference() {
    let Some(gpu) = gpu_or_skip("block_sparse_calls_match_the_reference") else { return };
    let (mut rng, _) = case_rng();
    let paths = if gpu.arch() == flashrs::Arch::Sm90a { vec![KernelPath::MmaSync, KernelPath::Auto] } else { vec![KernelPath::MmaSync] };
    let shapes = [(2, 700, 700, 4, 2, 64), (1, 300, 1037, 2, 1, 128), (2, 1037, 300, 2, 2, 256), (1, 129, 129, 3, 3, 80)];
    let mut cases = vec![];
    for (i, &(b, sq, sk, hq, hkv, d)) in shapes.iter().enumerate() {
        let sinks: Vec<f32> = (0..hq).map(|_| rng.random_range(-2.0..2.0)).collect();
        let sets = [
            (HostMods { blocks: Some(random_blocks(b, hq, sq, sk, 0.5, &mut rng)), ..HostMods::default() }, false),
            (HostMods { blocks: Some(random_blocks(1, 1, sq, sk, 0.3, &mut rng)), ..HostMods::default() }, true),
            (HostMods { blocks: Some(flashrs::HostBlockMask::causal(sq, sk).unwrap()), ..HostMods::default() }, true),
            (
                HostMods {
                    window: (Some(400), Some(100)),
                    softcap: Some(20.0),
                    alibi: Some((bloom_slopes(hq), false)),
                    sinks: Some(sinks),
                    blocks: Some(random_blocks(b, 1, sq, sk, 0.4, &mut rng)),
                    bias: None,
                },
                false,
            ),
        ];
        for (j, (mods, causal)) in sets.into_iter().enumerate() {
            for &path in &paths {
                let dtype = if (i + j) % 2 == 0 { DType::Bf16 } else { DType::F16 };
                cases.push((params(b, sq, sk, hq, d).heads_kv(hkv).causal(causal).path(path).build().unwrap(), dtype, mods.clone()));
            }
        }
    }
    check_mods_many(&gpu, &cases);

    let lens = [(300, 300), (0, 5), (1, 900), (517, 200), (64, 0), (1037, 1037)];
    let (hq, max_q, max_k) = (4, 1037, 1037);
    let mut cases = vec![];
    for &path in &paths {
        for (i, d) in [64, 128, 256].into_iter().enumerate() {
            let dtype = if i % 2 == 0 { DType::Bf16 } else { DType::F16 };
            let mut c = VarlenCase::new(&lens, hq, 2, d, i == 1, dtype);
            c.path = path;
            c.device_offsets = i == 2;
            let heads = if i == 0 { hq } else { 1 };
            c.mods = HostMods { blocks: Some(random_blocks(lens.len(), heads, max_q, max_k, 0.5, &mut rng)), softcap: (i == 2).then_some(10.0), ..HostMods::default() };
            cases.push(c);
        }
    }
    check_varlen_many(&gpu, &cases);
}

/// `Mods` set whole equals the same modifications set one by one through the builder (arrays
/// compare by the memory they name).
#[test]
fn mods_set_whole_equal_mods_set_one_by_one() {
    let slopes = planning_array(SLOPES, 8);
    let one_by_one = params(1, 8, 8, 8, 64).window(Some(3), None).softcap(2.0).alibi(slopes, false).build().unwrap();
    let mut whole = Mods::default();
    whole.window = Window { left: Some(3), right: None };
    whole.softcap = Some(2.0);
    whole.alibi = Some(flashrs::Alibi { slopes, per_batch: false });
    assert_eq!(params(1, 8, 8, 8, 64).mods(whole).build().unwrap(), one_by_one);
    assert!(one_by_one.mods.sinks.is_none() && !one_by_one.mods.is_plain());
}
