//! Determinism: identical inputs give bit-identical outputs and log-sum-exps, over 100
//! launches on one stream and over 32 launches in flight together on 4 streams. Every output
//! element comes from one CTA in a fixed order (no atomics, no split over keys), so nothing
//! may depend on scheduling. Skips without a GPU.
use cust::memory::{CopyDestination, DeviceBuffer};
use cust::stream::{Stream, StreamFlags};
use flashrs::{AttentionParams, BufferRef, Buffers, DType, Element, Gpu, KernelPath};
use flashrs_tests::{CustElement, gpu_or_skip, params};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand_distr::{Distribution, StandardNormal};

const LAUNCHES: usize = 100;
const STREAMS: usize = 4;
const PER_STREAM: usize = 8;

fn bits<T: Element>(x: &[T]) -> Vec<u32> {
    x.iter().map(|v| v.to_f32().to_bits()).collect()
}

fn case<T: CustElement>(gpu: &Gpu, p: &AttentionParams, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let nq = p.batch * p.seqlen_q * p.heads_q * p.head_dim;
    let nk = p.batch * p.seqlen_k * p.heads_kv * p.head_dim;
    let n_lse = p.batch * p.heads_q * p.seqlen_q;
    let mut random = |n: usize| -> Vec<T> { (0..n).map(|_| T::from_f32(<StandardNormal as Distribution<f32>>::sample(&StandardNormal, &mut rng))).collect() };
    let (q, k, v) = (random(nq), random(nk), random(nk));
    let (q, k, v) = (DeviceBuffer::from_slice(&q).unwrap(), DeviceBuffer::from_slice(&k).unwrap(), DeviceBuffer::from_slice(&v).unwrap());
    let poison_o = vec![T::from_f32(f32::NAN); nq];
    let poison_l = vec![f32::NAN; n_lse];
    let read = |o: &DeviceBuffer<T>, l: &DeviceBuffer<f32>| {
        let mut oh = vec![T::default(); nq];
        o.copy_to(&mut oh[..]).unwrap();
        let mut lh = vec![0f32; n_lse];
        l.copy_to(&mut lh[..]).unwrap();
        (bits(&oh), lh.iter().map(|x| x.to_bits()).collect::<Vec<u32>>())
    };

    // One stream, re-poisoned before every launch so each launch must write everything.
    let s0 = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    let mut o = DeviceBuffer::from_slice(&poison_o).unwrap();
    let mut l = DeviceBuffer::from_slice(&poison_l).unwrap();
    let mut first: Option<(Vec<u32>, Vec<u32>)> = None;
    for n in 0..LAUNCHES {
        o.copy_from(&poison_o[..]).unwrap();
        l.copy_from(&poison_l[..]).unwrap();
        gpu.attention_forward(&s0, p, &q, &k, &v, &mut o, Some(&mut l)).unwrap();
        s0.synchronize().unwrap();
        let got = read(&o, &l);
        match &first {
            None => {
                let finite = got.0.iter().all(|&b| f32::from_bits(b).is_finite());
                assert!(finite, "{:?} {p:?}: output not finite (unwritten?)", T::DTYPE);
                first = Some(got);
            }
            Some(f) => {
                let (od, ld) = (diff(&f.0, &got.0), diff(&f.1, &got.1));
                assert!(od == 0 && ld == 0, "{:?} {p:?}: launch {n} differs from launch 0 in {od} outputs and {ld} lse values", T::DTYPE);
            }
        }
    }
    let first = first.unwrap();

    // Several streams, everything in flight at once, each launch with its own buffers.
    let streams: Vec<Stream> = (0..STREAMS).map(|_| Stream::new(StreamFlags::NON_BLOCKING, None).unwrap()).collect();
    let mut outs: Vec<(DeviceBuffer<T>, DeviceBuffer<f32>)> = (0..STREAMS * PER_STREAM)
        .map(|_| (DeviceBuffer::from_slice(&poison_o).unwrap(), DeviceBuffer::from_slice(&poison_l).unwrap()))
        .collect();
    for (i, (o, l)) in outs.iter_mut().enumerate() {
        gpu.attention_forward(&streams[i % STREAMS], p, &q, &k, &v, o, Some(l)).unwrap();
    }
    streams.iter().for_each(|s| s.synchronize().unwrap());
    for (i, (o, l)) in outs.iter().enumerate() {
        let got = read(o, l);
        let (od, ld) = (diff(&first.0, &got.0), diff(&first.1, &got.1));
        assert!(od == 0 && ld == 0, "{:?} {p:?}: launch {i} on stream {} differs in {od} outputs and {ld} lse values", T::DTYPE, i % STREAMS);
    }
    println!(
        "determinism {} {:?} b{} sq{} sk{} hq{} hkv{} d{} causal={}: {LAUNCHES} launches on one stream and {} in flight on {STREAMS} \
         streams bit-identical ({nq} outputs, {n_lse} lse each)",
        kernel_for(gpu, p, T::DTYPE),
        T::DTYPE,
        p.batch,
        p.seqlen_q,
        p.seqlen_k,
        p.heads_q,
        p.heads_kv,
        p.head_dim,
        p.causal,
        STREAMS * PER_STREAM
    );
}

/// The kernel `gpu` runs for `p` on `dtype` tensors.
fn kernel_for(gpu: &Gpu, p: &AttentionParams, dtype: DType) -> String {
    let (nq, nk) = (p.batch * p.seqlen_q * p.heads_q * p.head_dim, p.batch * p.seqlen_k * p.heads_kv * p.head_dim);
    let b = |ptr, len| BufferRef { ptr, len };
    let bufs = Buffers::new(dtype, b(1 << 40, nq), b(2 << 40, nk), b(3 << 40, nk), b(4 << 40, nq));
    gpu.plan_forward(p, &bufs).unwrap().kernel.to_string()
}

fn diff(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).filter(|(x, y)| x != y).count()
}

#[test]
fn identical_inputs_give_bit_identical_outputs() {
    let Some(gpu) = gpu_or_skip("identical_inputs_give_bit_identical_outputs") else { return };
    let shapes = [
        (params(2, 300, 517, 4, 128).heads_kv(2).causal(true), DType::F16),
        (params(1, 1037, 1037, 2, 64), DType::Bf16),
        (params(3, 77, 300, 8, 256).heads_kv(1).causal(true), DType::F16),
        (params(4, 1, 4096, 8, 128).heads_kv(2), DType::F16),
        (params(2, 200, 30, 2, 72).causal(true), DType::Bf16),
    ];
    // Auto runs the wgmma kernel on sm_90a GPUs; MmaSync the mma.sync one everywhere.
    for path in [KernelPath::Auto, KernelPath::MmaSync] {
        for (seed, (p, dtype)) in shapes.iter().enumerate() {
            let p = &p.clone().path(path).build().unwrap();
            match dtype {
                DType::F16 => case::<half::f16>(&gpu, p, seed as u64),
                DType::Bf16 => case::<half::bf16>(&gpu, p, seed as u64),
                _ => unreachable!("no kernels for {dtype:?}"),
            }
        }
    }
}
