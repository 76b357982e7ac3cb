//! Split-KV (decode) on the GPU against the CPU reference: forced splits 1..8 and automatic,
//! causal and not, GQA, seqlen_q 1..16, seqlen_k up to 32k; plus the planner's split choice and
//! GQA packing (no GPU needed). GPU cases skip without a GPU.
use flashrs::{AttentionParams, AttentionParamsBuilder, BufferRef, Buffers, DType, DimOrder, KernelPath, LaunchPlan, Target};
use flashrs_tests::attn::{LaunchResult, check_many, check_many_with};
use flashrs_tests::{H100, gpu_or_skip, params, with_splits};

fn decode(b: usize, sq: usize, sk: usize, hq: usize, hkv: usize, d: usize) -> AttentionParamsBuilder<'static> {
    params(b, sq, sk, hq, d).heads_kv(hkv)
}

/// Fake, disjoint buffers of `dtype` exactly as large as contiguous tensors of `p` (planning
/// never touches them).
fn fake_buffers(p: &AttentionParams, dtype: DType) -> Buffers {
    let flashrs::TensorLens { q: nq, k: nk, lse: nl, .. } = p.contiguous_lens().unwrap();
    let r = |ptr: u64, len: usize| BufferRef { ptr, len };
    Buffers::new(dtype, r(1 << 40, nq), r(2 << 40, nk), r(3 << 40, nk), r(4 << 40, nq)).lse(r(5 << 40, nl))
}

fn print_cases(gpu: &flashrs::Gpu, cases: &[(AttentionParams, DType)]) {
    for (p, dtype) in cases {
        let plan = gpu.plan_forward(p, &fake_buffers(p, *dtype)).expect("plan");
        println!(
            "case b{} sq{} sk{} hq{} hkv{} d{} causal={} {dtype:?} num_splits={:?}: kernel {} grid {} splits {}",
            p.batch, p.seqlen_q, p.seqlen_k, p.heads_q, p.heads_kv, p.head_dim, p.causal, p.num_splits,
            plan.kernel, plan.grid, plan.split.as_ref().map_or(1, |s| s.num_splits)
        );
    }
}

#[test]
fn forced_splits_one_to_eight() {
    let Some(gpu) = gpu_or_skip("forced_splits_one_to_eight") else { return };
    let mut cases = Vec::new();
    for splits in 1..=8 {
        for causal in [false, true] {
            for (sq, sk) in [(1, 1), (1, 65), (1, 1037), (3, 4096), (16, 2000), (16, 16)] {
                let dtype = if splits % 2 == 0 { DType::F16 } else { DType::Bf16 };
                cases.push((decode(2, sq, sk, 8, 2, 128).causal(causal).num_splits(splits).build().unwrap(), dtype));
            }
        }
    }
    print_cases(&gpu, &cases);
    check_many(&gpu, &cases);
}

#[test]
fn every_head_dim_and_long_caches() {
    let Some(gpu) = gpu_or_skip("every_head_dim_and_long_caches") else { return };
    let mut cases = Vec::new();
    for d in [64, 96, 128, 256] {
        for causal in [false, true] {
            cases.push((decode(1, 5, 3000, 4, 1, d).causal(causal).num_splits(7).build().unwrap(), DType::F16));
        }
    }
    for sk in [8192, 32768] {
        for sq in [1, 16] {
            cases.push((decode(1, sq, sk, 4, 2, 128).causal(sq > 1).num_splits(8).build().unwrap(), DType::F16));
            cases.push((decode(1, sq, sk, 4, 2, 128).causal(sq > 1).num_splits(32).build().unwrap(), DType::Bf16));
        }
    }
    print_cases(&gpu, &cases);
    check_many(&gpu, &cases);
}

#[test]
fn automatic_splits() {
    let Some(gpu) = gpu_or_skip("automatic_splits") else { return };
    let mut cases = Vec::new();
    for (b, sq, sk) in [(1, 1, 1024), (1, 1, 8192), (2, 4, 20000), (1, 16, 32768), (4, 1, 700)] {
        for causal in [false, true] {
            cases.push((decode(b, sq, sk, 32, 8, 128).causal(causal).build().unwrap(), DType::F16));
        }
    }
    print_cases(&gpu, &cases);
    check_many(&gpu, &cases);
}

#[test]
fn packed_gqa_decode_without_and_with_splits() {
    let Some(gpu) = gpu_or_skip("packed_gqa_decode_without_and_with_splits") else { return };
    let mut cases = Vec::new();
    for (hq, hkv) in [(32, 8), (8, 1), (6, 2)] {
        for splits in [Some(1), Some(3), None] {
            for causal in [false, true] {
                cases.push((with_splits(decode(3, 1, 777, hq, hkv, 128).causal(causal), splits), DType::F16));
            }
        }
        cases.push((decode(2, 1, 300, hq, hkv, 64).dim_order(DimOrder::Bhsd).build().unwrap(), DType::Bf16));
        cases.push((decode(2, 1, 0, hq, hkv, 64).build().unwrap(), DType::F16));
        cases.push((decode(64, 1, 1024, hq, hkv, 128).num_splits(1).build().unwrap(), DType::F16));
    }
    print_cases(&gpu, &cases);
    check_many(&gpu, &cases);
}

