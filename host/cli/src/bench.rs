//! Buffers for a benchmark row, and timing of forward launches with CUDA events: warm-up, then
//! the median of timed launches. On cudarc, whose driver library loads at run time, so the
//! command line starts (and says what is missing) on a machine without one.
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr};
use rand::Rng;

use flashrs::element::{fp8_from_f32, fp8_to_f32};
use flashrs::{Fp8, AttentionParams, BufferRef, Buffers, DType, DeviceArray, DeviceIndex, DeviceOffsets, Gpu, LaunchPlan, PagedKv, Pages, Strides, TensorLens};

use crate::mods::{self, ModSpec, RowMods};

/// Why benchmarking a row failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The library refused or failed the call.
    #[error(transparent)]
    Flashrs(#[from] flashrs::Error),
    /// A cudarc call (allocation, copy, event) failed.
    #[error("CUDA: {0}")]
    Cuda(#[from] cudarc::driver::DriverError),
    /// The row's sizes overflow.
    #[error("element counts overflow")]
    TooBig,
}

/// Shorthand for this module's results.
pub type Result<T, E = BenchError> = std::result::Result<T, E>;

/// The median (the mean of the middle two for an even count); `None` for no values.
pub fn median(xs: &[f64]) -> Option<f64> {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// Timings of one shape, in milliseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    /// Median over the timed iterations.
    pub median_ms: f64,
    /// Fastest timed iteration.
    pub min_ms: f64,
    /// Every timed iteration, in order.
    pub samples_ms: Vec<f64>,
}

impl Timing {
    /// From per-iteration samples.
    pub fn from_samples(samples_ms: Vec<f64>) -> Self {
        let median_ms = median(&samples_ms).unwrap_or(f64::NAN);
        let min_ms = samples_ms.iter().copied().reduce(f64::min).unwrap_or(f64::NAN);
        Timing { median_ms, min_ms, samples_ms }
    }

    /// TFLOPS at the median time for `flops` operations.
    pub fn tflops(&self, flops: f64) -> f64 {
        flops / (self.median_ms * 1e-3) / 1e12
    }
}

/// How a benchmark row stores a batch of equal-length sequences besides the plain tensors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BenchLayout {
    /// Packed as one variable-length call, its offsets on the GPU (`Some(true)`) or the host.
    pub packed: Option<bool>,
    /// K and V in a paged cache of pages this many rows long.
    pub page_size: Option<usize>,
}

/// Device buffers holding random normal inputs for a shape (contiguous or as `params`'
/// strides; for a paged call, whole caches and a block table of shuffled pages), the index
/// arrays of its [`BenchLayout`], and the f32 arrays of its attention modifications.
pub struct BenchBuffers {
    stream: Arc<CudaStream>,
    dtype: DType,
    /// K's and V's 8-bit format, two elements to each of their `u16` words (`None`: `dtype`).
    kv: Option<Fp8>,
    /// Q's 8-bit format, packed likewise (`None`: `dtype`); `kv` is then the same.
    queries: Option<Fp8>,
    q: CudaSlice<u16>,
    k: CudaSlice<u16>,
    v: CudaSlice<u16>,
    o: CudaSlice<u16>,
    lse: CudaSlice<f32>,
    layout: BenchLayout,
    /// Paged calls: the block table, on the device and (to gather K and V back) on the host.
    table: Option<(CudaSlice<i32>, Vec<i32>, Pages)>,
    /// Variable-length calls with offsets on the GPU: `cu_seqlens_q` and `cu_seqlens_k`.
    offsets: Option<[CudaSlice<i32>; 2]>,
    /// The row's modifications and their values on the host.
    mods: RowMods,
    /// Their ALiBi slopes and sink logits on the GPU.
    mod_arrays: [Option<CudaSlice<f32>>; 2],
    /// The block mask's counts, indices, full counts and full indices.
    block_arrays: Option<[CudaSlice<i32>; 4]>,
}

/// A backward row's gradient buffers ([`BenchBuffers::grads`]).
pub struct GradBench {
    stream: Arc<CudaStream>,
    dout: CudaSlice<u16>,
    dq: CudaSlice<u16>,
    dk: CudaSlice<u16>,
    dv: CudaSlice<u16>,
    /// The sinks' gradient, for a call with sinks.
    dsinks: Option<CudaSlice<f32>>,
}

