//! Our rows on the GPU: buffers, optional verification against the CPU reference, timing.

use std::sync::Arc;

use cudarc::driver::CudaContext;
use flashrs::{Fp8, AttentionParams, BufferRef, Buffers, DType, DeviceArray, DeviceIndex, DeviceOffsets, DimOrder, Gpu, GradBuffers, Kernel, KernelPath, PagedKv, Pages, Target};
use flashrs_reference::{Problem, RefInputs};

use crate::bench::{BenchBuffers, BenchLayout, TimingMode, time_launch, time_plan};

use super::CliError;
use super::configs::{Config, tag};
use super::mods::{self, ModSpec};
use super::peer_check::{self, SharedInputs};
use super::record::{Implementation, Precision, Record};
use super::sweep::Shape;
use super::verify::{self, Tolerance};

/// A shape and the tile configurations to time on it (`None`: the library's default).
pub type Row = (Shape, Vec<Option<Config>>);

/// How every row runs.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Element type (with `fp8_queries`: the output's).
    pub dtype: DType,
    /// K's and V's 8-bit element type, read by `dtype` queries (`None`: `dtype`).
    pub kv: Option<Fp8>,
    /// Q's, K's and V's 8-bit element type, where the inputs are FP8 (`kv` is then `None`).
    pub fp8_queries: Option<Fp8>,
    /// Kernel path.
    pub path: KernelPath,
    /// Untimed launches.
    pub warmup: usize,
    /// Timed launches.
    pub iters: usize,
    /// Check outputs against the CPU reference first.
    pub verify: bool,
    /// With `verify`, on FP8 inputs: also write the row's inputs for FlashAttention-3 to be
    /// checked on ([`RowRun::shared`]), when the comparison runs it.
    pub share_inputs: bool,
    /// Split-KV count to force (`None`: the library's choice).
    pub num_splits: Option<usize>,
    /// Read K and V from a paged cache of pages this many rows long (`None`: contiguous).
    pub page_size: Option<usize>,
    /// `[batch, heads, seqlen, head_dim]` tensors instead of `[batch, seqlen, heads, head_dim]`.
    pub bhsd: bool,
    /// A variable-length call of the batch's (equal-length) sequences, packed.
    pub varlen: bool,
    /// The variable-length offsets on the GPU ([`Varlen::Device`]) rather than the host.
    pub device_offsets: bool,
    /// What the events around a timed launch see.
    pub timing: TimingMode,
    /// Time the backward pass.
    pub backward: bool,
    /// The backward pass in deterministic mode.
    pub deterministic: bool,
    /// Attention modifications of every row.
    pub mods: ModSpec,
}

impl Options {
    /// The element types of every row.
    pub fn precision(&self) -> Precision {
        Precision { out: self.dtype, fp8_inputs: self.fp8_queries }
    }

    /// Our fixed-length parameters for `shape` with `config` under these options (the
    /// benchmark's variable-length and paged rows are this batch, packed or paged: see
    /// [`Options::layout`]), with the window and softcap; ALiBi slopes and sinks are the
    /// buffers' to add ([`BenchBuffers::params`]).
    pub fn params(&self, shape: &Shape, config: Option<Config>) -> Result<AttentionParams<'static>, CliError> {
        let mut p = self.mods.scalars(shape.params(self.path, config));
        if let Some(n) = self.num_splits {
            p = p.num_splits(n);
        }
        if self.bhsd {
            p = p.dim_order(DimOrder::Bhsd);
        }
        if self.deterministic {
            p = p.deterministic(true);
        }
        p.build().map_err(|e| CliError::Row { row: shape.label(), source: e.into() })
    }

    /// How each row stores its batch besides the plain tensors.
    pub fn layout(&self) -> BenchLayout {
        BenchLayout { packed: self.varlen.then_some(self.device_offsets), page_size: self.page_size }
    }
}

