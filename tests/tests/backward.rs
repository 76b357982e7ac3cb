//! The backward pass against the CPU f64 reference's analytic gradients: element types x head
//! dims x causal x GQA x ragged lengths (1, 17, 127, 1037, seqlen_q != seqlen_k) x batched or
//! variable-length rows; determinism; bad input.
use cust::memory::DeviceBuffer;
use cust::stream::{Stream, StreamFlags};
use flashrs::{Arch, AttentionParams, BufferRef, Buffers, DType, Error, Gpu, GradBuffers, KernelChoice};
use flashrs_tests::grad::{GradCase, Rows, assert_bit_identical, check_grads, grad_tolerance, run_grad};
use flashrs_tests::mods::random_blocks;
use flashrs_tests::{buffer_of, gpu_or_skip};
use rand::SeedableRng;
use rand::rngs::StdRng;

#[test]
fn gradients_match_the_reference() {
    let Some(gpu) = gpu_or_skip("gradients_match_the_reference") else { return };
    let mut cases = vec![];
    for kernel in families(&gpu) {
        for dtype in [DType::Bf16, DType::F16] {
            for d in [64, 128, 256, 40, 96, 200] {
                for causal in [false, true] {
                    for (sq, sk) in [(128, 128), (17, 127), (127, 17), (1, 1037), (257, 200)] {
                        for (hq, hkv) in [(2, 2), (4, 1)] {
                            let mut c = GradCase::batched(2, sq, sk, hq, hkv, d, causal, dtype);
                            c.kernel = kernel;
                            cases.push(c);
                        }
                    }
                }
            }
        }
    }
    check_grads(&gpu, &cases);
}

/// The backward kernel families this GPU runs: `mma.sync` forced, and on sm_90a the automatic
/// choice too (the Hopper kernel where it takes the call).
fn families(gpu: &Gpu) -> Vec<KernelChoice> {
    let mut f = vec![KernelChoice::MmaSync { config: None }];
    if gpu.arch() == Arch::Sm90a {
        f.push(KernelChoice::Auto);
    }
    f
}

#[test]
fn long_and_strided_rows() {
    let Some(gpu) = gpu_or_skip("long_and_strided_rows") else { return };
    let mut cases = vec![];
    for kernel in families(&gpu) {
        for (d, causal) in [(64, true), (128, false), (128, true), (256, true)] {
            let mut c = GradCase::batched(1, 1037, 1037, 4, 2, d, causal, DType::Bf16);
            c.kernel = kernel;
            cases.push(c);
            let mut c = GradCase::batched(2, 300, 500, 6, 3, d, causal, DType::F16);
            c.rows = Rows::Batched { bhsd: true };
            c.kernel = kernel;
            cases.push(c);
        }
    }
    check_grads(&gpu, &cases);
}

#[test]
fn rows_far_below_zero() {
    let Some(gpu) = gpu_or_skip("rows_far_below_zero") else { return };
    // Every score about -120 or lower after scaling, so each row's log-sum-exp is far below
    // zero and exp(-lse) overflows f32: the keys a tile holds past seqlen_k (300, off every key
    // block) must score -inf rather than exp(0 - lse), or dQ turns NaN.
    //
    // The offsets also spread each row's scores (standard deviation about 5.7), so most rows
    // are nearly one-hot: there dS = P (dP - dot(dO, O)) nearly cancels, while the rounding of
    // O to bf16 that dot(dO, O) reads does not shrink with it. dK's error relative to its
    // (small) largest magnitude reached 1.56e-2 and 1.68e-2 on one seed each (most seeds
    // 3e-3 to 7e-3), on either family; the bar here is twice the usual one, which a NaN or a
    // wrongly masked key still fails by orders of magnitude.
    for kernel in families(&gpu) {
        for (d, causal) in [(64, false), (128, true), (256, false)] {
            let mut c = GradCase::batched(2, 200, 300, 4, 2, d, causal, DType::Bf16);
            c.qk_offset = 4.0;
            c.kernel = kernel;
            let (e, _) = run_grad::<half::bf16>(&gpu, &c);
            let bar = 2.0 * grad_tolerance(c.dtype);
            println!("{}: {e:?} (bar {bar:.1e})", c.label());
            assert!(e.rel.iter().all(|&x| x <= bar), "{}: {e:?} above {bar:.1e}", c.label());
        }
    }
}

