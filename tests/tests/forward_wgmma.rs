//! The Hopper (wgmma + TMA) forward kernels, forced with `KernelPath::Wgmma`, against the CPU
//! f64 reference: the checks of `forward.rs` (dtype x head_dim x causal x GQA x ragged lengths
//! x layouts) plus pipeline wrap-around and decode shapes. Each sweep prints one line per case
//! (`ok`/`FAIL`, errors, seed) and fails at the end listing every bad case.
//!
//! Skips (saying so) where no GPU is present or the GPU is not sm_90a. Run on an H100 with
//! `cargo test --release -p flashrs-tests --test forward_wgmma -- --test-threads=1 --nocapture`;
//! `a0_smoke_one_tile` runs first in that order and is the one to read first if all fail;
//! `a1_probe_wgmma_n_major_b` checks the `P V` building block (transposed-B wgmma) alone.
//! The other tests run the default configuration per head dimension (for head_dim 64 the one
//! with three consumer warpgroups); `non_default_configs` runs every other one: the
//! serial-schedule twins (if they pass where the pipelined kernels fail, the fault is in the
//! pipelined schedule: ping-pong barriers, overlapped waits, not the TMA/wgmma layouts), the
//! head_dim-64 kernel with two consumer warpgroups, and the persistent launches.
use flashrs::sm90::{CONFIGS, default_config};
use flashrs::{AttentionParams, AttentionParamsBuilder, BufferRef, Buffers, DType, DimOrder, Error, Flavor, Kernel, KernelChoice, KernelPath, Strides, Target};
use flashrs_tests::attn::{LaunchResult, check, check_many, check_many_with};
use flashrs_tests::{gpu_or_skip, hopper_or_skip, params, probe_module};
use cust::memory::{CopyDestination, DeviceBuffer};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const DTYPES: [DType; 2] = [DType::F16, DType::Bf16];