/// Plans every row against stand-in buffers for an H100 (planning never touches the GPU), so
/// that a shape or configuration no kernel can take fails before the GPU is opened; a backward
/// row's backward pass too, which refuses some calls its forward takes (a paged cache, for
/// one). Each row is planned again for the GPU it runs on.
pub fn preflight(rows: &[Row], opts: &Options) -> Result<(), CliError> {
    // Aligned, disjoint (the planner refuses outputs that overlap inputs), and large enough for
    // any shape: 2^40 elements apart.
    let stand_in = |i: u64| BufferRef::new(i << 41, 1 << 40);
    // SAFETY: planning reads no index array.
    let index = |i: u64| unsafe { DeviceIndex::from_raw(i << 41, 1 << 40) };
    let bufs = Buffers::new(opts.dtype, stand_in(1), stand_in(2), stand_in(3), stand_in(4));
    let bufs = match (opts.fp8_queries, opts.kv) {
        (Some(f), _) => bufs.fp8_queries(f),
        (None, Some(kv)) => bufs.kv(kv),
        (None, None) => bufs,
    };
    // Last, where its f32 elements overlap nothing: a backward row's forward writes it.
    let bufs = if opts.backward { bufs.lse(stand_in(20)) } else { bufs };
    let grads = GradBuffers::new(stand_in(15), stand_in(16), stand_in(17), stand_in(18));
    // SAFETY: as for the index arrays.
    let array = |i: u64| unsafe { DeviceArray::<f32>::from_raw(i << 41, 1 << 40) };
    let (slopes, sinks) = (opts.mods.alibi.then(|| array(8)), opts.mods.sinks.then(|| array(9)));
    for (shape, configs) in rows {
        let blocks = opts.mods.block_mask(shape.seqlen_q, shape.seqlen_k).map(|m| m.on_device(index(10), index(11), index(12), index(13))).transpose();
        let blocks = blocks.map_err(|e| CliError::Row { row: shape.label(), source: e.into() })?;
        for &config in configs {
            let layout = opts.layout();
            let mut p = mods::with_arrays(opts.params(shape, config)?.to_builder(), slopes, sinks, blocks);
            if let Some(device) = layout.packed {
                let equal = |len: usize| (0..=shape.batch).map(|b| (b * len) as i32).collect::<Vec<_>>();
                let (total_q, total_k) = (shape.batch * shape.seqlen_q, shape.batch * shape.seqlen_k);
                p = match device {
                    true => p.varlen_device(DeviceOffsets::new(index(6), total_q).keys(index(7), total_k)),
                    false => p.varlen(&equal(shape.seqlen_q), &equal(shape.seqlen_k)),
                };
            }
            if let Some(page_size) = layout.page_size {
                let pages = Pages::for_batch(shape.batch, shape.seqlen_k, page_size)
                    .ok_or_else(|| CliError::Usage(format!("{}: page size {page_size} gives no page count", shape.label())))?;
                p = p.paged(PagedKv::new(pages, index(5)));
            }
            let planned = p.build().and_then(|p| {
                p.plan(&bufs, &Target::H100)?;
                if opts.backward {
                    p.plan_backward(&bufs, &grads, &Target::H100)?;
                }
                Ok(())
            });
            planned.map_err(|e| CliError::Row { row: shape.label(), source: e.into() })?;
        }
    }
    Ok(())
}

/// What one row produced.
#[derive(Debug)]
pub struct RowRun {
    /// Ours, a record per configuration.
    pub records: Vec<Record>,
    /// With [`Options::share_inputs`]: the first configuration's verified inputs, written for
    /// FlashAttention-3 to run on, or why they could not be (which costs FA3 its check, not
    /// the row).
    pub shared: Option<Result<SharedInputs, String>>,
}

