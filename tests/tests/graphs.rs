//! Forward calls captured into a CUDA graph (as serving engines capture their decode steps)
//! and replayed, against the CPU f64 reference. A capturing stream keeps no workspace, so
//! split-KV and persistent launches get a per-call one inside the graph (an allocation node,
//! a memset of their counters, a free node), which every replay runs afresh. Skips (saying
//! so) without a GPU.
use std::ffi::c_void;
use std::ptr::null_mut;

use cust::stream::Stream;
use cust::sys::{
    CUresult, CUstreamCaptureMode, cuGraphDestroy, cuGraphExecDestroy, cuGraphInstantiateWithFlags, cuGraphLaunch, cuMemsetD16Async,
    cuMemsetD32Async, cuStreamBeginCapture_v2, cuStreamEndCapture,
};
use flashrs::{AttentionParams, Buffers, DType};
use flashrs_tests::attn::check_many_with;
use flashrs_tests::gpu_or_skip;

fn ok(what: &str, r: CUresult) {
    assert_eq!(r, CUresult::CUDA_SUCCESS, "{what}");
}

/// Captures one forward call on `stream` into a graph, then replays it twice, each replay after
/// NaN-filling the output and the log-sum-exp (outside the graph): what the check sees was
/// written by the last replay.
fn capture_and_replay(gpu: &flashrs::Gpu, p: &AttentionParams, stream: &Stream, bufs: &Buffers) -> flashrs::Result<()> {
    let s = stream.as_inner();
    let nan16 = match p.dtype {
        DType::F16 => half::f16::NAN.to_bits(),
        DType::Bf16 => half::bf16::NAN.to_bits(),
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
        AttentionParams::new(1, 1, 8192, 32, 128).heads_kv(8),
        AttentionParams::new(2, 4, 20000, 8, 64).heads_kv(2).causal(true).dtype(DType::Bf16),
        AttentionParams::new(4, 1000, 700, 16, 64).heads_kv(4).causal(true),
        AttentionParams::new(1, 100, 300, 2, 256),
    ];
    let b = |i: u64| flashrs::BufferRef { ptr: (1 + i) << 36, len: 1 << 30 };
    let bufs = Buffers { q: b(0), k: b(1), v: b(2), o: b(3), lse: None, paged: None };
    assert!(gpu.plan_forward(&cases[0], &bufs).unwrap().split.is_some(), "the decode step must split");
    let launch = |p: &AttentionParams, stream: &Stream, bufs: &Buffers| capture_and_replay(&gpu, p, stream, bufs);
    check_many_with(&gpu, &cases, Some(&launch));
}