impl GradBench {
    /// The buffers as the planner sees them.
    pub fn refs(&self) -> flashrs::GradBuffers {
        let s = &self.stream;
        let r = |b: &CudaSlice<u16>| BufferRef::new(b.device_ptr(s).0, b.len());
        let g = flashrs::GradBuffers::new(r(&self.dout), r(&self.dq), r(&self.dk), r(&self.dv));
        match &self.dsinks {
            Some(d) => g.dsinks(BufferRef::new(d.device_ptr(s).0, d.len())),
            None => g,
        }
    }
}

/// Random normal values drawn afresh for each buffer; beyond this many they repeat. Drawing
/// every element of a decode row's KV cache (billions of elements at batch 64, 128k keys) one
/// by one takes minutes of host time, and the timing depends on values being random, not on
/// their never repeating.
const RANDOM_BLOCK: usize = 1 << 24;

fn random_bits(dtype: DType, n: usize) -> Vec<u16> {
    let mut rng = rand::rng();
    // Random data, never zeros: zeros run faster than real data on tensor cores.
    let block: Vec<u16> = (0..n.min(RANDOM_BLOCK))
        .map(|_| {
            let x: f32 = rng.sample(rand_distr::StandardNormal);
            match dtype {
                DType::Bf16 => half::bf16::from_f32(x).to_bits(),
                _ => half::f16::from_f32(x).to_bits(),
            }
        })
        .collect();
    block.iter().copied().cycle().take(n).collect()
}

/// `n` FP8 elements of format `kv` (standard normal values rounded through f16), packed two
/// to a word. The rounding goes through a table of every f16's FP8 code: converting each of a
/// block's 2^25 values on its own took seconds per buffer.
fn random_fp8_words(kv: Fp8, n: usize) -> Vec<u16> {
    let table: Vec<u8> = (0..=u16::MAX).map(|b| fp8_from_f32(kv, half::f16::from_bits(b).to_f32())).collect();
    let mut rng = rand::rng();
    let mut draw = || table[half::f16::from_f32(rng.sample(rand_distr::StandardNormal)).to_bits() as usize];
    let block: Vec<u16> = (0..n.div_ceil(2).min(RANDOM_BLOCK)).map(|_| u16::from_le_bytes([draw(), draw()])).collect();
    block.iter().copied().cycle().take(n.div_ceil(2)).collect()
}