/// Runs one row: each configuration verified (if asked) and timed; `done` is called after
/// each configuration.
pub fn run_row(ctx: &Arc<CudaContext>, gpu: &Gpu, (shape, configs): &Row, opts: &Options, mut done: impl FnMut()) -> Result<RowRun, CliError> {
    let row_err = |source: crate::bench::BenchError| CliError::Row { row: shape.label(), source };
    let mut records = Vec::new();
    let mut shared = None;
    let mut bufs: Option<BenchBuffers> = None;
    for &config in configs {
        let fixed = opts.params(shape, config)?;
        // Configurations share the inputs, except when verifying: then each gets a fresh
        // (zeroed) output, so that elements a kernel fails to write cannot keep the values an
        // earlier kernel left there.
        if bufs.is_none() || opts.verify {
            bufs = Some(BenchBuffers::new(ctx, &fixed, opts.dtype, opts.kv, opts.fp8_queries, opts.layout(), opts.mods).map_err(row_err)?);
        }
        let bufs = bufs.as_ref().expect("allocated above");
        let params = bufs.params(&fixed);
        // Planned for this GPU: decode rows are split across CTAs as the library would. A
        // backward row's forward also writes the log-sum-exp its backward reads.
        let plan = gpu.plan_forward(&params, &bufs.refs(opts.backward)).map_err(|e| row_err(e.into()))?;
        let kernel = plan.kernel.to_string();
        let mut record = Record::new(Implementation::Flashrs, *shape, opts.precision().name(), opts.path.name(), &kernel).with_mods(opts.mods).with_kv(opts.fp8_queries.or(opts.kv));
        // The tile configuration describes the mma.sync kernels only.
        record.config = match plan.kernel {
            Kernel::Mma { config, .. } => Some(tag(&config)),
            Kernel::Sm90 { .. } | Kernel::Bwd { .. } | Kernel::Merge { .. } => None,
        };
        let splits = plan.split.as_ref().map(|s| format!("{} splits", s.num_splits));
        let pages = opts.page_size.map(|n| format!("pages of {n} rows"));
        let packed = opts.varlen.then(|| if opts.device_offsets { "varlen, device offsets" } else { "varlen" }.to_string());
        let deterministic = opts.deterministic.then(|| "deterministic".to_string());
        record.note = [packed, pages, splits, deterministic].into_iter().flatten().reduce(|a, b| format!("{a}, {b}"));
        if opts.verify {
            // One launch; the timer synchronises on its end, so the output is complete.
            time_plan(ctx, gpu, &plan, 0, 1, TimingMode::Call).map_err(row_err)?;
            let [q, k, v] = bufs.inputs_f32(&fixed).map_err(row_err)?;
            let out = bufs.output_f32().map_err(row_err)?;
            let ([q, k, v], out) = if opts.bhsd {
                let p = Problem::from(&fixed);
                (bshd_inputs(&p, [&q, &k, &v]), peer_check::bshd_from_bhsd(&out, [p.batch, p.heads_q, p.seqlen_q, p.head_dim_v]))
            } else {
                ([q, k, v], out)
            };
            let what = format!("{} ({kernel})", record.label());
            // The packed rows of a variable-length row, and a paged row's gathered caches, are
            // the contiguous batch's; the modifications are the values the buffers uploaded.
            let x = RefInputs { q: &q, k: &k, v: &v };
            let tolerance = if opts.fp8_queries.is_some() { Tolerance::FP8_INPUTS } else { Tolerance::for_dtype(opts.dtype) };
            let outcome = verify::check(&Problem::from(&fixed), &bufs.mods().variants(), &x, &out, tolerance)
                .into_result(&what)
                .map_err(CliError::Verify)?;
            (record.max_abs_err, record.verified_rows) = (Some(outcome.max_abs_err), Some(outcome.rows));
            if opts.share_inputs && shared.is_none() {
                shared = Some(share(bufs, shape, &fixed, opts));
            }
        }
        if opts.backward {
            // O and the log-sum-exp from one forward launch, then the backward's own plan.
            time_plan(ctx, gpu, &plan, 0, 1, TimingMode::Call).map_err(row_err)?;
            let grads = bufs.grads(ctx).map_err(row_err)?;
            let bwd = gpu.plan_backward(&params, &bufs.refs(true), &grads.refs()).map_err(|e| row_err(e.into()))?;
            record.kernel = bwd.kernels[1].to_string();
            // The forward's configuration is not the backward's (its kernel name says that).
            record.config = None;
            record.backward = true;
            // SAFETY: planned against these live buffers, kept until timing ends.
            let launch = |raw| unsafe { gpu.launch_backward(raw, &bwd) };
            let t = time_launch(ctx, gpu, &launch, opts.warmup, opts.iters, opts.timing).map_err(row_err)?;
            drop(grads);
            records.push(record.timed(t.median_ms, t.min_ms));
            done();
            continue;
        }
        let t = time_plan(ctx, gpu, &plan, opts.warmup, opts.iters, opts.timing).map_err(row_err)?;
        records.push(record.timed(t.median_ms, t.min_ms));
        done();
    }
    Ok(RowRun { records, shared })
}

/// The FP8 inputs `bufs` uploaded for the call `fixed` (the row `shape`), written for
/// FlashAttention-3 ([`SharedInputs`]) in FlashAttention's `[batch, seqlen, heads, head_dim]`
/// whatever our layout (a variable-length row's packed rows are that batch's already).
fn share(bufs: &BenchBuffers, shape: &Shape, fixed: &AttentionParams, opts: &Options) -> Result<SharedInputs, String> {
    // FA3's reference is plain attention (the FP8 options refuse modifications anyway).
    let (Some(fp8), true) = (opts.fp8_queries, opts.mods.is_plain()) else {
        return Err("FlashAttention-3 is checked on plain FP8 rows only".into());
    };
    let Some([q, k, v]) = bufs.fp8_bytes().map_err(|e| format!("copying the inputs back: {e}"))? else {
        return Err("the row's inputs are not FP8 rows of a batch".into());
    };
    let p = Problem::from(fixed);
    let [q, k, v] = if opts.bhsd { bshd_inputs(&p, [&q, &k, &v]) } else { [q, k, v] };
    SharedInputs::write(*shape, p, fp8, [&q, &k, &v])
}

