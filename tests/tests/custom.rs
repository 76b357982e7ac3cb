//! The caller's own kernels ([`flashrs::custom`]): calls with user data planned and refused
//! without a GPU; on a GPU, the `relative_bias` example's device crate (built by `cargo xtask
//! build-ptx --crate host/examples/relative_bias_kernels`) against the CPU reference with the
//! same bias, alone and with every built-in modification, on both kernel paths, forward and
//! backward; and the typed errors of launches its module cannot serve, with the output
//! untouched.
use cust::memory::{CopyDestination, DeviceBuffer};
use cust::stream::{Stream, StreamFlags};
use flashrs::{Arch, AttentionParams, BufferRef, DType, DeviceArray, Error, Flavor, GradBuffers, Kernel, KernelPath};
use flashrs_tests::attn::check_mods_many_on;
use flashrs_tests::grad::{GradCase, check_grads_on};
use flashrs_tests::fake::{self, O};
use flashrs_tests::mods::{HostMods, random_bias, relative_bias_kernels};
use flashrs_tests::{H100, buffer_of, case_rng, gpu_or_skip, params};
use rand::Rng;

/// Where a planning call's user data lies, past [`fake`]'s tensors.
const USER: u64 = 8 << 40;

fn planning_array(ptr: u64, len: usize) -> DeviceArray<'static, f32> {
    // SAFETY: only planned, never launched.
    unsafe { DeviceArray::from_raw(ptr, len) }
}

#[test]
fn user_data_plans_a_modification_kernel_and_is_checked() {
    let with = |ptr, len| params(2, 300, 300, 4, 128).user_data(planning_array(ptr, len)).build().unwrap();
    let p = with(USER, 100);
    for (path, hopper) in [(KernelPath::Auto, true), (KernelPath::MmaSync, false)] {
        let plan = p.to_builder().path(path).build().unwrap().plan(&fake::buffers(), &H100).unwrap();
        assert_eq!((plan.kernel.flavor(), plan.kernel.needs_sm90a(), plan.params.mods.user), (Flavor::Mods, hopper, USER), "{path:?}");
    }
    // Everything else a modification call is stays as it is.
    let mut without = p.clone();
    without.mods.user = None;
    let windowed = |p: &AttentionParams| p.to_builder().window(Some(8), None).build().unwrap().plan(&fake::buffers(), &H100).unwrap();
    let (a, b) = (windowed(&p), windowed(&without));
    assert_eq!((a.kernel, a.grid, a.params.mods.window_left), (b.kernel, b.grid, b.params.mods.window_left));

    let refused = |p: &AttentionParams| p.plan(&fake::buffers(), &H100).unwrap_err();
    assert!(matches!(refused(&with(0, 100)), Error::InvalidBuffer { tensor: "user_data", .. }));
    assert!(matches!(refused(&with(USER + 2, 100)), Error::Misaligned { tensor: "user_data", .. }));
    assert!(matches!(refused(&with(USER, 0)), Error::BufferTooSmall { tensor: "user_data", .. }));
    // Anywhere in the whole array: the caller's kernels may read all of it.
    match refused(&with(O - 4 * 99, 100)) {
        Error::InvalidBuffer { tensor: "out", reason } => assert!(reason.contains("user_data"), "{reason}"),
        e => panic!("{e:?}"),
    }
    // The backward takes a modification main kernel for it (the caller's stands in for it).
    let grads = GradBuffers::new(BufferRef::new(9 << 40, 1 << 20), BufferRef::new(10 << 40, 1 << 20), BufferRef::new(11 << 40, 1 << 20), BufferRef::new(12 << 40, 1 << 20));
    for target in [&H100, &flashrs::Target::A100] {
        let plan = p.plan_backward(&fake::buffers(), &grads, target).unwrap();
        assert!(matches!(plan.kernels[1], Kernel::Bwd { step: flashrs::BwdStep::Main { flavor: Flavor::Mods, .. }, .. }) && plan.kernels[1].replaceable());
        assert_eq!(plan.params.fwd.mods.user, USER);
    }
}