impl BenchBuffers {
    /// Allocates and fills buffers of `dtype` for the fixed-length call `p` on `ctx`'s default
    /// stream (K and V of `kv` where given; Q, K and V of `queries` where given, the output
    /// staying `dtype`), stored as `layout` says, with the arrays `mods` needs (`p` carries its
    /// window and softcap already: see [`ModSpec::scalars`]).
    pub fn new(ctx: &Arc<CudaContext>, p: &AttentionParams, dtype: DType, kv: Option<Fp8>, queries: Option<Fp8>, layout: BenchLayout, mods: ModSpec) -> Result<Self> {
        let kv = queries.or(kv);
        let stream = ctx.default_stream();
        let too_big = || BenchError::TooBig;
        let pages = match layout.page_size {
            Some(n) => Some(Pages::for_batch(p.batch, p.seqlen_k, n).ok_or_else(too_big)?),
            None => None,
        };
        let lens = buffer_lens(p, pages)?;
        let table = match pages {
            Some(pg) => {
                // Every sequence's pages scattered over the cache, as a long-running server's are.
                let mut ids: Vec<i32> = (0..pg.num_pages as i32).collect();
                rand::seq::SliceRandom::shuffle(&mut ids[..], &mut rand::rng());
                ids.resize(p.batch * pg.pages_per_seq, 0);
                Some((stream.clone_htod(&ids)?, ids, pg))
            }
            None => None,
        };
        // The benchmark's variable-length rows are the batch's equal-length sequences packed:
        // exactly the contiguous batch's rows.
        let offsets = match layout.packed {
            Some(true) => Some([stream.clone_htod(&equal_offsets(p.batch, p.seqlen_q))?, stream.clone_htod(&equal_offsets(p.batch, p.seqlen_k))?]),
            _ => None,
        };
        let mods = RowMods::new(mods, p.heads_q, p.seqlen_q, p.seqlen_k);
        let upload = |values: &Option<Vec<f32>>| values.as_ref().map(|v| stream.clone_htod(v)).transpose();
        let mod_arrays = [upload(&mods.slopes)?, upload(&mods.sinks)?];
        let block_arrays = match &mods.blocks {
            Some(m) => {
                m.check()?;
                Some([stream.clone_htod(&m.counts)?, stream.clone_htod(&m.indices)?, stream.clone_htod(&m.full_counts)?, stream.clone_htod(&m.full_indices)?])
            }
            None => None,
        };
        let buffers = BenchBuffers {
            q: stream.clone_htod(&queries.map_or_else(|| random_bits(dtype, lens.q), |f| random_fp8_words(f, lens.q)))?,
            k: stream.clone_htod(&kv.map_or_else(|| random_bits(dtype, lens.k), |kv| random_fp8_words(kv, lens.k)))?,
            v: stream.clone_htod(&kv.map_or_else(|| random_bits(dtype, lens.v), |kv| random_fp8_words(kv, lens.v)))?,
            o: stream.alloc_zeros(lens.out)?,
            lse: stream.alloc_zeros(lens.lse)?,
            stream: stream.clone(),
            dtype,
            kv,
            queries,
            layout,
            table,
            offsets,
            mods,
            mod_arrays,
            block_arrays,
        };
        // The copies were queued on the default stream; the timed launches run on another.
        stream.synchronize()?;
        Ok(buffers)
    }

    /// The fixed-length call `p` (the one these buffers were made for) in their layout, its
    /// index arrays and modification arrays borrowed from these buffers.
    pub fn params<'a>(&'a self, p: &AttentionParams<'a>) -> AttentionParams<'a> {
        let [slopes, sinks] = &self.mod_arrays;
        let blocks = match (&self.mods.blocks, &self.block_arrays) {
            // Checked when uploaded (`BenchBuffers::new`), so `on_device` cannot refuse it here.
            (Some(m), Some([c, i, fc, fi])) => m.on_device(DeviceIndex::new(c), DeviceIndex::new(i), DeviceIndex::new(fc), DeviceIndex::new(fi)).ok(),
            _ => None,
        };
        let mut b = mods::with_arrays(p.to_builder(), slopes.as_ref().map(DeviceArray::new), sinks.as_ref().map(DeviceArray::new), blocks);
        b = match (self.layout.packed, &self.offsets) {
            (Some(true), Some([q, k])) => {
                let (total_q, total_k) = (p.batch * p.seqlen_q, p.batch * p.seqlen_k);
                b.varlen_device(DeviceOffsets::new(DeviceIndex::new(q), total_q).keys(DeviceIndex::new(k), total_k))
            }
            (Some(_), _) => b.varlen(&equal_offsets(p.batch, p.seqlen_q), &equal_offsets(p.batch, p.seqlen_k)),
            (None, _) => b,
        };
        if let Some((t, _, pages)) = &self.table {
            b = b.paged(PagedKv::new(*pages, DeviceIndex::new(t)));
        }
        b.build().expect("complete parameters stay complete")
    }

    /// The row's modifications with the values its arrays hold.
    pub fn mods(&self) -> &RowMods {
        &self.mods
    }

    /// The buffers as the planner sees them (`with_lse`: also write the log-sum-exp).
    pub fn refs(&self, with_lse: bool) -> Buffers {
        let r = |ptr: u64, len: usize| BufferRef::new(ptr, len);
        let s = &self.stream;
        // FP8 tensors count their bytes, two to a word.
        let per_word = if self.kv.is_some() { 2 } else { 1 };
        let q_per_word = if self.queries.is_some() { 2 } else { 1 };
        let (k, v) = (r(self.k.device_ptr(s).0, per_word * self.k.len()), r(self.v.device_ptr(s).0, per_word * self.v.len()));
        let b = Buffers::new(self.dtype, r(self.q.device_ptr(s).0, q_per_word * self.q.len()), k, v, r(self.o.device_ptr(s).0, self.o.len()));
        let b = match (self.queries, self.kv) {
            (Some(f), _) => b.fp8_queries(f),
            (None, Some(kv)) => b.kv(kv),
            (None, None) => b,
        };
        if with_lse { b.lse(r(self.lse.device_ptr(s).0, self.lse.len())) } else { b }
    }