/// Q, K and V of `p` stored `[batch, heads, seqlen, d]` (`--layout bhsd`), as `[batch,
/// seqlen, heads, d]`: the reference's layout and the FA3 inputs file's.
fn bshd_inputs<T: Copy>(p: &Problem, [q, k, v]: [&[T]; 3]) -> [Vec<T>; 3] {
    [
        peer_check::bshd_from_bhsd(q, [p.batch, p.heads_q, p.seqlen_q, p.head_dim]),
        peer_check::bshd_from_bhsd(k, [p.batch, p.heads_kv, p.seqlen_k, p.head_dim]),
        peer_check::bshd_from_bhsd(v, [p.batch, p.heads_kv, p.seqlen_k, p.head_dim_v]),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configs::ConfigChoice;
    use crate::sweep::SweepSpec;

    fn opts() -> Options {
        Options { dtype: DType::F16, kv: None, fp8_queries: None, path: KernelPath::MmaSync, warmup: 0, iters: 1, verify: false, share_inputs: false, num_splits: None, page_size: None, bhsd: false, varlen: false, device_offsets: false, timing: TimingMode::Call, backward: false, deterministic: false, mods: ModSpec::default() }
    }

    #[test]
    fn rows_with_modifications_plan_and_the_library_speaks_for_itself() {
        let s = Shape { batch: 2, heads_q: 8, heads_kv: 2, seqlen_q: 1024, seqlen_k: 1024, head_dim: 128, head_dim_v: None, causal: true };
        let all = ModSpec { window: (Some(256), Some(0)), softcap: Some(30.0), alibi: true, sinks: true, block_sparsity: Some(0.5) };
        for path in [KernelPath::Auto, KernelPath::MmaSync] {
            for varlen in [false, true] {
                preflight(&[(s, vec![None])], &Options { path, varlen, mods: all, ..opts() }).unwrap();
            }
        }
        // The window and the softcap are in the parameters; the arrays come with the buffers.
        let p = Options { mods: all, ..opts() }.params(&s, None).unwrap();
        assert_eq!((p.mods.window.left, p.mods.window.right, p.mods.softcap), (Some(256), Some(0), Some(30.0)));
        assert!(p.mods.alibi.is_none() && p.mods.sinks.is_none());
        // Decode rows run unsplit with modifications; a forced split is the library's to refuse.
        let decode = Shape { seqlen_q: 1, seqlen_k: 8192, ..s };
        preflight(&[(decode, vec![None])], &Options { path: KernelPath::Auto, mods: all, ..opts() }).unwrap();
        let err = preflight(&[(decode, vec![None])], &Options { num_splits: Some(4), mods: all, ..opts() }).unwrap_err().to_string();
        assert!(err.contains("num_splits") && err.contains("unsplit"), "{err}");
    }

    /// `--layout bhsd` rows reach the reference as `[batch, seqlen, heads, d]`: GQA, V narrower
    /// than Q and K, Q and K of other lengths, so that a mixed-up dimension moves elements.
    #[test]
    fn bhsd_inputs_reach_the_reference_in_its_layout() {
        let p = Problem { batch: 2, seqlen_q: 3, seqlen_k: 5, heads_q: 4, heads_kv: 2, head_dim: 8, head_dim_v: 6, causal: false, scale: 1.0 };
        // Each element's value names its (batch, seqlen, head, d) in the bshd layout.
        let bshd = |s: usize, h: usize, d: usize| -> Vec<u32> {
            (0..p.batch * s * h * d).map(|i| i as u32).collect()
        };
        let bhsd = |x: &[u32], s: usize, h: usize, d: usize| -> Vec<u32> {
            let mut out = vec![0; x.len()];
            for (i, v) in x.iter().enumerate() {
                let (b, si, hi, di) = (i / (s * h * d), i / (h * d) % s, i / d % h, i % d);
                out[((b * h + hi) * s + si) * d + di] = *v;
            }
            out
        };
        let (q, k, v) = (bshd(p.seqlen_q, p.heads_q, p.head_dim), bshd(p.seqlen_k, p.heads_kv, p.head_dim), bshd(p.seqlen_k, p.heads_kv, p.head_dim_v));
        let stored = [bhsd(&q, p.seqlen_q, p.heads_q, p.head_dim), bhsd(&k, p.seqlen_k, p.heads_kv, p.head_dim), bhsd(&v, p.seqlen_k, p.heads_kv, p.head_dim_v)];
        assert_ne!(stored[0], q);
        assert_eq!(bshd_inputs(&p, [&stored[0], &stored[1], &stored[2]]), [q, k, v]);
    }

    #[test]
    fn preflight_accepts_the_sweep_with_every_config() {
        let shapes = SweepSpec { causal: vec![false, true], ..Default::default() }.shapes().unwrap();
        let rows: Vec<Row> = shapes.iter().map(|s| (*s, ConfigChoice::All.for_head_dim(s.head_dim))).collect();
        preflight(&rows, &opts()).unwrap();
    }

    #[test]
    fn varlen_and_paged_rows_plan_for_an_h100() {
        let s = Shape { batch: 3, heads_q: 4, heads_kv: 2, seqlen_q: 300, seqlen_k: 500, head_dim: 128, head_dim_v: None, causal: true };
        let auto = Options { path: KernelPath::Auto, ..opts() };
        for device_offsets in [false, true] {
            let o = Options { varlen: true, device_offsets, ..auto };
            assert_eq!(o.layout(), BenchLayout { packed: Some(device_offsets), page_size: None });
            preflight(&[(s, vec![None])], &o).unwrap();
        }
        preflight(&[(s, vec![None])], &Options { page_size: Some(16), ..auto }).unwrap();
        preflight(&[(s, vec![None])], &Options { page_size: Some(16), varlen: true, ..auto }).unwrap();
        assert!(preflight(&[(s, vec![None])], &Options { page_size: Some(0), ..auto }).is_err());
    }

    #[test]
    fn head_dim_v_rows_plan_and_refusals_are_the_rows_errors() {
        let s = Shape { batch: 2, heads_q: 8, heads_kv: 2, seqlen_q: 1024, seqlen_k: 1024, head_dim: 192, head_dim_v: Some(128), causal: true };
        let auto = Options { path: KernelPath::Auto, ..opts() };
        let p = auto.params(&s, None).unwrap();
        assert_eq!((p.head_dim, p.head_dim_v()), (192, 128));
        for o in [auto, Options { varlen: true, ..auto }, Options { path: KernelPath::MmaSync, ..auto }] {
            preflight(&[(s, vec![None])], &o).unwrap();
        }
        // Paged rows take V wider or narrower than K.
        let wide = Shape { head_dim: 128, head_dim_v: Some(192), ..s };
        for shape in [s, wide] {
            preflight(&[(shape, vec![None])], &Options { page_size: Some(16), ..auto }).unwrap();
        }
        // The backward pass takes V narrower or wider than K, on either path.
        for o in [auto, Options { path: KernelPath::MmaSync, ..auto }] {
            for shape in [s, wide] {
                preflight(&[(shape, vec![None])], &Options { backward: true, ..o }).unwrap();
            }
        }
        // Widths the kernels have no tiles for are the library's to refuse.
        let err = preflight(&[(Shape { head_dim_v: Some(100), ..s }, vec![None])], &auto).unwrap_err().to_string();
        assert!(err.contains("D=192/100") && err.contains("head_dim_v 100"), "{err}");
    }

    #[test]
    fn backward_rows_plan_their_backward_pass() {
        let shapes = SweepSpec { causal: vec![false, true], ..Default::default() }.shapes().unwrap();
        let rows: Vec<Row> = shapes.iter().map(|s| (*s, vec![None])).collect();
        for path in [KernelPath::Auto, KernelPath::MmaSync] {
            preflight(&rows, &Options { path, backward: true, ..opts() }).unwrap();
            preflight(&rows, &Options { path, backward: true, deterministic: true, varlen: true, ..opts() }).unwrap();
        }
    }

    #[test]
    fn preflight_names_the_row_that_cannot_run() {
        let s = Shape { batch: 1, heads_q: 4, heads_kv: 4, seqlen_q: 128, seqlen_k: 128, head_dim: 100, head_dim_v: None, causal: false };
        let err = preflight(&[(s, vec![None])], &opts()).unwrap_err().to_string();
        assert!(err.contains("D=100") && err.contains("head_dim"), "{err}");
        let small = *flashrs::tiles::CONFIGS.iter().find(|c| c.head_dim < 256).unwrap();
        let err = preflight(&[(Shape { head_dim: 256, ..s }, vec![Some(Config::Mma(small))])], &opts()).unwrap_err().to_string();
        assert!(err.contains("D=256") && err.contains("config"), "{err}");
    }
}