fn wgmma(p: AttentionParamsBuilder<'static>) -> AttentionParams<'static> {
    p.path(KernelPath::Wgmma).build().unwrap()
}

/// The `P V` building block alone (`probes/wgmma_tb.rs`): wgmma with A from registers (or, as
/// the head-dim-256 backward's `P^T dO`, from shared memory) and an N-major B (V's layout) in
/// 128B-swizzled 64-column slabs, for each N the kernels use. If the attention tests fail and
/// this passes, the transposed-B descriptor is not the culprit.
#[test]
fn a1_probe_wgmma_n_major_b() {
    let Some(gpu) = hopper_or_skip("a1_probe_wgmma_n_major_b") else { return };
    let stream = cust::stream::Stream::new(cust::stream::StreamFlags::NON_BLOCKING, None).unwrap();
    let mut rng = StdRng::seed_from_u64(0x7b5);
    let k = 64;
    let module = probe_module(&gpu);
    for n in [64usize, 128, 256] {
        let func = module.get_function(&format!("probe_wgmma_tb_m64n{n}k16")).unwrap();
        for mode in 0..4u32 {
            let enc = |v: f32| flashrs_tests::encode_16(mode % 2, v);
            let mut value = || -> f32 { rng.random_range(0.25f32..1.0) * if rng.random::<bool>() { 1.0 } else { -1.0 } };
            let (a_bits, a): (Vec<u16>, Vec<f64>) = (0..64 * k).map(|_| enc(value())).unzip();
            let (b_bits, b): (Vec<u16>, Vec<f64>) = (0..k * n).map(|_| enc(value())).unzip();
            let a_d = DeviceBuffer::from_slice(&a_bits).unwrap();
            let b_d = DeviceBuffer::from_slice(&b_bits).unwrap();
            let d_d = DeviceBuffer::from_slice(&vec![f32::NAN; 64 * n]).unwrap();
            unsafe {
                cust::launch!(func<<<1, 128, (1024 + n * 128 + 8192) as u32, stream>>>(
                    a_d.as_device_ptr(), b_d.as_device_ptr(), d_d.as_device_ptr(), mode
                ))
                .unwrap();
            }
            stream.synchronize().unwrap();
            let mut d = vec![0f32; 64 * n];
            d_d.copy_to(&mut d).unwrap();
            let mut bad = Vec::new();
            for i in 0..64 {
                for j in 0..n {
                    let (mut want, mut mag) = (0.0, 0.0);
                    for kk in 0..k {
                        let prod = a[i * k + kk] * b[kk * n + j];
                        want += prod;
                        mag += prod.abs();
                    }
                    let got = d[i * n + j] as f64;
                    if !((got - want).abs() <= 1e-3 * mag + 1e-6) {
                        bad.push(format!("({i}, {j}): got {got} want {want:.6}"));
                    }
                }
            }
            assert!(
                bad.is_empty(),
                "wgmma m64n{n}k16 N-major B ({}, A from {}): {} of {} elements off:\n  {}",
                if mode % 2 == 1 { "bf16" } else { "f16" },
                if mode >= 2 { "shared memory" } else { "registers" },
                bad.len(),
                64 * n,
                bad[..bad.len().min(8)].join("\n  ")
            );
        }
    }
}

/// The smallest cases: one key tile, one query block; then one of each head dimension.
#[test]
fn a0_smoke_one_tile() {
    let Some(gpu) = hopper_or_skip("a0_smoke_one_tile") else { return };
    check(&gpu, &wgmma(params(1, 64, 64, 1, 64)), DType::F16);
    check(&gpu, &wgmma(params(1, 128, 128, 1, 128)), DType::F16);
    check(&gpu, &wgmma(params(1, 128, 64, 1, 256)), DType::F16);
}

#[test]
fn every_head_dim_dtype_causal_and_gqa() {
    let Some(gpu) = hopper_or_skip("every_head_dim_dtype_causal_and_gqa") else { return };
    let mut cases = Vec::new();
    for dtype in DTYPES {
        for d in [64, 128, 256] {
            for causal in [false, true] {
                for (sq, sk) in [(127, 300), (300, 127)] {
                    cases.push((wgmma(params(2, sq, sk, 4, d).heads_kv(2).causal(causal)), dtype));
                }
            }
        }
    }
    check_many(&gpu, &cases);
}

/// Partial query and key tiles, for 128-row blocks (head_dim 128) and 192-row ones (head_dim
/// 64: three consumer warpgroups, the last ones' rows often all past `seqlen_q`).
#[test]
fn ragged_lengths() {
    let Some(gpu) = hopper_or_skip("ragged_lengths") else { return };
    let lens = [(1, 1), (17, 17), (1, 1037), (1037, 1), (127, 1037), (1037, 127), (1037, 1037), (17, 128), (128, 17)];
    let mut cases = Vec::new();
    for dtype in DTYPES {
        for d in [64, 128] {
            for (sq, sk) in lens {
                for causal in [false, true] {
                    cases.push((wgmma(params(1, sq, sk, 2, d).causal(causal)), dtype));
                }
            }
        }
    }
    check_many(&gpu, &cases);
}

/// Head dimensions that are not 64, 128 or 256 run the next kernel up; TMA zero-fills the
/// missing columns and the epilogue skips them.
#[test]
fn head_dims_that_are_padded() {
    let Some(gpu) = hopper_or_skip("head_dims_that_are_padded") else { return };
    let mut cases = Vec::new();
    for d in [8, 40, 72, 96, 160, 200, 248] {
        for causal in [false, true] {
            cases.push((wgmma(params(1, 150, 190, 3, d).causal(causal)), DType::F16));
        }
    }
    check_many(&gpu, &cases);
}

#[test]
fn gqa_and_mqa_ratios() {
    let Some(gpu) = hopper_or_skip("gqa_and_mqa_ratios") else { return };
    let cases: Vec<_> = [1, 2, 4, 8]
        .into_iter()
        .map(|heads_kv| (wgmma(params(2, 200, 333, 8, 64).heads_kv(heads_kv).causal(true)), DType::F16))
        .collect();
    check_many(&gpu, &cases);
}

#[test]
fn strided_layouts() {
    let Some(gpu) = hopper_or_skip("strided_layouts") else { return };
    let (b, s, h, d) = (2, 130, 4, 64);
    // Q, K, V as views into one packed [b, s, 3, h, d] tensor; output with padded rows.
    let packed = Strides { batch: (s * 3 * h * d) as i64, row: (3 * h * d) as i64, head: d as i64 };
    let out = Strides { batch: (s * (h * d + 64)) as i64, row: (h * d + 64) as i64, head: d as i64 };
    check_many(
        &gpu,
        &[
            (wgmma(params(b, s, s, h, d).dim_order(DimOrder::Bhsd)), DType::F16),
            (wgmma(params(b, s, s, h, d).dim_order(DimOrder::Bhsd).causal(true)), DType::Bf16),
            (wgmma(params(b, s, s, h, d).q_strides(packed).k_strides(packed).v_strides(packed).o_strides(out)), DType::F16),
            (wgmma(params(b, 300, 500, h, 128).dim_order(DimOrder::Bhsd).causal(true)), DType::F16),
        ],
    );
}

#[test]
fn no_keys_gives_zero_output_and_minus_inf_lse() {
    let Some(gpu) = hopper_or_skip("no_keys_gives_zero_output_and_minus_inf_lse") else { return };
    check_many(
        &gpu,
        &[
            (wgmma(params(1, 64, 0, 2, 64)), DType::F16),
            // Causal with seqlen_q > seqlen_k: the first rows (whole CTAs) see no key.
            (wgmma(params(2, 300, 40, 2, 128).causal(true)), DType::F16),
            (wgmma(params(1, 700, 3, 2, 256).causal(true)), DType::F16),
        ],
    );
}

/// Many key tiles per CTA, so every stage of the ring is refilled several times (barrier
/// phases flip), for each head dimension's stage count; and decode-like shapes (few query
/// rows, many keys).
#[test]
fn long_sequences_and_decode() {
    let Some(gpu) = hopper_or_skip("long_sequences_and_decode") else { return };
    let mut cases = Vec::new();
    for dtype in DTYPES {
        for d in [64, 128, 256] {
            for causal in [false, true] {
                cases.push((wgmma(params(1, 1500, 2100, 2, d).causal(causal)), dtype));
            }
            cases.push((wgmma(params(3, 1, 4000, 8, d).heads_kv(1)), dtype));
        }
    }
    check_many(&gpu, &cases);
}

/// The configurations besides the defaults, forced through [`KernelChoice::Wgmma`]: the
/// serial-schedule twins (each GEMM waited for at once, no ping-pong), head_dim 64 with two consumer
/// warpgroups (the default has three), and the persistent launches (one CTA per SM walking
/// several work tiles: ring and barrier phases carried across tiles, the next tile's K/V
/// loads overlapping the epilogue), on shapes that exercise masking, ragged tiles, ring
/// wrap-around, GQA, consumer warpgroups whose rows all lie past `seqlen_q`, and (persistent)
/// more tiles than SMs with some tiles seeing no key.
#[test]
fn non_default_configs() {
    let Some(gpu) = hopper_or_skip("non_default_configs") else { return };
    // Every non-default configuration one CTA per tile, and every pipelined one persistent.
    let runs = CONFIGS.iter().filter(|c| default_config(c.head_dim) != Some(**c)).map(|c| (*c, false));
    for (config, persistent) in runs.chain(CONFIGS.iter().filter(|c| c.pipelined).map(|c| (*c, true))) {
        let (d, dv) = (config.head_dim, config.head_dim_v);
        let choice = KernelChoice::Wgmma { config: Some(config), persistent: Some(persistent) };
        let mut cases = Vec::new();
        for dtype in DTYPES {
            for causal in [false, true] {
                for (sq, sk) in [(1, 1), (127, 300), (300, 127), (1037, 1500)] {
                    cases.push((params(1, sq, sk, 2, d).head_dim_v(dv).causal(causal).kernel(choice).build().unwrap(), dtype));
                }
                // 4 * 16 * 8 = 512 work tiles (384 of 192 rows): several per CTA when persistent.
                cases.push((params(4, 1000, 700, 16, d).head_dim_v(dv).heads_kv(4).causal(causal).kernel(choice).build().unwrap(), dtype));
            }
        }
        let name = Kernel::Sm90 { dtype: DType::F16, inputs: None, varlen: false, paged: false, config, flavor: Flavor::Plain };
        println!("{name} (head_dim {d}/{dv}, pipelined {}, persistent {persistent}):", config.pipelined);
        check_many(&gpu, &cases);
    }
}

/// Auto takes the Hopper kernels on sm_90a; a forced Wgmma elsewhere is `PathUnavailable`.
#[test]
fn path_selection() {
    let Some(gpu) = gpu_or_skip("path_selection") else { return };
    let p = params(1, 256, 256, 2, 128).build().unwrap();
    let b = |i: u64| BufferRef { ptr: (1 + i) << 32, len: 1 << 24 };
    let bufs = Buffers::new(DType::F16, b(0), b(1), b(2), b(3));
    let auto = gpu.plan_forward(&p, &bufs).unwrap();
    let forced = wgmma(p.to_builder()).plan(&bufs, &Target::H100).unwrap();
    assert!(matches!(forced.kernel, Kernel::Sm90 { varlen: false, paged: false, config, .. } if config.head_dim == 128), "{}", forced.kernel);
    if gpu.arch() == flashrs::Arch::Sm90a {
        assert_eq!(auto.kernel, forced.kernel);
        // And it computes the right thing through Auto too.
        check(&gpu, &p.to_builder().causal(true).build().unwrap(), DType::F16);
    } else {
        assert!(matches!(auto.kernel, Kernel::Mma { .. }), "{}", auto.kernel);
        let r = wgmma(p.to_builder()).plan(&bufs, &gpu.target());
        assert!(matches!(r, Err(Error::PathUnavailable { path: "wgmma", .. })), "{r:?}");
        // An H100's plan launched here.
        let stream = cust::stream::Stream::new(cust::stream::StreamFlags::NON_BLOCKING, None).unwrap();
        let r = unsafe { gpu.launch(stream.as_inner() as *mut std::ffi::c_void, &forced) };
        assert!(matches!(r, Err(Error::PathUnavailable { path: "wgmma", .. })), "{r:?}");
    }
}

/// Persistent launches (CTAs claiming work tiles from a counter pair in the stream's kept
/// workspace) back to back on one stream, between split-KV decode calls that share that
/// workspace: every kernel must leave its counters at zero, or the next launch's CTAs would
/// claim past the last tile at once and leave work tiles unwritten (NaN poison).
#[test]
fn persistent_launches_reuse_the_stream_workspace() {
    let Some(gpu) = hopper_or_skip("persistent_launches_reuse_the_stream_workspace") else { return };
    let stream = cust::stream::Stream::new(cust::stream::StreamFlags::NON_BLOCKING, None).unwrap();
    // 4 * 16 * 6 = 384 work tiles (and 2 * 16 * 16 = 512): more than one per SM.
    let causal = params(4, 1000, 700, 16, 64).heads_kv(4).causal(true).build().unwrap();
    let short = params(2, 2048, 2048, 16, 128).build().unwrap();
    let decode = params(1, 1, 8192, 32, 128).heads_kv(8).build().unwrap();
    let b = |i: u64| BufferRef { ptr: (1 + i) << 36, len: 1 << 30 };
    let bufs = |dtype| Buffers::new(dtype, b(0), b(1), b(2), b(3));
    for (p, dtype) in [(&causal, DType::F16), (&short, DType::Bf16)] {
        let plan = gpu.plan_forward(p, &bufs(dtype)).unwrap();
        assert!(plan.persistent && plan.tiles > gpu.sm_count() && plan.grid == gpu.sm_count(), "{dtype:?} {p:?} must run persistent");
    }
    assert!(gpu.plan_forward(&decode, &bufs(DType::F16)).unwrap().split.is_some());
    let cases = [(causal.clone(), DType::F16), (decode.clone(), DType::F16), (short, DType::Bf16), (causal, DType::F16), (decode, DType::Bf16)];
    let launch = |p: &AttentionParams, _: &cust::stream::Stream, bufs: &Buffers| -> LaunchResult {
        for _ in 0..3 {
            // SAFETY: the case's live buffers, on a stream of this context.
            unsafe { gpu.attention_forward_raw(stream.as_inner() as *mut std::ffi::c_void, p, bufs)? };
        }
        Ok(stream.synchronize()?)
    };
    check_many_with(&gpu, &cases, Some(&launch));
}