#[test]
fn relative_bias_kernels_match_the_reference() {
    let Some(gpu) = gpu_or_skip("relative_bias_kernels_match_the_reference") else { return };
    let kernels = relative_bias_kernels(&gpu);
    assert_eq!(kernels.has_hopper(), gpu.arch() == Arch::Sm90a);
    let (mut rng, _) = case_rng();
    let mut cases = vec![];
    // The module's entries: head_dim 64 (bf16 on Hopper, both types on mma.sync) and 128.
    for (d, dtypes) in [(64, [DType::Bf16].as_slice()), (128, &[DType::F16, DType::Bf16])] {
        for &dtype in dtypes {
            for path in [KernelPath::Auto, KernelPath::MmaSync] {
                for (b, sq, sk, hq, hkv, causal) in [(2, 300, 300, 4, 4, true), (1, 257, 700, 8, 2, false), (2, 1000, 1000, 8, 1, true)] {
                    let bias = random_bias(hq, 48, sq.max(sk), &mut rng);
                    let alone = HostMods { bias: Some(bias.clone()), ..HostMods::default() };
                    let sinks = (0..hq).map(|_| rng.random_range(-1.0f32..1.0)).collect();
                    let slopes = (0..hq).map(|h| 0.5f32.powi(h as i32 + 1)).collect();
                    let all = HostMods { window: (Some(200), Some(40)), softcap: Some(20.0), alibi: Some((slopes, false)), sinks: Some(sinks), blocks: None, bias: Some(bias) };
                    let p = params(b, sq, sk, hq, d).heads_kv(hkv).causal(causal).path(path).build().unwrap();
                    cases.push((p.clone(), dtype, alone));
                    cases.push((p.to_builder().causal(false).build().unwrap(), dtype, all));
                }
            }
        }
    }
    check_mods_many_on(&gpu, Some(&kernels), &cases);
}

#[test]
fn relative_bias_backward_matches_the_reference() {
    let Some(gpu) = gpu_or_skip("relative_bias_backward_matches_the_reference") else { return };
    let kernels = relative_bias_kernels(&gpu);
    let (mut rng, _) = case_rng();
    let mut cases = vec![];
    // The module's main kernels: head_dim 64 (bf16) and 128 (f16, bf16).
    for (d, dtypes) in [(64, [DType::Bf16].as_slice()), (128, &[DType::F16, DType::Bf16])] {
        for &dtype in dtypes {
            for (b, sq, sk, hq, hkv, causal) in [(2, 300, 300, 4, 4, true), (1, 257, 700, 8, 2, false), (2, 513, 513, 4, 1, true)] {
                let bias = random_bias(hq, 48, sq.max(sk), &mut rng);
                let alone = GradCase { bias: Some(bias.clone()), ..GradCase::batched(b, sq, sk, hq, hkv, d, causal, dtype) };
                let all = GradCase { window: (Some(200), Some(40)), softcap: Some(20.0), alibi: true, causal: false, ..alone.clone() };
                cases.extend([alone, all]);
            }
        }
    }
    check_grads_on(&gpu, Some(&kernels), &cases);
}