#[test]
fn variable_length_batches() {
    let Some(gpu) = gpu_or_skip("variable_length_batches") else { return };
    let mut cases = vec![];
    // Key counts off the 128-key blocks and sequences after them (a key tile reaches into the
    // next sequence's rows), query counts off the 64-row blocks, empty sequences; and many short
    // sequences.
    let ragged = vec![(17, 1037), (1, 1), (300, 129), (0, 40), (64, 0), (127, 127)];
    let short: Vec<(usize, usize)> = (0..13).map(|i| (1 + 37 * i % 90, 1 + 53 * i % 150)).collect();
    for kernel in families(&gpu) {
        for (d, device) in [(64, false), (128, true), (256, false), (96, true)] {
            for causal in [false, true] {
                for (dtype, lens) in [(DType::Bf16, &ragged), (DType::F16, &ragged), (DType::Bf16, &short)] {
                    let mut c = GradCase::batched(1, 1, 1, 4, 2, d, causal, dtype);
                    c.lens = lens.clone();
                    c.rows = Rows::Varlen { device };
                    c.kernel = kernel;
                    cases.push(c);
                }
            }
        }
    }
    check_grads(&gpu, &cases);
}

/// Sinks (gpt-oss): the main kernels take them through the forward's log-sum-exp, which counts
/// them; their own gradient comes from the dQ kernel, summed over every sequence of the call.
#[test]
fn sinks_and_their_gradient() {
    let Some(gpu) = gpu_or_skip("sinks_and_their_gradient") else { return };
    let mut cases = vec![];
    for kernel in families(&gpu) {
        for (d, causal, dtype) in [(64, true, DType::Bf16), (128, false, DType::F16), (128, true, DType::Bf16), (256, true, DType::Bf16), (96, false, DType::Bf16)] {
            // seqlen_q > seqlen_k under causal masking: rows that see no key but the sink.
            for (sq, sk, hq, hkv) in [(300, 500, 4, 2), (257, 129, 6, 2), (1, 1037, 2, 2)] {
                let mut c = GradCase::batched(2, sq, sk, hq, hkv, d, causal, dtype);
                (c.sinks, c.kernel) = (true, kernel);
                cases.push(c);
            }
            let mut c = GradCase::batched(1, 1, 1, 4, 2, d, causal, dtype);
            (c.lens, c.rows, c.sinks, c.kernel) = (vec![(17, 1037), (1, 1), (300, 129), (0, 40), (64, 0)], Rows::Varlen { device: d == 128 }, true, kernel);
            cases.push(c);
        }
    }
    check_grads(&gpu, &cases);
    // The sinks' gradient is one fixed-order sum: the same bits every run, deterministic mode
    // or not.
    for kernel in families(&gpu) {
        let mut c = GradCase::batched(2, 700, 900, 8, 2, 128, true, DType::Bf16);
        (c.sinks, c.deterministic, c.kernel) = (true, true, kernel);
        assert_bit_identical(&gpu, &c, 20);
    }
}