    /// dO (random) and zeroed dQ, dK, dV for a backward row, laid out like the output, Q, K and
    /// V.
    pub fn grads(&self, ctx: &Arc<CudaContext>) -> Result<GradBench> {
        let stream = ctx.default_stream();
        let g = GradBench {
            dout: stream.clone_htod(&random_bits(self.dtype, self.o.len()))?,
            dq: stream.alloc_zeros(self.q.len())?,
            dk: stream.alloc_zeros(self.k.len())?,
            dv: stream.alloc_zeros(self.v.len())?,
            dsinks: self.mod_arrays[1].as_ref().map(|sinks| stream.alloc_zeros(sinks.len())).transpose()?,
            stream: stream.clone(),
        };
        stream.synchronize()?;
        Ok(g)
    }

    /// Copies the output back as f32 (for spot checks).
    pub fn output_f32(&self) -> Result<Vec<f32>> {
        Ok(self.stream.clone_dtoh(&self.o)?.into_iter().map(|b| widen(self.dtype, b)).collect())
    }

    /// Copies Q's, K's and V's bytes back as uploaded, where all three are FP8: one byte an
    /// element in their buffers' own layout, a word's padding byte after an odd count. `None`
    /// for 16-bit queries, and for a paged cache (which FP8 queries never read), whose bytes
    /// are pages rather than the batch's rows.
    pub fn fp8_bytes(&self) -> Result<Option<[Vec<u8>; 3]>> {
        if self.queries.is_none() || self.table.is_some() {
            return Ok(None);
        }
        // Two elements to a word, the first in its low byte (as `inputs_f32` decodes them).
        let bytes = |b: &CudaSlice<u16>| -> Result<Vec<u8>> { Ok(self.stream.clone_dtoh(b)?.into_iter().flat_map(u16::to_le_bytes).collect()) };
        Ok(Some([bytes(&self.q)?, bytes(&self.k)?, bytes(&self.v)?]))
    }

    /// Copies the inputs back as f32, contiguous in their buffers' own layout; a paged cache
    /// is gathered through its block table into contiguous `[batch, seqlen_k, heads_kv, d]`
    /// (`p`'s shape: `d` is `head_dim` for K, `head_dim_v` for V).
    pub fn inputs_f32(&self, p: &AttentionParams) -> Result<[Vec<f32>; 3]> {
        let conv = |b: &CudaSlice<u16>| -> Result<Vec<f32>> { Ok(self.stream.clone_dtoh(b)?.into_iter().map(|x| widen(self.dtype, x)).collect()) };
        let conv_fp8 = |b: &CudaSlice<u16>, fp8: Option<Fp8>| -> Result<Vec<f32>> {
            match fp8 {
                Some(f) => Ok(self.stream.clone_dtoh(b)?.into_iter().flat_map(|w| w.to_le_bytes()).map(|x| fp8_to_f32(f, x)).collect()),
                None => conv(b),
            }
        };
        let [q, k, v] = [conv_fp8(&self.q, self.queries)?, conv_fp8(&self.k, self.kv)?, conv_fp8(&self.v, self.kv)?];
        let Some((_, table, pg)) = &self.table else { return Ok([q, k, v]) };
        let pg = *pg;
        let gather = |cache: &[f32], d: usize| -> Vec<f32> {
            let row = p.heads_kv * d;
            let mut out = Vec::with_capacity(p.batch * p.seqlen_k * row);
            for b in 0..p.batch {
                for r in 0..p.seqlen_k {
                    let page = table[b * pg.pages_per_seq + r / pg.page_size] as usize;
                    out.extend_from_slice(&cache[(page * pg.page_size + r % pg.page_size) * row..][..row]);
                }
            }
            out
        };
        Ok([q, gather(&k, p.head_dim), gather(&v, p.head_dim_v())])
    }
}