/// Split calls of growing and shrinking sizes on one stream, each launched three times back to
/// back: the stream's kept workspace is reused (the kernel must leave its counters at zero, or
/// no split of the next launch would find itself last and the output would keep its NaN poison)
/// and regrown while launches that use the old one are still queued.
#[test]
fn one_stream_reuses_its_workspace() {
    let Some(gpu) = gpu_or_skip("one_stream_reuses_its_workspace") else { return };
    let stream = cust::stream::Stream::new(cust::stream::StreamFlags::NON_BLOCKING, None).unwrap();
    let cases = [
        (decode(1, 1, 1024, 32, 8, 128).num_splits(4), DType::F16),
        (decode(4, 1, 8192, 32, 8, 128).num_splits(16), DType::F16),
        (decode(1, 1, 1024, 32, 8, 128).num_splits(2), DType::F16),
        (decode(8, 1, 3000, 32, 8, 64).num_splits(9), DType::Bf16),
        (decode(2, 16, 4000, 8, 2, 256).causal(true).num_splits(5), DType::F16),
        (decode(1, 1, 32768, 32, 8, 128), DType::F16),
    ]
    .map(|(p, dtype)| (p.build().unwrap(), dtype));
    let launch = |p: &AttentionParams, _: &cust::stream::Stream, bufs: &Buffers| -> LaunchResult {
        for _ in 0..3 {
            // SAFETY: the case's live buffers, on a stream of this context.
            unsafe { gpu.attention_forward_raw(stream.as_inner() as *mut std::ffi::c_void, p, bufs)? };
        }
        Ok(stream.synchronize()?)
    };
    check_many_with(&gpu, &cases, Some(&launch));
}

/// A stream per call (as an application that makes one per request): the kept per-stream
/// workspaces stay within their bounds however many streams there are, streams past the bounds
/// run on per-launch workspaces with the same results, and releasing frees them all.
#[test]
fn kept_workspaces_stay_bounded_over_many_streams() {
    use cust::memory::{CopyDestination, DeviceBuffer};
    use cust::stream::{Stream, StreamFlags};
    use flashrs::workspace::{MAX_KEPT_BYTES, MAX_KEPT_STREAMS};
    let Some(gpu) = gpu_or_skip("kept_workspaces_stay_bounded_over_many_streams") else { return };
    let p = decode(2, 1, 8192, 32, 8, 128).num_splits(8).build().unwrap();
    let flashrs::TensorLens { q: nq, k: nk, .. } = p.contiguous_lens().unwrap();
    let (mut rng, seed) = flashrs_tests::case_rng();
    let mut f16s = |n: usize| DeviceBuffer::from_slice(&(0..n).map(|_| half::f16::from_f32(rand::Rng::random_range(&mut rng, -1.0..1.0))).collect::<Vec<_>>()).unwrap();
    let (q, k, v) = (f16s(nq), f16s(nk), f16s(nk));
    let mut out = DeviceBuffer::from_slice(&vec![half::f16::ZERO; nq]).unwrap();
    let read = |out: &DeviceBuffer<half::f16>| {
        let mut h = vec![half::f16::ZERO; nq];
        out.copy_to(&mut h[..]).unwrap();
        h
    };
    let mut first = None;
    let streams = 3 * MAX_KEPT_STREAMS;
    for i in 0..streams {
        let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
        gpu.attention_forward(&stream, &p, &q, &k, &v, &mut out, None).unwrap();
        stream.synchronize().unwrap();
        let (kept, bytes) = gpu.kept_workspaces();
        assert!(kept <= MAX_KEPT_STREAMS && bytes <= MAX_KEPT_BYTES, "stream {i}: {kept} workspaces of {bytes} bytes kept");
        let got = read(&out);
        assert!(got.iter().all(|x| x.is_finite()), "stream {i}: non-finite output (seed {seed})");
        match &first {
            None => first = Some(got),
            Some(f) => assert!(*f == got, "stream {i}: output differs from the first stream's (seed {seed})"),
        }
    }
    let (kept, bytes) = gpu.kept_workspaces();
    assert_eq!(kept, MAX_KEPT_STREAMS, "every stream up to the bound keeps one");
    gpu.release_workspaces().unwrap();
    assert_eq!(gpu.kept_workspaces(), (0, 0));
    println!("kept workspaces over {streams} streams: at most {kept} streams, {bytes} bytes; released to none");
}

/// `p` planned for `t` on fake, exactly sized f16 buffers.
fn planned(p: &AttentionParamsBuilder, t: &Target) -> LaunchPlan {
    let p = p.clone().build().unwrap();
    p.plan(&fake_buffers(&p, DType::F16), t).unwrap()
}