/// Sliding windows, softcap and ALiBi (the `flash_bwd_[sm90_]mods_*` kernels, both families):
/// key blocks walk only the query blocks whose rows see them; with sinks too.
#[test]
fn windows_softcap_and_alibi() {
    let Some(gpu) = gpu_or_skip("windows_softcap_and_alibi") else { return };
    let mut cases = vec![];
    let windows = [(Some(4), Some(0)), (Some(64), Some(16)), (Some(0), Some(0)), (None, Some(0)), (Some(200), None), (None, None)];
    for (i, (d, dtype)) in [(64, DType::Bf16), (128, DType::F16), (256, DType::Bf16), (96, DType::Bf16)].into_iter().enumerate() {
        for (j, &window) in windows.iter().enumerate() {
            let causal = (i + j) % 2 == 0;
            // ALiBi on the unwindowed case, and on every other windowed one; softcaps of 2
            // (most scores bent, derivatives far from 1) and 30 (Gemma 2's scale) on the others.
            let alibi = window == (None, None) || j % 2 == 1;
            let softcap = [None, Some(2.0), Some(30.0)][(i + j) % 3];
            for (sq, sk, hq, hkv) in [(300, 500, 4, 2), (257, 129, 6, 2), (1, 1037, 2, 2)] {
                let mut c = GradCase::batched(2, sq, sk, hq, hkv, d, causal, dtype);
                (c.window, c.alibi, c.sinks, c.softcap) = (window, alibi, j == 1, softcap);
                cases.push(c);
            }
            let mut c = GradCase::batched(1, 1, 1, 4, 2, d, causal, dtype);
            (c.lens, c.rows, c.window, c.alibi, c.softcap) = (vec![(17, 1037), (1, 1), (300, 129), (0, 40), (64, 0)], Rows::Varlen { device: j % 2 == 0 }, window, alibi, softcap);
            cases.push(c);
        }
    }
    // Softcap alone, with sinks, and on both element types.
    for (d, dtype, causal) in [(64, DType::F16, true), (128, DType::Bf16, false), (256, DType::F16, false), (40, DType::Bf16, true)] {
        let mut c = GradCase::batched(2, 333, 333, 4, 1, d, causal, dtype);
        (c.softcap, c.sinks) = (Some(if causal { 1.0 } else { 10.0 }), d == 128);
        cases.push(c);
    }
    // Both families: the modification twins of mma.sync and, on sm_90a, of the Hopper kernel.
    let cases: Vec<GradCase> = cases.into_iter().flat_map(|c| families(&gpu).into_iter().map(move |kernel| GradCase { kernel, ..c.clone() })).collect();
    check_grads(&gpu, &cases);
    // Deterministic mode: a left window starts each query block's turns at its first key block
    // (on Hopper, each 64-row block's counter at the first key block of the step's rows).
    for kernel in families(&gpu) {
        for (d, window, softcap) in [(128, (Some(100), Some(0)), None), (128, (Some(300), Some(50)), Some(5.0)), (64, (Some(200), Some(10)), None), (256, (Some(150), None), None)] {
            let mut c = GradCase::batched(2, 700, 900, 8, 2, d, false, DType::Bf16);
            (c.window, c.alibi, c.deterministic, c.softcap, c.kernel) = (window, true, true, softcap, kernel);
            assert_bit_identical(&gpu, &c, 20);
        }
    }
}