/// Elements of a fixed-length call's buffers as [`BenchBuffers::new`] allocates them, `p`'s
/// strides followed, K and V as whole caches of `pages` where given: K (and Q) `head_dim`
/// wide, V (and the output) `head_dim_v` wide. Each holds one element at least, since a
/// zero-length allocation has no address to plan with.
pub fn buffer_lens(p: &AttentionParams, pages: Option<Pages>) -> Result<TensorLens> {
    let too_big = || BenchError::TooBig;
    let (d, dv) = (p.head_dim, p.head_dim_v());
    let [qs, ks, vs, os] = p.tensor_strides()?;
    let extent = |dims, s: Strides| s.extent(dims).map(|n| n.max(1)).ok_or_else(too_big);
    let kv = |d: usize, s: Strides| match pages {
        // A paged cache holds whole contiguous pages: `[num_pages, page_size, heads_kv, d]`.
        Some(pg) => pg.cache_len(p.heads_kv, d).map(|n| n.max(1)).ok_or_else(too_big),
        None => extent([p.batch, p.seqlen_k, p.heads_kv, d], s),
    };
    Ok(TensorLens {
        q: extent([p.batch, p.seqlen_q, p.heads_q, d], qs)?,
        k: kv(d, ks)?,
        v: kv(dv, vs)?,
        out: extent([p.batch, p.seqlen_q, p.heads_q, dv], os)?,
        lse: (p.batch * p.heads_q * p.seqlen_q).max(1),
    })
}

/// The f32 value of a 16-bit element of `dtype` given by its bits.
fn widen(dtype: DType, bits: u16) -> f32 {
    match dtype {
        DType::Bf16 => half::bf16::from_bits(bits).to_f32(),
        _ => half::f16::from_bits(bits).to_f32(),
    }
}

/// What the two events around a timed launch see.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TimingMode {
    /// The call on an idle stream: the host's work before the kernel starts (the driver's
    /// launch, a few microseconds) counts, as for a caller that waits for each call.
    #[default]
    Call,
    /// The call queued behind a spin kernel ([`QUEUE_HOLD_NS`]) that holds the stream while
    /// the host enqueues the events and the call: the GPU's time alone (the kernel and its
    /// start on the GPU), as for a call amid other queued work or in a graph.
    Queued,
}

impl TimingMode {
    /// `call` or `queued`.
    pub fn name(self) -> &'static str {
        match self {
            TimingMode::Call => "call",
            TimingMode::Queued => "queued",
        }
    }
}

/// How long [`TimingMode::Queued`] holds the stream before each timed call: well beyond the
/// host's enqueueing of two events and a launch.
pub const QUEUE_HOLD_NS: u64 = 50_000;

/// Offsets of `batch` sequences of `len` rows each, packed.
fn equal_offsets(batch: usize, len: usize) -> Vec<i32> {
    (0..=batch).map(|b| (b * len) as i32).collect()
}

/// Enqueues the spin kernel (`bench_spin`), holding `stream` for `ns` nanoseconds.
fn hold_stream(gpu: &Gpu, stream: &CudaStream, ns: u64) -> Result<()> {
    let f = gpu.raw_function("bench_spin")?;
    let mut ns = ns;
    let mut args = [&mut ns as *mut u64 as *mut std::ffi::c_void];
    // SAFETY: one u64 argument, as `bench_spin` takes; a valid stream of this context.
    unsafe { cudarc::driver::result::launch_kernel(f as _, (1, 1, 1), (1, 1, 1), 0, stream.cu_stream(), &mut args)? };
    Ok(())
}

/// Times `plan` on a fresh stream of `ctx`: `warmup` untimed launches, then `iters` launches
/// each between two events, as `mode` says.
pub fn time_plan(ctx: &Arc<CudaContext>, gpu: &Gpu, plan: &LaunchPlan, warmup: usize, iters: usize, mode: TimingMode) -> Result<Timing> {
    // SAFETY: the plan was validated against live buffers the caller keeps alive.
    time_launch(ctx, gpu, &|raw| unsafe { gpu.launch(raw, plan) }, warmup, iters, mode)
}

