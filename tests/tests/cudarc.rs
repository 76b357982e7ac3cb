//! The cudarc backend against the cust one: the same calls through `Gpu::from_cudarc` with
//! cudarc's slices and streams give bit-identical outputs and log-sum-exps to `Gpu::new` with
//! cust's. On the cudarc side the inputs and index arrays are written on another stream than
//! the call's, so the launch must wait for them through cudarc's event tracking, which the
//! typed entry point feeds. The backward pass likewise: the same gradients through both
//! backends; and block masks built on the GPU from a dense mask.
use cudarc::driver::{CudaContext, DeviceRepr, ValidAsZeroBits};
use cust::memory::{CopyDestination, DeviceBuffer, DeviceCopy};
use cust::stream::{Stream, StreamFlags};
use flashrs::{AttentionParams, DeviceIndex, DeviceOffsets, Element, Gpu, PagedKv, Pages};
use flashrs_tests::mods::host_lists;
use flashrs_tests::{case_rng, gpu_or_skip, params};
use rand::Rng;

/// One call's inputs on the host, and the index arrays of its layout.
struct Inputs {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    /// The two index arrays: a packed call's `cu_seqlens_q` and `cu_seqlens_k`, or a paged
    /// call's block table and key counts.
    index: Option<[Vec<i32>; 2]>,
    /// A paged call's pages; `None`: the index arrays (if any) are offsets.
    pages: Option<Pages>,
    n_lse: usize,
}

