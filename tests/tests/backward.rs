//! The backward pass against the CPU f64 reference's analytic gradients: element types x head
//! dims x causal x GQA x ragged lengths (1, 17, 127, 1037, seqlen_q != seqlen_k) x batched or
//! variable-length rows; determinism; bad input.
use cust::memory::DeviceBuffer;
use cust::stream::{Stream, StreamFlags};
use flashrs::{AttentionParams, BufferRef, Buffers, DType, Error, GradBuffers};
use flashrs_tests::grad::{GradCase, Rows, check_grads, run_grad};
use flashrs_tests::{buffer_of, gpu_or_skip};

#[test]
fn gradients_match_the_reference() {
    let Some(gpu) = gpu_or_skip("gradients_match_the_reference") else { return };
    let mut cases = vec![];
    for dtype in [DType::Bf16, DType::F16] {
        for d in [64, 128, 256, 40, 96] {
            for causal in [false, true] {
                for (sq, sk) in [(128, 128), (17, 127), (127, 17), (1, 1037), (257, 200)] {
                    for (hq, hkv) in [(2, 2), (4, 1)] {
                        cases.push(GradCase::batched(2, sq, sk, hq, hkv, d, causal, dtype));
                    }
                }
            }
        }
    }
    check_grads(&gpu, &cases);
}

#[test]
fn long_and_strided_rows() {
    let Some(gpu) = gpu_or_skip("long_and_strided_rows") else { return };
    let mut cases = vec![];
    for (d, causal) in [(64, true), (128, false), (128, true), (256, true)] {
        cases.push(GradCase::batched(1, 1037, 1037, 4, 2, d, causal, DType::Bf16));
        let mut c = GradCase::batched(2, 300, 500, 6, 3, d, causal, DType::F16);
        c.rows = Rows::Batched { bhsd: true };
        cases.push(c);
    }
    check_grads(&gpu, &cases);
}

#[test]
fn variable_length_batches() {
    let Some(gpu) = gpu_or_skip("variable_length_batches") else { return };
    let mut cases = vec![];
    for (d, device) in [(64, false), (128, true), (256, false), (96, true)] {
        for causal in [false, true] {
            for dtype in [DType::Bf16, DType::F16] {
                let lens = vec![(17, 1037), (1, 1), (300, 129), (0, 40), (64, 0), (127, 127)];
                let mut c = GradCase::batched(1, 1, 1, 4, 2, d, causal, dtype);
                c.lens = lens;
                c.rows = Rows::Varlen { device };
                cases.push(c);
            }
        }
    }
    check_grads(&gpu, &cases);
}

#[test]
fn deterministic_mode_is_bit_identical() {
    let Some(gpu) = gpu_or_skip("deterministic_mode_is_bit_identical") else { return };
    for causal in [false, true] {
        let mut c = GradCase::batched(2, 700, 900, 8, 2, 128, causal, DType::Bf16);
        c.deterministic = true;
        let (e, first) = run_grad::<half::bf16>(&gpu, &c);
        assert!(e.passes(c.dtype), "{}: {e:?}", c.label());
        c.seed = Some(e.seed);
        c.check = false;
        for run in 1..100 {
            let (_, again) = run_grad::<half::bf16>(&gpu, &c);
            assert!(again == first, "{}: run {run} differs from run 0", c.label());
        }
        println!("ok   {}: 100 runs bit-identical", c.label());
    }
}

/// Bad input is a typed error before anything runs, every buffer untouched.
#[test]
fn bad_input_is_a_typed_error() {
    let Some(gpu) = gpu_or_skip("bad_input_is_a_typed_error") else { return };
    let p = AttentionParams::builder().batch(2).seqlen(64).heads_q(4).heads_kv(2).head_dim(64).build().unwrap();
    let (nq, nkv, nl) = p.contiguous_lens().unwrap();
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