/// The split count the planner picks for `p` on `t` (1: none).
fn splits(p: &AttentionParamsBuilder, t: &Target) -> u32 {
    planned(p, t).split.map_or(1, |s| s.num_splits)
}

#[test]
fn planner_packs_gqa_decode() {
    let p = decode(2, 1, 4096, 32, 8, 128).num_splits(1);
    // One query row per sequence: 4 query heads per K/V head packed into the rows of a block.
    let packed = planned(&p, &H100);
    assert!(packed.packs_gqa);
    let f = packed.params;
    assert_eq!((f.heads_q, f.seqlen_q, f.group, f.causal), (8, 4, 1, 0));
    assert_eq!(f.q_strides, [32 * 128, 128, 4 * 128]);
    assert_eq!(f.o_strides, [32 * 128, 128, 4 * 128]);
    assert_eq!(packed.grid, 2 * 8);
    // Four packed rows take the 16-row decode tiles on head_dim 128 (128-key tiles where they
    // fit, 64-key ones in 99 KB); 32 rows the 64-row ones, unpacked (on mma.sync: an H100
    // takes the Hopper kernel for them).
    assert_eq!(packed.kernel.to_string(), "flash_fwd_f16_d128_16x128w4s2");
    assert_eq!(planned(&p, &Target::L4).kernel.to_string(), "flash_fwd_f16_d128_16x64w4s2");
    let wide = planned(&decode(2, 32, 4096, 32, 8, 128).num_splits(1), &Target::A100);
    assert_eq!((wide.kernel.to_string().as_str(), wide.packs_gqa), ("flash_fwd_f16_d128_64x64w4s2", false));
    // The wgmma path never packs (its kernel is the literal call).
    let literal = planned(&p.clone().path(KernelPath::Wgmma), &H100);
    assert!(!literal.packs_gqa && literal.kernel.needs_sm90a());
    assert_eq!((literal.params.heads_q, literal.params.seqlen_q, literal.params.group), (32, 1, 4));
    assert!(!planned(&decode(2, 2, 4096, 32, 8, 128), &H100).packs_gqa);
    assert!(!planned(&decode(2, 1, 4096, 8, 8, 128), &H100).packs_gqa);
}

#[test]
fn planner_chooses_and_bounds_splits() {
    let p = decode(1, 1, 8192, 32, 8, 128);
    // 32 CTAs on 132 SMs: split; the same call with a big batch fills the GPU: no split.
    let n = splits(&p, &H100);
    assert!((2..=32).contains(&n), "{n}");
    assert_eq!(splits(&decode(64, 1, 8192, 32, 8, 128), &H100), 1);
    assert_eq!(splits(&decode(1, 128, 8192, 32, 8, 128), &H100), 1, "prefill never splits");
    assert_eq!(splits(&p.clone().path(KernelPath::Wgmma), &H100), 1);
    // Whole waves of the 132 CTA slots of the 16x128 decode tiles (one CTA per SM, 132 KB of
    // shared memory): batch 8 x 8 packed K/V heads = 64 CTAs take 2 splits (128 CTAs, one
    // wave), not 3 (192 CTAs, a second wave 45% full); batch 1 (8 CTAs) takes 16 at 8k keys,
    // and at most half its tiles at 1k (8 tiles of 128: 4).
    assert_eq!(splits(&decode(8, 1, 32768, 32, 8, 128), &H100), 2);
    assert_eq!(splits(&decode(1, 1, 8192, 32, 8, 128), &H100), 16);
    assert_eq!(splits(&decode(1, 1, 1024, 32, 8, 128), &H100), 4);
    // Fewer SMs, fewer splits for the same fill.
    assert!(splits(&p, &Target::L4) <= n);
    let plan = planned(&p, &H100);
    let s = plan.split.as_ref().expect("split plan");
    assert_eq!(plan.kernel.to_string(), "flash_fwd_split_f16_d128_16x128w4s2");
    // Packed GQA decode: 8 K/V heads of 4 query rows each, times the splits.
    assert_eq!(plan.grid, 8 * s.num_splits);
    assert_eq!(s.counters_len, 8, "one arrival counter per query block");
    assert_eq!(plan.params.num_splits, s.num_splits);
    assert!(plan.params.split_tiles * s.num_splits * plan.kernel.block_n() as u32 >= 8192);
    // Forced: capped by the K/V tiles (129 keys = 2 tiles of 128 for one query row's 16-row
    // decode tiles), refused past 32 or on wgmma.
    assert_eq!(splits(&decode(1, 1, 129, 32, 8, 128).num_splits(8), &H100), 2);
    assert_eq!(splits(&decode(1, 1, 128, 32, 8, 128).num_splits(8), &H100), 1);
    let bufs = fake_buffers(&p.clone().build().unwrap(), DType::F16);
    assert!(p.clone().num_splits(33).build().unwrap().plan(&bufs, &H100).is_err());
    assert!(p.clone().num_splits(4).path(KernelPath::Wgmma).build().unwrap().plan(&bufs, &H100).is_err());
}