/// Block masks (the block-sparse kernels of both families: Hopper where no window, softcap or
/// ALiBi comes with the mask): each key block walks the query steps whose blocks list it, per
/// head or shared, with the element masks and modifications inside; empty rows (no listed
/// block) get zero gradient; deterministic mode takes turns in list order.
#[test]
fn block_masks() {
    let Some(gpu) = gpu_or_skip("block_masks") else { return };
    let mut rng = StdRng::seed_from_u64(0xb10c);
    let mut cases = vec![];
    for (i, (d, dtype)) in [(64, DType::Bf16), (128, DType::F16), (256, DType::Bf16), (96, DType::Bf16)].into_iter().enumerate() {
        for (j, (sq, sk, hq, hkv)) in [(300, 500, 4, 2), (257, 129, 6, 2), (1, 1037, 2, 2), (640, 640, 2, 1)].into_iter().enumerate() {
            let causal = (i + j) % 2 == 0;
            // Per (batch entry, head), or one shared mask; about half the blocks.
            let (mb, mh) = if j % 2 == 0 { (2, hq) } else { (1, 1) };
            let mut c = GradCase::batched(2, sq, sk, hq, hkv, d, causal, dtype);
            c.blocks = Some(random_blocks(mb, mh, sq, sk, [0.5, 0.3, 0.9][(i + j) % 3], &mut rng));
            if (i + j) % 3 == 1 {
                (c.window, c.softcap, c.alibi) = ((Some(200), Some(30)), Some(20.0), true);
            }
            c.sinks = j == 3;
            // Both families where the Hopper kernel takes the call.
            cases.extend(families(&gpu).into_iter().map(|kernel| GradCase { kernel, ..c.clone() }));
        }
        // Variable-length rows, one mask per sequence.
        let mut c = GradCase::batched(1, 1, 1, 4, 2, d, i % 2 == 0, dtype);
        let lens = vec![(17, 1037), (1, 1), (300, 129), (0, 40), (64, 0), (400, 400)];
        c.blocks = Some(random_blocks(lens.len(), 4, 400, 1037, 0.5, &mut rng));
        (c.lens, c.rows) = (lens, Rows::Varlen { device: i % 2 == 1 });
        cases.extend(families(&gpu).into_iter().map(|kernel| GradCase { kernel, ..c.clone() }));
    }
    check_grads(&gpu, &cases);
    // Deterministic: shared and per-head masks, batched and variable-length, each head dim's
    // Hopper split and mma.sync.
    let det = [(false, 8, 128), (false, 1, 64), (true, 8, 256), (true, 8, 64)].into_iter().flat_map(|c| families(&gpu).into_iter().map(move |k| (c, k)));
    for ((varlen, heads, d), kernel) in det {
        let mut c = GradCase::batched(2, 700, 900, 8, 2, d, false, DType::Bf16);
        c.kernel = kernel;
        c.blocks = Some(random_blocks(2, heads, 700, 900, 0.5, &mut rng));
        if varlen {
            (c.lens, c.rows) = (vec![(300, 500), (700, 900)], Rows::Varlen { device: false });
        }
        c.deterministic = true;
        assert_bit_identical(&gpu, &c, 20);
    }
}

/// V with a head dimension of its own (DeepSeek's 192 / 128, a narrower and a wider V, sizes no
/// kernel has natively) on both families: the kernel of the wider, Q and K or V and dO
/// zero-filled past their own columns. Causal, GQA, ragged and variable-length rows, with sinks,
/// a window and softcap, a block mask, and deterministic mode.
#[test]
fn value_head_dims() {
    let Some(gpu) = gpu_or_skip("value_head_dims") else { return };
    let mut rng = StdRng::seed_from_u64(0xd1f);
    let shapes = [(2, 300, 300, 4, 2, 192, 128), (1, 127, 1037, 4, 1, 128, 64), (2, 1037, 127, 2, 2, 64, 128), (1, 17, 17, 3, 1, 40, 72), (1, 257, 257, 2, 2, 256, 64), (1, 200, 333, 2, 1, 128, 256)];
    let mut cases = vec![];
    for (i, &(b, sq, sk, hq, hkv, d, dv)) in shapes.iter().enumerate() {
        for causal in [false, true] {
            let dtype = if (i + causal as usize) % 2 == 0 { DType::Bf16 } else { DType::F16 };
            let c = GradCase { head_dim_v: Some(dv), ..GradCase::batched(b, sq, sk, hq, hkv, d, causal, dtype) };
            cases.extend(families(&gpu).into_iter().map(|kernel| GradCase { kernel, ..c.clone() }));
        }
    }
    let base = GradCase { head_dim_v: Some(128), ..GradCase::batched(2, 700, 700, 4, 2, 192, true, DType::Bf16) };
    let variants = [
        GradCase { sinks: true, ..base.clone() },
        GradCase { window: (Some(100), Some(20)), softcap: Some(20.0), causal: false, dtype: DType::F16, ..base.clone() },
        GradCase { blocks: Some(random_blocks(2, 4, 700, 700, 0.5, &mut rng)), causal: false, ..base.clone() },
        GradCase { lens: vec![(17, 1037), (1, 1), (300, 129), (0, 40), (64, 0)], rows: Rows::Varlen { device: true }, head_dim_v: Some(64), head_dim: 128, ..base.clone() },
        GradCase { lens: vec![(300, 500), (1, 129)], rows: Rows::Varlen { device: false }, head_dim_v: Some(256), head_dim: 64, dtype: DType::F16, ..base.clone() },
    ];
    for c in variants {
        cases.extend(families(&gpu).into_iter().map(|kernel| GradCase { kernel, ..c.clone() }));
    }
    check_grads(&gpu, &cases);
    for kernel in families(&gpu) {
        let c = GradCase { kernel, deterministic: true, ..base.clone() };
        assert_bit_identical(&gpu, &c, 20);
    }
}

