//! Our rows on the GPU: buffers, optional verification against the CPU reference, timing.

use flashrs::attention::{BufferRef, Buffers, PagedBuffers, TileConfig, VarlenBuffers};
use flashrs::bench::{BenchBuffers, TimingMode, time_plan};
use flashrs::reference::RefInputs;
use flashrs::{AttentionParams, DType, Gpu, KernelPath, PagedKv, Varlen};

use super::CliError;
use super::configs::tag;
use super::record::{Implementation, Record};
use super::sweep::Shape;
use super::verify::{self, Tolerance};

/// A shape and the tile configurations to time on it (`None`: the library's default).
pub type Row = (Shape, Vec<Option<TileConfig>>);

/// How every row runs.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Element type.
    pub dtype: DType,
    /// Kernel path.
    pub path: KernelPath,
    /// Untimed launches.
    pub warmup: usize,
    /// Timed launches.
    pub iters: usize,
    /// Check outputs against the CPU reference first.
    pub verify: bool,
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
}

impl Options {
    /// Our parameters for `shape` with `config` under these options.
    pub fn params(&self, shape: &Shape, config: Option<TileConfig>) -> AttentionParams {
        let p = shape.params(self.dtype, self.path, config).num_splits(self.num_splits);
        let mut p = if self.bhsd { p.layout_bhsd() } else { p };
        if self.varlen {
            // Equal lengths: the packed rows lie exactly where the contiguous batch's do (and
            // `BenchBuffers` puts device offsets there too).
            let offsets = |len: usize| (0..=shape.batch).map(|b| (b * len) as i32).collect();
            p.varlen = Some(if self.device_offsets {
                Varlen::Device { total_q: shape.batch * shape.seqlen_q, total_k: shape.batch * shape.seqlen_k }
            } else {
                Varlen::Host { cu_seqlens_q: offsets(shape.seqlen_q), cu_seqlens_k: offsets(shape.seqlen_k) }
            });
        }
        match self.page_size {
            Some(page) => p.paged(PagedKv::for_batch(shape.batch, shape.seqlen_k, page)),
            None => p,
        }
    }
}

/// Plans every row against stand-in buffers (planning never touches the GPU), so that a shape
/// or configuration no kernel can take fails before any GPU time is spent.
pub fn preflight(rows: &[Row], opts: &Options) -> Result<(), CliError> {
    // Aligned, disjoint (the planner refuses outputs that overlap inputs), and large enough for
    // any shape: 2^40 elements apart.
    let stand_in = |i: u64| BufferRef { ptr: i << 41, len: 1 << 40 };
    let paged = opts.page_size.map(|_| PagedBuffers { block_table: stand_in(5), seqused_k: None });
    let varlen = opts.device_offsets.then(|| VarlenBuffers { cu_seqlens_q: stand_in(6), cu_seqlens_k: Some(stand_in(7)) });
    let bufs = Buffers { q: stand_in(1), k: stand_in(2), v: stand_in(3), o: stand_in(4), lse: None, paged, varlen };
    for (shape, configs) in rows {
        for &config in configs {
            opts.params(shape, config).plan(&bufs).map_err(|source| CliError::Row { row: shape.label(), source })?;
        }
    }
    Ok(())
}