/// [`time_plan`] for any launch: `launch` queues the work on the raw stream it is given.
pub fn time_launch(ctx: &Arc<CudaContext>, gpu: &Gpu, launch: &dyn Fn(*mut std::ffi::c_void) -> flashrs::Result<()>, warmup: usize, iters: usize, mode: TimingMode) -> Result<Timing> {
    let stream = ctx.new_stream()?;
    let raw = stream.cu_stream() as *mut std::ffi::c_void;
    for _ in 0..warmup {
        launch(raw)?;
    }
    // Timing events (cudarc's default events do not time).
    let timed = || ctx.new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT));
    let (start, stop) = (timed()?, timed()?);
    let mut samples = Vec::with_capacity(iters);
    for _ in 0..iters {
        if mode == TimingMode::Queued {
            hold_stream(gpu, &stream, QUEUE_HOLD_NS)?;
        }
        start.record(&stream)?;
        launch(raw)?;
        stop.record(&stream)?;
        stop.synchronize()?;
        samples.push(start.elapsed_ms(&stop)? as f64);
    }
    Ok(Timing::from_samples(samples))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v_and_the_output_are_sized_by_head_dim_v() {
        let b = AttentionParams::builder().batch(2).seqlen_q(100).seqlen_k(300).heads_q(8).heads_kv(2).head_dim(192);
        let p = b.clone().head_dim_v(128).build().unwrap();
        let (q_rows, kv_rows) = (2 * 100 * 8, 2 * 300 * 2);
        let want = TensorLens { q: q_rows * 192, k: kv_rows * 192, v: kv_rows * 128, out: q_rows * 128, lse: q_rows };
        assert_eq!(buffer_lens(&p, None).unwrap(), want);
        assert_eq!(buffer_lens(&p, None).unwrap(), p.contiguous_lens().unwrap());
        let bhsd = p.to_builder().dim_order(flashrs::DimOrder::Bhsd).build().unwrap();
        assert_eq!(buffer_lens(&bhsd, None).unwrap(), want);
        // Paged: whole caches, each as wide as its tensor.
        let pages = Pages::for_batch(2, 300, 64).unwrap();
        let paged = buffer_lens(&p, Some(pages)).unwrap();
        assert_eq!((paged.k, paged.v), (pages.cache_len(2, 192).unwrap(), pages.cache_len(2, 128).unwrap()));
        assert_eq!((paged.q, paged.out), (want.q, want.out));
        // V as wide as K: the sizes the buffers always had.
        let plain = b.build().unwrap();
        let n = buffer_lens(&plain, None).unwrap();
        assert_eq!((n.k, n.v, n.out), (n.k, n.k, n.q));
        assert_eq!(n, plain.contiguous_lens().unwrap());
    }

    #[test]
    fn random_bits_are_nonzero_and_repeat_only_past_the_block() {
        let small = random_bits(DType::F16, 1000);
        assert_eq!(small.len(), 1000);
        assert!(small.iter().filter(|&&b| b == 0).count() < 10, "random normals are almost never 0");
        let big = random_bits(DType::Bf16, RANDOM_BLOCK + 5);
        assert_eq!(big.len(), RANDOM_BLOCK + 5);
        assert_eq!(big[RANDOM_BLOCK..], big[..5]);
    }

    #[test]
    fn random_fp8_words_hold_finite_unit_normal_values() {
        for f in [Fp8::E4m3, Fp8::E5m2] {
            let words = random_fp8_words(f, 20001);
            assert_eq!(words.len(), 10001);
            let x: Vec<f64> = words.iter().flat_map(|w| w.to_le_bytes()).map(|b| fp8_to_f32(f, b) as f64).collect();
            assert!(x.iter().all(|v| v.is_finite()), "{f:?}");
            let mean = x.iter().sum::<f64>() / x.len() as f64;
            let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / x.len() as f64;
            assert!(mean.abs() < 0.05 && (var - 1.0).abs() < 0.1, "{f:?}: mean {mean}, variance {var}");
        }
    }
}