#[test]
fn deterministic_mode_is_bit_identical() {
    let Some(gpu) = gpu_or_skip("deterministic_mode_is_bit_identical") else { return };
    // Every kernel family and Hopper split (head_dim 64: 128-row steps, each warpgroup counting
    // twice at its own 64-row block, the last step's second block past 700 rows; 128 and 256:
    // both warpgroups at each block).
    // Variable-length: the Hopper kernel's counters per block padded per sequence.
    let cases = families(&gpu).into_iter().flat_map(|k| [64, 128, 256].into_iter().flat_map(move |d| [(k, d, false, false), (k, d, true, false), (k, d, true, true)]));
    for (kernel, d, causal, varlen) in cases {
        let mut c = GradCase::batched(2, 700, 900, 8, 2, d, causal, DType::Bf16);
        if varlen {
            c.lens = vec![(300, 500), (1, 129), (450, 200), (0, 64)];
            c.rows = Rows::Varlen { device: false };
        }
        c.deterministic = true;
        c.kernel = kernel;
        assert_bit_identical(&gpu, &c, 100);
    }
}

/// Bad input is a typed error before anything runs, every buffer untouched.
#[test]
fn bad_input_is_a_typed_error() {
    let Some(gpu) = gpu_or_skip("bad_input_is_a_typed_error") else { return };
    let p = AttentionParams::builder().batch(2).seqlen(64).heads_q(4).heads_kv(2).head_dim(64).build().unwrap();
    let flashrs::TensorLens { q: nq, k: nkv, lse: nl, .. } = p.contiguous_lens().unwrap();
    let buf = |n: usize| DeviceBuffer::from_slice(&vec![half::bf16::from_f32(1.5); n]).unwrap();
    let (q, k, v, o, dout) = (buf(nq), buf(nkv), buf(nkv), buf(nq), buf(nq));
    let (mut dq, mut dk, mut dv) = (buf(nq), buf(nkv), buf(nkv));
    let lse = DeviceBuffer::from_slice(&vec![0.5f32; nl]).unwrap();
    let short_lse = DeviceBuffer::from_slice(&vec![0.5f32; nl - 1]).unwrap();
    let mut short_dk = buf(nkv - 8);
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    let e = gpu.attention_backward(&stream, &p, &q, &k, &v, &o, &short_lse, &dout, &mut dq, &mut dk, &mut dv).unwrap_err();
    assert!(matches!(e, Error::BufferTooSmall { tensor: "lse", .. }), "{e}");
    let e = gpu.attention_backward(&stream, &p, &q, &k, &v, &o, &lse, &dout, &mut dq, &mut short_dk, &mut dv).unwrap_err();
    assert!(matches!(e, Error::BufferTooSmall { tensor: "dk", .. }), "{e}");
    let short_dout = buf(nq - 1);
    let e = gpu.attention_backward(&stream, &p, &q, &k, &v, &o, &lse, &short_dout, &mut dq, &mut dk, &mut dv).unwrap_err();
    assert!(matches!(e, Error::BufferTooSmall { tensor: "dout", .. }), "{e}");
    // Raw entry: a gradient aliasing an input, gradients aliasing each other, no lse.
    let bufs = Buffers::new(DType::Bf16, buffer_of(&q), buffer_of(&k), buffer_of(&v), buffer_of(&o)).lse(buffer_of(&lse));
    let grads = |dq: BufferRef, dk: BufferRef, dv: BufferRef| GradBuffers::new(buffer_of(&dout), dq, dk, dv);
    let raw = |b: &Buffers, g: &GradBuffers| unsafe { gpu.attention_backward_raw(stream.as_inner() as *mut _, &p, b, g) };
    let e = raw(&bufs, &grads(buffer_of(&q), buffer_of(&dk), buffer_of(&dv))).unwrap_err();
    assert!(matches!(e, Error::InvalidBuffer { tensor: "dq", .. }), "{e}");
    let e = raw(&bufs, &grads(buffer_of(&dq), buffer_of(&dk), buffer_of(&dk))).unwrap_err();
    assert!(matches!(e, Error::InvalidBuffer { tensor: "dk", .. }), "{e}");
    let e = raw(&bufs, &grads(buffer_of(&dq), buffer_of(&dk), buffer_of(&dout))).unwrap_err();
    assert!(matches!(e, Error::InvalidBuffer { tensor: "dv", .. }), "{e}");
    let no_lse = Buffers::new(DType::Bf16, buffer_of(&q), buffer_of(&k), buffer_of(&v), buffer_of(&o));
    let e = raw(&no_lse, &grads(buffer_of(&dq), buffer_of(&dk), buffer_of(&dv))).unwrap_err();
    assert!(matches!(e, Error::InvalidBuffer { tensor: "lse", .. }), "{e}");
    stream.synchronize().unwrap();
    // Nothing was written.
    for g in [&dq, &dk, &dv] {
        let mut h = vec![half::bf16::ZERO; g.len()];
        cust::memory::CopyDestination::copy_to(&**g, &mut h[..]).unwrap();
        assert!(h.iter().all(|x| x.to_f32() == 1.5));
    }
}

