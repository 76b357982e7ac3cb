//! Forward calls captured into a CUDA graph (as serving engines capture their decode steps)
//! and replayed, against the CPU f64 reference. A capturing stream keeps no workspace, so
//! split-KV and persistent launches get a per-call one inside the graph (an allocation node,
//! a memset of their counters, a free node), which every replay runs afresh; variable-length
//! calls add the kernel that stores their offsets. Skips (saying so) without a GPU.
use std::ffi::c_void;
use std::ptr::null_mut;

use cust::stream::Stream;
use cust::sys::{
    CUresult, CUstreamCaptureMode, cuGraphDestroy, cuGraphExecDestroy, cuGraphInstantiateWithFlags, cuGraphLaunch, cuMemsetD16Async,
    cuMemsetD32Async, cuStreamBeginCapture_v2, cuStreamEndCapture,
};
use flashrs::{AttentionParams, Buffers, DType};
use flashrs_tests::attn::{LaunchResult, check_many_with};
use flashrs_tests::{buffer_of, gpu_or_skip, params};

fn ok(what: &str, r: CUresult) {
    assert_eq!(r, CUresult::CUDA_SUCCESS, "{what}");
}

/// Captures one forward call on `stream` into a graph, then replays it twice, each replay after
/// NaN-filling the output and the log-sum-exp (outside the graph): what the check sees was
/// written by the last replay.
fn capture_and_replay(gpu: &flashrs::Gpu, p: &AttentionParams, stream: &Stream, bufs: &Buffers) -> LaunchResult {
    let s = stream.as_inner();
    let nan16 = match bufs.dtype {
        DType::F16 => half::f16::NAN.to_bits(),
        DType::Bf16 => half::bf16::NAN.to_bits(),
        dtype => unreachable!("no kernels for {dtype:?}"),
    };
    // SAFETY: the case's live buffers and stream, in this GPU's (current) context.
    unsafe {
        ok("cuStreamBeginCapture", cuStreamBeginCapture_v2(s, CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
        let launched = gpu.attention_forward_raw(s as *mut c_void, p, bufs);
        let mut graph = null_mut();
        ok("cuStreamEndCapture", cuStreamEndCapture(s, &mut graph));
        launched?;
        let mut exec = null_mut();
        ok("cuGraphInstantiate", cuGraphInstantiateWithFlags(&mut exec, graph, 0));
        for _ in 0..2 {
            ok("poison out", cuMemsetD16Async(bufs.o.ptr, nan16, bufs.o.len, s));
            if let Some(lse) = bufs.lse {
                ok("poison lse", cuMemsetD32Async(lse.ptr, f32::NAN.to_bits(), lse.len, s));
            }
            ok("cuGraphLaunch", cuGraphLaunch(exec, s));
        }
        stream.synchronize()?;
        ok("cuGraphExecDestroy", cuGraphExecDestroy(exec));
        ok("cuGraphDestroy", cuGraphDestroy(graph));
    }
    Ok(())
}

/// A split-KV decode step, a prefill (persistent on Hopper: counters claimed by its CTAs) and
/// a plain one, each captured and replayed.
#[test]
fn captured_graphs_replay_split_and_persistent_calls() {
    let Some(gpu) = gpu_or_skip("captured_graphs_replay_split_and_persistent_calls") else { return };
    let cases = [
        (params(1, 1, 8192, 32, 128).heads_kv(8).build().unwrap(), DType::F16),
        (params(2, 4, 20000, 8, 64).heads_kv(2).causal(true).build().unwrap(), DType::Bf16),
        (params(4, 1000, 700, 16, 64).heads_kv(4).causal(true).build().unwrap(), DType::F16),
        (params(1, 100, 300, 2, 256).build().unwrap(), DType::F16),
    ];
    let b = |i: u64| flashrs::BufferRef { ptr: (1 + i) << 36, len: 1 << 30 };
    let bufs = Buffers::new(DType::F16, b(0), b(1), b(2), b(3));
    assert!(gpu.plan_forward(&cases[0].0, &bufs).unwrap().split.is_some(), "the decode step must split");
    let launch = |p: &AttentionParams, stream: &Stream, bufs: &Buffers| capture_and_replay(&gpu, p, stream, bufs);
    check_many_with(&gpu, &cases, Some(&launch));
}

/// A variable-length call (Hopper kernels on an H100/H200) captured and replayed: its offsets
/// reach the GPU in a kernel's launch parameters, which a capture records. The replay must
/// write exactly what a direct launch writes (the kernels are deterministic; the direct path
/// is checked against the CPU reference by the `varlen` suite).
#[test]
fn captured_graphs_replay_varlen_calls() {
    let Some(gpu) = gpu_or_skip("captured_graphs_replay_varlen_calls") else { return };
    use cust::memory::{CopyDestination, DeviceBuffer};
    let (cq, ck) = ([0, 300, 301, 1337, 1337], [0, 500, 1200, 2000, 2100]);
    let (hq, hkv, d) = (8, 2, 128);
    let p = AttentionParams::builder().varlen(&cq, &ck).heads_q(hq).heads_kv(hkv).head_dim(d).causal(true).build().unwrap();
    let (tq, tk) = (1337, 2100);
    let bits = |n: usize, seed: u32| -> Vec<u16> {
        (0..n as u32).map(|i| half::f16::from_f32(((i.wrapping_mul(2654435761) ^ seed) % 2001) as f32 / 1000.0 - 1.0).to_bits()).collect()
    };
    let (q, k, v) = (DeviceBuffer::from_slice(&bits(tq * hq * d, 1)).unwrap(), DeviceBuffer::from_slice(&bits(tk * hkv * d, 2)).unwrap(), DeviceBuffer::from_slice(&bits(tk * hkv * d, 3)).unwrap());
    let outs = [0, 1].map(|_| DeviceBuffer::from_slice(&vec![0u16; tq * hq * d]).unwrap());
    // f16 bits, held as u16.
    let bufs = |o: &DeviceBuffer<u16>| Buffers::new(DType::F16, buffer_of(&q), buffer_of(&k), buffer_of(&v), buffer_of(o));
    let stream = Stream::new(cust::stream::StreamFlags::NON_BLOCKING, None).unwrap();
    // SAFETY: live buffers of the call's extents, this GPU's stream.
    unsafe { gpu.attention_forward_raw(stream.as_inner() as *mut c_void, &p, &bufs(&outs[0])).unwrap() };
    stream.synchronize().unwrap();
    capture_and_replay(&gpu, &p, &stream, &bufs(&outs[1])).unwrap();
    let [direct, replayed] = outs.map(|o| {
        let mut h = vec![0u16; o.len()];
        o.copy_to(&mut h[..]).unwrap();
        h
    });
    assert!(direct.iter().all(|&x| half::f16::from_bits(x).is_finite()), "the direct launch left non-finite values");
    let differ = direct.iter().zip(&replayed).filter(|(a, b)| a != b).count();
    assert_eq!(differ, 0, "{differ} output elements differ between the replayed graph and the direct launch");
}