#[test]
fn custom_launches_the_module_cannot_serve_are_typed_errors() {
    let Some(gpu) = gpu_or_skip("custom_launches_the_module_cannot_serve_are_typed_errors") else { return };
    let kernels = relative_bias_kernels(&gpu);
    let (mut rng, _) = case_rng();
    let bias = random_bias(4, 16, 200, &mut rng);
    let data = DeviceBuffer::from_slice(&bias.data()).unwrap();
    let call = |d: usize| params(1, 200, 200, 4, d).user_data(DeviceArray::new(&data)).build().unwrap();
    let n = 200 * 4 * 256;
    let x = DeviceBuffer::from_slice(&vec![half::bf16::ONE; n]).unwrap();
    let pattern = half::bf16::from_bits(0x7e5a);
    let mut out = DeviceBuffer::from_slice(&vec![pattern; n]).unwrap();
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();

    // The shipped kernels never read user data, forward or backward.
    let e = gpu.attention_forward(&stream, &call(128), &x, &x, &x, &mut out, None).unwrap_err();
    assert!(matches!(e, Error::InvalidShape { what: "user_data", .. }), "{e:?}");
    let lse = DeviceBuffer::from_slice(&vec![0.0f32; 4 * 200]).unwrap();
    let grad = || DeviceBuffer::from_slice(&vec![pattern; 200 * 4 * 128]).unwrap();
    let (mut dq, mut dk, mut dv) = (grad(), grad(), grad());
    let o = DeviceBuffer::from_slice(&vec![half::bf16::ONE; n]).unwrap();
    let e = gpu.attention_backward(&stream, &call(128), &x, &x, &x, &o, &lse, &x, &mut dq, &mut dk, &mut dv).unwrap_err();
    assert!(matches!(e, Error::InvalidShape { what: "user_data", .. }), "{e:?}");
    // Head dimension 256 has no entry in the module: the error names the planned kernel.
    let p = call(256);
    let e = unsafe { gpu.attention_forward_custom(&kernels, &stream, &p, &x, &x, &x, &mut out, None) }.unwrap_err();
    // (Planned as the custom entry plans it: on mma.sync where the module has no Hopper entry.)
    let as_planned = if kernels.has_hopper() { p.clone() } else { p.to_builder().path(KernelPath::MmaSync).build().unwrap() };
    let planned = gpu.plan_forward(&as_planned, &flashrs::Buffers::new(DType::Bf16, buffer_of(&x), buffer_of(&x), buffer_of(&x), buffer_of(&out))).unwrap().kernel;
    assert!(kernels.entry(planned).is_none());
    match e {
        Error::CustomKernels(m) => assert!(m.contains(&planned.to_string()), "{m}"),
        e => panic!("{e:?}"),
    }
    stream.synchronize().unwrap();
    let mut host = vec![half::bf16::ZERO; n];
    out.copy_to(&mut host[..]).unwrap();
    assert!(host.iter().all(|v| v.to_bits() == pattern.to_bits()), "a refused launch wrote the output");
    for g in [&dq, &dk, &dv] {
        let mut h = vec![half::bf16::ZERO; g.len()];
        g.copy_to(&mut h[..]).unwrap();
        assert!(h.iter().all(|v| v.to_bits() == pattern.to_bits()), "a refused backward wrote a gradient");
    }

    // The raw path (plan, then launch on the module) computes what the typed one does.
    let p = call(128).to_builder().path(KernelPath::MmaSync).build().unwrap();
    let q = DeviceBuffer::from_slice(&flashrs_tests::attn::random_tensor::<half::bf16>(&mut rng, n)).unwrap();
    let bufs = flashrs::Buffers::new(DType::Bf16, buffer_of(&q), buffer_of(&q), buffer_of(&q), buffer_of(&out));
    let plan = gpu.plan_forward(&p, &bufs).unwrap();
    assert!(matches!(plan.kernel, Kernel::Mma { flavor: Flavor::Mods, .. }) && kernels.entry(plan.kernel).is_some());
    unsafe { gpu.launch_custom(stream.as_inner() as *mut std::ffi::c_void, &plan, &kernels) }.unwrap();
    stream.synchronize().unwrap();
    let mut raw = vec![half::bf16::ZERO; n];
    out.copy_to(&mut raw[..]).unwrap();
    let mut typed_out = DeviceBuffer::from_slice(&vec![pattern; n]).unwrap();
    unsafe { gpu.attention_forward_custom(&kernels, &stream, &p, &q, &q, &q, &mut typed_out, None) }.unwrap();
    stream.synchronize().unwrap();
    let mut typed = vec![half::bf16::ZERO; n];
    typed_out.copy_to(&mut typed[..]).unwrap();
    assert!(raw.iter().zip(&typed).all(|(a, b)| a.to_bits() == b.to_bits()) && raw[..200 * 4 * 128].iter().all(|v| v.to_f32().is_finite()));
}