/// The Hopper backward's `dQ = dS K` building block alone (`probes/wgmma_tb.rs`): wgmma with
/// both A and B MN-major in 128B-swizzled slabs (A stored transposed, as dS^T is). If the
/// Hopper gradients fail and this passes, the transposed-A descriptor is not the culprit.
#[test]
fn probe_wgmma_mn_major_a_and_b() {
    let Some(gpu) = flashrs_tests::hopper_or_skip("probe_wgmma_mn_major_a_and_b") else { return };
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    let func_module = flashrs_tests::probe_module(&gpu);
    let func = func_module.get_function("probe_wgmma_tt_m64n64k16").unwrap();
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(0x77);
    for mode in 0..2u32 {
        let enc = |v: f32| flashrs_tests::encode_16(mode, v);
        let mut value = || rand::Rng::random_range(&mut rng, -1.0f32..1.0);
        // a_t[k][m] = A[m][k], b[k][n]: both 64 x 64 row-major.
        let (at_bits, at): (Vec<u16>, Vec<f64>) = (0..64 * 64).map(|_| enc(value())).unzip();
        let (b_bits, b): (Vec<u16>, Vec<f64>) = (0..64 * 64).map(|_| enc(value())).unzip();
        let (at_d, b_d) = (DeviceBuffer::from_slice(&at_bits).unwrap(), DeviceBuffer::from_slice(&b_bits).unwrap());
        let d_d = DeviceBuffer::from_slice(&vec![f32::NAN; 64 * 64]).unwrap();
        unsafe {
            cust::launch!(func<<<1, 128, 1024 + 16384, stream>>>(at_d.as_device_ptr(), b_d.as_device_ptr(), d_d.as_device_ptr(), mode)).unwrap();
        }
        stream.synchronize().unwrap();
        let mut d = vec![0f32; 64 * 64];
        cust::memory::CopyDestination::copy_to(&*d_d, &mut d[..]).unwrap();
        let mut bad = 0;
        for m in 0..64 {
            for n in 0..64 {
                let (want, mag) = (0..64).fold((0.0, 0.0), |(w, a), k| (w + at[k * 64 + m] * b[k * 64 + n], a + (at[k * 64 + m] * b[k * 64 + n]).abs()));
                if !((d[m * 64 + n] as f64 - want).abs() <= 1e-3 * mag + 1e-6) {
                    bad += 1;
                }
            }
        }
        assert_eq!(bad, 0, "mode {mode}: {bad} of 4096 values wrong");
    }
}
