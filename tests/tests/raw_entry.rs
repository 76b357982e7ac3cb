//! `Gpu::attention_forward_raw`: the same results as the cust entry, from a thread where no
//! context is current, and the same validation. Skipped (with the reason) without a GPU.
use std::ffi::c_void;

use cust::memory::{CopyDestination, DeviceBuffer};
use cust::stream::{Stream, StreamFlags};
use flashrs::{AttentionParams, BufferRef, Buffers, DType, Error};
use flashrs_tests::gpu_or_skip;
use half::f16;
use rand::Rng;

fn random(n: usize) -> Vec<f16> {
    let mut rng = rand::rng();
    (0..n).map(|_| f16::from_f32(rng.sample(rand_distr::StandardNormal))).collect()
}

fn r<T: cust::memory::DeviceCopy>(b: &DeviceBuffer<T>) -> BufferRef {
    BufferRef { ptr: b.as_device_ptr().as_raw(), len: b.len() }
}

#[test]
fn raw_entry_matches_the_cust_entry_from_another_thread() {
    let Some(gpu) = gpu_or_skip("raw_entry_matches_the_cust_entry_from_another_thread") else { return };
    // GQA, causal with seqlen_q > seqlen_k (rows without keys), head_dim padded 80 -> 128.
    let params = AttentionParams::builder().batch(2).seqlen_q(150).seqlen_k(130).heads_q(4).heads_kv(2).head_dim(80).causal(true).build().unwrap();
    let flashrs::TensorLens { q: n_q, k: n_kv, lse: n_lse, .. } = params.contiguous_lens().unwrap();
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    let q = DeviceBuffer::from_slice(&random(n_q)).unwrap();
    let k = DeviceBuffer::from_slice(&random(n_kv)).unwrap();
    let v = DeviceBuffer::from_slice(&random(n_kv)).unwrap();
    let mut out_cust = DeviceBuffer::from_slice(&vec![f16::ZERO; n_q]).unwrap();
    let mut lse_cust = DeviceBuffer::<f32>::zeroed(n_lse).unwrap();
    gpu.attention_forward(&stream, &params, &q, &k, &v, &mut out_cust, Some(&mut lse_cust)).unwrap();
    stream.synchronize().unwrap();

    // NaN-filled, so a launch that never happened shows.
    let out_raw = DeviceBuffer::from_slice(&vec![f16::NAN; n_q]).unwrap();
    let lse_raw = DeviceBuffer::from_slice(&vec![f32::NAN; n_lse]).unwrap();
    let bufs = Buffers::new(DType::F16, r(&q), r(&k), r(&v), r(&out_raw)).lse(r(&lse_raw));
    std::thread::scope(|s| {
        s.spawn(|| {
            // A fresh thread has no current context: the raw entry binds the Gpu's.
            // SAFETY: live cust allocations of exactly these lengths in this GPU's (primary)
            // context, untouched until the stream is synchronised below.
            unsafe { gpu.attention_forward_raw(stream.as_inner() as *mut c_void, &params, &bufs) }.unwrap();
            stream.synchronize().unwrap();
        })
        .join()
        .unwrap();
    });

    let host = |b: &DeviceBuffer<f16>| {
        let mut v = vec![f16::ZERO; b.len()];
        b.copy_to(&mut v[..]).unwrap();
        v.into_iter().map(f16::to_bits).collect::<Vec<_>>()
    };
    assert_eq!(host(&out_raw), host(&out_cust), "outputs differ");
    let (a, b) = (lse_raw.as_host_vec().unwrap(), lse_cust.as_host_vec().unwrap());
    assert_eq!(a.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), b.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), "lse differs");
    // Row 0 of each head sees no key (150 queries, 130 keys, bottom-right causal).
    assert_eq!(a[0], f32::NEG_INFINITY);
}

#[test]
fn raw_entry_validates_before_launching() {
    let Some(gpu) = gpu_or_skip("raw_entry_validates_before_launching") else { return };
    let params = AttentionParams::builder().batch(1).seqlen(64).heads_q(2).head_dim(64).build().unwrap();
    let flashrs::TensorLens { q: n_q, k: n_kv, .. } = params.contiguous_lens().unwrap();
    let buf = DeviceBuffer::from_slice(&vec![f16::ZERO; n_q.max(n_kv)]).unwrap();
    let short = BufferRef { ptr: buf.as_device_ptr().as_raw(), len: n_kv - 1 };
    let bufs = Buffers::new(DType::F16, r(&buf), short, r(&buf), r(&buf));
    // SAFETY: rejected by the planner before anything is launched.
    let e = unsafe { gpu.attention_forward_raw(std::ptr::null_mut(), &params, &bufs) }.unwrap_err();
    assert!(matches!(e, Error::BufferTooSmall { tensor: "k", .. }), "{e}");

    // Nothing to compute: Ok without looking at the (null, empty) buffers.
    let none = BufferRef { ptr: 0, len: 0 };
    let empty = Buffers::new(DType::F16, none, none, none, none);
    let mut no_batch = params.clone();
    no_batch.batch = 0;
    // SAFETY: an empty call launches nothing.
    unsafe { gpu.attention_forward_raw(std::ptr::null_mut(), &no_batch, &empty) }.unwrap();
}