/// `base` with the layout its index arrays `idx` give it.
fn with_layout<'a>(base: &AttentionParams<'static>, x: &Inputs, idx: [DeviceIndex<'a>; 2]) -> AttentionParams<'a> {
    let b = base.to_builder();
    let b = match (&x.index, x.pages) {
        (Some(_), Some(pages)) => b.paged(PagedKv::new(pages, idx[0]).seqused_k(idx[1])),
        (Some([q, k]), None) => b.varlen_device(DeviceOffsets::new(idx[0], *q.last().unwrap() as usize).keys(idx[1], *k.last().unwrap() as usize)),
        (None, _) => b,
    };
    b.build().unwrap()
}

/// Output and log-sum-exp as bits.
type Bits = (Vec<u32>, Vec<u32>);

fn run_cust<T: Element + DeviceCopy>(gpu: &Gpu, base: &AttentionParams<'static>, x: &Inputs) -> Bits {
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    let up = |v: &[f32]| DeviceBuffer::from_slice(&v.iter().map(|&f| T::from_f32(f)).collect::<Vec<T>>()).unwrap();
    let (q, k, v) = (up(&x.q), up(&x.k), up(&x.v));
    let index = x.index.as_ref().map(|[a, b]| [DeviceBuffer::from_slice(a).unwrap(), DeviceBuffer::from_slice(b).unwrap()]);
    // SAFETY: planning-only stand-ins for a call without index arrays: never read.
    let none = || unsafe { DeviceIndex::from_raw(0, 0) };
    let idx = index.as_ref().map_or([none(), none()], |[a, b]| [DeviceIndex::new(a), DeviceIndex::new(b)]);
    let p = with_layout(base, x, idx);
    let mut out = DeviceBuffer::from_slice(&vec![T::from_f32(f32::NAN); x.q.len()]).unwrap();
    let mut lse = DeviceBuffer::from_slice(&vec![f32::NAN; x.n_lse]).unwrap();
    gpu.attention_forward(&stream, &p, &q, &k, &v, &mut out, Some(&mut lse)).unwrap();
    stream.synchronize().unwrap();
    let mut o = vec![T::default(); x.q.len()];
    out.copy_to(&mut o[..]).unwrap();
    (o.iter().map(|v| v.to_f32().to_bits()).collect(), lse.as_host_vec().unwrap().iter().map(|v| v.to_bits()).collect())
}

fn run_cudarc<T: Element + DeviceRepr + ValidAsZeroBits>(ctx: &std::sync::Arc<CudaContext>, gpu: &Gpu, base: &AttentionParams<'static>, x: &Inputs) -> Bits {
    // Inputs written on one stream, the call queued on another, no synchronisation between.
    let (writer, compute) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let up = |v: &[f32]| writer.clone_htod(&v.iter().map(|&f| T::from_f32(f)).collect::<Vec<T>>()).unwrap();
    let (q, k, v) = (up(&x.q), up(&x.k), up(&x.v));
    let index = x.index.as_ref().map(|[a, b]| [writer.clone_htod(a).unwrap(), writer.clone_htod(b).unwrap()]);
    // SAFETY: as in `run_cust`.
    let none = || unsafe { DeviceIndex::from_raw(0, 0) };
    let idx = index.as_ref().map_or([none(), none()], |[a, b]| [DeviceIndex::new(a), DeviceIndex::new(b)]);
    let p = with_layout(base, x, idx);
    let mut out = writer.clone_htod(&vec![T::from_f32(f32::NAN); x.q.len()]).unwrap();
    let mut lse = writer.clone_htod(&vec![f32::NAN; x.n_lse]).unwrap();
    gpu.attention_forward(&compute, &p, &q, &k, &v, &mut out, Some(&mut lse)).unwrap();
    let o = compute.clone_dtoh(&out).unwrap();
    (o.iter().map(|v| v.to_f32().to_bits()).collect(), compute.clone_dtoh(&lse).unwrap().iter().map(|v| v.to_bits()).collect())
}

/// Random inputs for `p` (fixed-length), with `index`/`pages` describing its layout.
fn inputs(p: &AttentionParams, index: Option<[Vec<i32>; 2]>, pages: Option<Pages>) -> Inputs {
    let (mut rng, _) = case_rng();
    let n = p.contiguous_lens().unwrap();
    let (nq, n_lse) = (n.q, n.lse);
    let nk = match pages {
        Some(pg) => pg.cache_len(p.heads_kv, p.head_dim).unwrap(),
        None => n.k,
    };
    let mut random = |n: usize| (0..n).map(|_| rng.random_range(-2.0f32..2.0)).collect::<Vec<f32>>();
    Inputs { q: random(nq), k: random(nk), v: random(nk), index, pages, n_lse }
}

#[test]
fn cudarc_and_cust_give_the_same_bits() {
    let Some(gpu) = gpu_or_skip("cudarc_and_cust_give_the_same_bits") else { return };
    let ctx = CudaContext::new(0).unwrap();
    let gpu_c = Gpu::from_cudarc(&ctx).unwrap();
    assert_eq!(gpu_c.raw_context(), gpu.raw_context(), "both open the primary context");

    let mut cases: Vec<(String, AttentionParams<'static>, Inputs)> = Vec::new();
    // Fixed length: causal GQA prefill (Hopper kernels on an H100), and a split-KV decode.
    let prefill = params(2, 300, 300, 8, 128).heads_kv(2).causal(true).build().unwrap();
    let decode = params(3, 1, 5000, 16, 64).heads_kv(4).build().unwrap();
    cases.push(("prefill".into(), prefill.clone(), inputs(&prefill, None, None)));
    cases.push(("decode".into(), decode.clone(), inputs(&decode, None, None)));
    // Packed sequences with their offsets on the GPU.
    let cu: Vec<i32> = vec![0, 100, 100, 357, 400];
    let packed = params(4, 257, 257, 4, 96).causal(true).build().unwrap();
    let total = *cu.last().unwrap() as usize;
    let mut x = inputs(&params(1, total, total, 4, 96).build().unwrap(), Some([cu.clone(), cu]), None);
    x.n_lse = 4 * total;
    cases.push(("varlen".into(), packed, x));
    // A paged cache: shuffled pages, per-sequence key counts.
    let pages = Pages::for_batch(3, 700, 16).unwrap();
    let mut table: Vec<i32> = (0..pages.num_pages as i32).collect();
    table.reverse();
    let paged = params(3, 1, 700, 8, 128).heads_kv(8).build().unwrap();
    cases.push(("paged".into(), paged.clone(), inputs(&paged, Some([table, vec![700, 1, 333]]), Some(pages))));

    for (name, p, x) in &cases {
        let a = run_cust::<half::f16>(&gpu, p, x);
        let b = run_cudarc::<half2::f16>(&ctx, &gpu_c, p, x);
        assert!(a.0.iter().all(|&o| !f32::from_bits(o).is_nan()), "{name}: cust left output unwritten");
        assert_eq!(a, b, "{name}: f16 outputs or lse differ between the cust and cudarc paths");
        println!("{name}: {} outputs and {} lse bit-identical (f16)", a.0.len(), a.1.len());
    }
    let (_, p, x) = &cases[0];
    assert_eq!(run_cust::<half::bf16>(&gpu, p, x), run_cudarc::<half2::bf16>(&ctx, &gpu_c, p, x), "bf16 prefill differs");
    println!("prefill: bit-identical (bf16)");
}

/// dQ, dK and dV as bits.
type Grads = [Vec<u32>; 3];

/// One backward call's inputs on the host: Q, K, V, the forward's output and log-sum-exp, dO.
struct BwdInputs {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    o: Vec<f32>,
    lse: Vec<f32>,
    dout: Vec<f32>,
}

fn bits<T: Element>(v: &[T]) -> Vec<u32> {
    v.iter().map(|x| x.to_f32().to_bits()).collect()
}

/// Random Q, K, V and dO for `p`, with the forward's output and log-sum-exp from the cust path.
fn bwd_inputs<T: Element + DeviceCopy>(gpu: &Gpu, p: &AttentionParams<'static>) -> BwdInputs {
    let x = inputs(p, None, None);
    let (o_bits, lse_bits) = run_cust::<T>(gpu, p, &x);
    let (mut rng, _) = case_rng();
    let dout = (0..x.q.len()).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let f = |b: Vec<u32>| b.into_iter().map(f32::from_bits).collect::<Vec<f32>>();
    BwdInputs { q: x.q, k: x.k, v: x.v, o: f(o_bits), lse: f(lse_bits), dout }
}

fn bwd_cust<T: Element + DeviceCopy>(gpu: &Gpu, p: &AttentionParams, x: &BwdInputs) -> Grads {
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    let up = |v: &[f32]| DeviceBuffer::from_slice(&v.iter().map(|&f| T::from_f32(f)).collect::<Vec<T>>()).unwrap();
    let (q, k, v, o, dout) = (up(&x.q), up(&x.k), up(&x.v), up(&x.o), up(&x.dout));
    let lse = DeviceBuffer::from_slice(&x.lse).unwrap();
    let (mut dq, mut dk, mut dv) = (up(&vec![f32::NAN; x.q.len()]), up(&vec![f32::NAN; x.k.len()]), up(&vec![f32::NAN; x.v.len()]));
    gpu.attention_backward(&stream, p, &q, &k, &v, &o, &lse, &dout, &mut dq, &mut dk, &mut dv).unwrap();
    stream.synchronize().unwrap();
    let host = |b: &DeviceBuffer<T>| {
        let mut h = vec![T::default(); b.len()];
        b.copy_to(&mut h[..]).unwrap();
        bits(&h)
    };
    [host(&dq), host(&dk), host(&dv)]
}

fn bwd_cudarc<T: Element + DeviceRepr + ValidAsZeroBits>(ctx: &std::sync::Arc<CudaContext>, gpu: &Gpu, p: &AttentionParams, x: &BwdInputs) -> Grads {
    // Inputs written on one stream, the call queued on another, no synchronisation between.
    let (writer, compute) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let up = |v: &[f32]| writer.clone_htod(&v.iter().map(|&f| T::from_f32(f)).collect::<Vec<T>>()).unwrap();
    let (q, k, v, o, dout) = (up(&x.q), up(&x.k), up(&x.v), up(&x.o), up(&x.dout));
    let lse = writer.clone_htod(&x.lse).unwrap();
    let (mut dq, mut dk, mut dv) = (up(&vec![f32::NAN; x.q.len()]), up(&vec![f32::NAN; x.k.len()]), up(&vec![f32::NAN; x.v.len()]));
    gpu.attention_backward(&compute, p, &q, &k, &v, &o, &lse, &dout, &mut dq, &mut dk, &mut dv).unwrap();
    [bits(&compute.clone_dtoh(&dq).unwrap()), bits(&compute.clone_dtoh(&dk).unwrap()), bits(&compute.clone_dtoh(&dv).unwrap())]
}

#[test]
fn cudarc_backward_matches_cust() {
    let Some(gpu) = gpu_or_skip("cudarc_backward_matches_cust") else { return };
    let ctx = CudaContext::new(0).unwrap();
    let gpu_c = Gpu::from_cudarc(&ctx).unwrap();
    let base = params(2, 300, 300, 8, 128).heads_kv(2).causal(true);
    for deterministic in [false, true] {
        let p = base.clone().deterministic(deterministic).build().unwrap();
        let x = bwd_inputs::<half::f16>(&gpu, &p);
        let a = bwd_cust::<half::f16>(&gpu, &p, &x);
        let b = bwd_cudarc::<half2::f16>(&ctx, &gpu_c, &p, &x);
        for (name, g) in ["dq", "dk", "dv"].iter().zip(&a) {
            assert!(g.iter().all(|&v| f32::from_bits(v).is_finite()), "deterministic={deterministic}: cust left {name} unwritten");
        }
        // dK and dV are deterministic in every mode; dQ only in deterministic mode (its parts
        // are added in any order otherwise), so there it may differ by rounding.
        assert_eq!(a[1..], b[1..], "deterministic={deterministic}: dk or dv differ between the cust and cudarc paths");
        if deterministic {
            assert_eq!(a[0], b[0], "deterministic dq differs between the cust and cudarc paths");
        } else {
            let f = |v: &[u32]| v.iter().map(|&b| f32::from_bits(b)).collect::<Vec<f32>>();
            let (da, db) = (f(&a[0]), f(&b[0]));
            let scale = da.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let diff = da.iter().zip(&db).fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
            assert!(scale > 0.0 && diff <= 2e-3 * scale, "dq differs by {diff} (max |dq| {scale})");
        }
        println!("backward deterministic={deterministic}: dk, dv bit-identical, dq {} (f16)", if deterministic { "bit-identical" } else { "within rounding" });
    }
}

/// The block-mask builder through cudarc: the dense mask written on one stream, the lists built
/// on another (the build waits for the mask through cudarc's events), then an attention call
/// over the returned mask on a third; the lists are the host builder's and the output the cust
/// call's over the host-built mask, bit for bit.
#[test]
fn cudarc_builds_block_masks() {
    let Some(gpu) = gpu_or_skip("cudarc_builds_block_masks") else { return };
    let ctx = CudaContext::new(0).unwrap();
    let gpu_c = Gpu::from_cudarc(&ctx).unwrap();
    let (b, h, s, d) = (1, 2, 600, 64);
    let (mut rng, seed) = case_rng();
    // A band of 200 keys before the diagonal, per head a different offset of its start.
    let dense: Vec<u8> = (0..b * h * s * s).map(|i| {
        let (head, r, k) = (i / (s * s), i / s % s, i % s);
        (k <= r && r - k < 200 + 90 * head) as u8
    }).collect();
    let host = host_lists(&dense, b, h, s, s);
    let shape = flashrs::DenseMaskShape::new(b, h, s, s).unwrap();
    let (writer, builder, compute) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let dense_c = writer.clone_htod(&dense).unwrap();
    let list = |n: usize| writer.clone_htod(&vec![-7i32; n]).unwrap();
    let (mut c, mut i, mut fc, mut fi) = (list(shape.counts_len()), list(shape.indices_len()), list(shape.counts_len()), list(shape.indices_len()));
    let mask = gpu_c.block_mask_from_dense(&builder, &dense_c, shape, &mut c, &mut i, &mut fc, &mut fi).unwrap();
    let p = params(b, s, s, h, d).causal(true).block_mask(mask).build().unwrap();
    let xf: Vec<f32> = (0..b * s * h * d).map(|_| rng.random_range(-2.0f32..2.0)).collect();
    let x2: Vec<half2::f16> = xf.iter().map(|&f| half2::f16::from_f32(f)).collect();
    let (q, k, v) = (writer.clone_htod(&x2).unwrap(), writer.clone_htod(&x2).unwrap(), writer.clone_htod(&x2).unwrap());
    let mut out = writer.clone_htod(&vec![half2::f16::from_f32(f32::NAN); x2.len()]).unwrap();
    gpu_c.attention_forward(&compute, &p, &q, &k, &v, &mut out, None).unwrap();
    let got_out: Vec<u16> = compute.clone_dtoh(&out).unwrap().iter().map(|v| v.to_bits()).collect();
    let lists = [&c, &i, &fc, &fi].map(|l| compute.clone_dtoh(l).unwrap());
    assert!(lists == [host.counts.clone(), host.indices.clone(), host.full_counts.clone(), host.full_indices.clone()], "seed {seed}: the lists differ from the host builder's");
    // The cust call over the host-built mask.
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    let up = |v: &[i32]| DeviceBuffer::from_slice(v).unwrap();
    let (hc, hi, hfc, hfi) = (up(&host.counts), up(&host.indices), up(&host.full_counts), up(&host.full_indices));
    let hm = host.on_device(DeviceIndex::new(&hc), DeviceIndex::new(&hi), DeviceIndex::new(&hfc), DeviceIndex::new(&hfi)).unwrap();
    let p = params(b, s, s, h, d).causal(true).block_mask(hm).build().unwrap();
    let x: Vec<half::f16> = xf.iter().map(|&f| half::f16::from_f32(f)).collect();
    let xd = DeviceBuffer::from_slice(&x).unwrap();
    let mut o = DeviceBuffer::from_slice(&vec![half::f16::from_f32(f32::NAN); x.len()]).unwrap();
    gpu.attention_forward(&stream, &p, &xd, &xd, &xd, &mut o, None).unwrap();
    stream.synchronize().unwrap();
    let mut want = vec![half::f16::ZERO; x.len()];
    o.copy_to(&mut want[..]).unwrap();
    assert!(got_out == want.iter().map(|v| v.to_bits()).collect::<Vec<u16>>(), "seed {seed}: the outputs differ");
    println!("ok   cudarc: {} blocks visited of {}, lists and output as cust's over the host-built mask", host.counts.iter().chain(&host.full_counts).sum::<i32>(), host.indices.len());
}