/// Runs one row: each configuration verified (if asked) and timed; `done` is called after
/// each configuration.
pub fn run_row(gpu: &Gpu, (shape, configs): &Row, opts: &Options, mut done: impl FnMut()) -> Result<Vec<Record>, CliError> {
    let row_err = |source| CliError::Row { row: shape.label(), source };
    let mut records = Vec::new();
    let mut bufs: Option<BenchBuffers> = None;
    for &config in configs {
        let params = opts.params(shape, config);
        // Configurations share the inputs, except when verifying: then each gets a fresh
        // (zeroed) output, so that elements a kernel fails to write cannot keep the values an
        // earlier kernel left there.
        if bufs.is_none() || opts.verify {
            bufs = Some(BenchBuffers::new(&params).map_err(row_err)?);
        }
        let bufs = bufs.as_ref().expect("allocated above");
        // Planned for this GPU: decode rows are split across CTAs as the library would.
        let plan = gpu.plan_forward(&params, &bufs.refs(false)).map_err(row_err)?;
        // Under `--path auto` the kernel that runs depends on the GPU (wgmma on sm_90a).
        let kernel = plan.kernel_for(gpu.arch()).to_string();
        let mut record = Record::new(Implementation::Flashrs, *shape, opts.dtype.name(), opts.path.name(), &kernel);
        // The tile configuration describes the mma.sync kernel only.
        record.config = (kernel == plan.kernel).then(|| tag(&plan.config));
        let splits = plan.split.as_ref().map(|s| format!("{} splits", s.num_splits));
        let pages = opts.page_size.map(|n| format!("pages of {n} rows"));
        let packed = opts.varlen.then(|| if opts.device_offsets { "varlen, device offsets" } else { "varlen" }.to_string());
        record.note = [packed, pages, splits].into_iter().flatten().reduce(|a, b| format!("{a}, {b}"));
        if opts.verify {
            // One launch; the timer synchronises on its end, so the output is complete.
            time_plan(gpu, &plan, opts.path, 0, 1, TimingMode::Call).map_err(row_err)?;
            let [q, k, v] = bufs.inputs_f32(opts.dtype, &params).map_err(row_err)?;
            let out = bufs.output_f32(opts.dtype).map_err(row_err)?;
            let what = format!("{} ({kernel})", shape.label());
            // The packed rows of a variable-length row are the contiguous batch's.
            let fixed = AttentionParams { varlen: None, ..params.clone() };
            let outcome = verify::check(&fixed, &RefInputs { q: &q, k: &k, v: &v }, &out, Tolerance::for_dtype(opts.dtype))
                .into_result(&what)
                .map_err(CliError::Verify)?;
            (record.max_abs_err, record.verified_rows) = (Some(outcome.max_abs_err), Some(outcome.rows));
        }
        let t = time_plan(gpu, &plan, opts.path, opts.warmup, opts.iters, opts.timing).map_err(row_err)?;
        records.push(record.timed(t.median_ms, t.min_ms));
        done();
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::configs::ConfigChoice;
    use crate::cli::sweep::SweepSpec;

    fn opts() -> Options {
        Options { dtype: DType::F16, path: KernelPath::MmaSync, warmup: 0, iters: 1, verify: false, num_splits: None, page_size: None, bhsd: false, varlen: false, device_offsets: false, timing: TimingMode::Call }
    }

    #[test]
    fn preflight_accepts_the_sweep_with_every_config() {
        let shapes = SweepSpec { causal: vec![false, true], ..Default::default() }.shapes().unwrap();
        let rows: Vec<Row> = shapes.iter().map(|s| (*s, ConfigChoice::All.for_head_dim(s.head_dim))).collect();
        preflight(&rows, &opts()).unwrap();
    }

    #[test]
    fn varlen_rows_pack_the_batch_and_plan_the_hopper_kernel_beside() {
        let s = Shape { batch: 3, heads_q: 4, heads_kv: 2, seqlen_q: 300, seqlen_k: 500, head_dim: 128, causal: true };
        let p = Options { varlen: true, path: KernelPath::Auto, ..opts() }.params(&s, None);
        let Some(Varlen::Host { cu_seqlens_q, cu_seqlens_k }) = &p.varlen else { panic!("host offsets expected") };
        assert_eq!((&cu_seqlens_q[..], &cu_seqlens_k[..]), (&[0, 300, 600, 900][..], &[0, 500, 1000, 1500][..]));
        assert_eq!((p.batch, p.seqlen_q, p.seqlen_k), (3, 300, 500));
        preflight(&[(s, vec![None])], &Options { varlen: true, ..opts() }).unwrap();
        let stand_in = |i: u64| BufferRef { ptr: i << 41, len: 1 << 40 };
        let bufs = Buffers { q: stand_in(1), k: stand_in(2), v: stand_in(3), o: stand_in(4), lse: None, paged: None, varlen: None };
        let plan = p.plan(&bufs).unwrap();
        assert!(plan.kernel.starts_with("flash_fwd_varlen_") && plan.wgmma.is_some(), "{}", plan.kernel);
    }

    #[test]
    fn preflight_names_the_row_that_cannot_run() {
        let s = Shape { batch: 1, heads_q: 4, heads_kv: 4, seqlen_q: 128, seqlen_k: 128, head_dim: 100, causal: false };
        let err = preflight(&[(s, vec![None])], &opts()).unwrap_err().to_string();
        assert!(err.contains("D=100") && err.contains("head_dim"), "{err}");
        let small = *flashrs::attention::config::CONFIGS.iter().find(|c| c.head_dim < 256).unwrap();
        let err = preflight(&[(Shape { head_dim: 256, ..s }, vec![Some(small)])], &opts()).unwrap_err().to_string();
        assert!(err.contains("D=256") && err.contains("config"), "{err}");
    }
}
