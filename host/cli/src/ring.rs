//! `flashrs ring`: times ring attention (context parallelism over the GPUs of this host) with
//! strong scaling, one global sequence split over rings of 1, 2, 4, ... GPUs, and the ring's
//! K/V transfers alone beside it.

use std::path::PathBuf;
use std::sync::Barrier;
use std::sync::atomic::{AtomicUsize, Ordering};

use clap::{Args, ValueEnum};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DeviceRepr, DriverError, ValidAsZeroBits};
use cudarc::nccl::{NcclType, group_end, group_start};
use flashrs::ring::RankContext;
use flashrs::{AttentionParams, DType, Element};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::CliError;
use super::args::DtypeArg;
use super::bench::Timing;
use super::benchmark::bar;
use super::report::{Align, render};

/// Version of the `--json` layout; raised when a field changes meaning or disappears.
pub const SCHEMA: u32 = 1;

/// One-line help of `flashrs ring`.
pub const ABOUT: &str = "Times ring attention (context parallelism over this host's GPUs) with strong scaling";

/// `flashrs ring --help`: what runs and how the numbers are computed.
pub const LONG_ABOUT: &str = "\
Times ring attention (context parallelism over the GPUs of this host) with strong scaling: each \
global sequence length of --seqlen runs on rings of each size of --gpus (a ring of N uses GPUs \
0 to N-1; sizes beyond the GPUs present are skipped with a note). Every GPU holds seqlen / N \
rows of Q, K, V and the output (zigzag-sharded when causal, so seqlen must be a multiple of \
2 N; else of N), and K/V shards travel around the ring over NCCL while each GPU attends to the \
shard in hand.

Each run: --warmup untimed calls, then --iters calls, each started on all GPUs together and \
timed between two CUDA events on every GPU; an iteration takes as long as its slowest GPU, and \
the median iteration is reported. Then, on the same ring, the transfers alone: N-1 ring steps \
of sending a K and a V shard to the next GPU and receiving them from the previous one, timed \
the same way.

  TFLOPS     = 4 * batch * heads * seqlen^2 * head_dim / median time, halved when causal: the \
whole ring's rate
  efficiency = T(1 GPU) / (N * T(N GPUs)) at the same seqlen, when the 1-GPU run was measured \
(--json: a fraction; the table: a percentage)
  transfer   = the transfers' median time, and its share of the ring attention's median time \
(near or above 100%: the ring waits for its links)

NCCL: libnccl.so must be on the library path (the nvidia-nccl wheels ship libnccl.so.2, which \
needs a libnccl.so link beside it). Unless NCCL_NVLS_ENABLE is set, this command sets it to 0 \
before NCCL starts: NVLink SHARP (multicast) serves only collectives, of which the ring makes \
one tiny all-reduce per call; with it on, NCCL reserves multicast memory on every GPU, and its \
set-up fails on some hosts (containers, GPUs whose multicast is not set up).";

/// An on/off option.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Switch {
    /// Off.
    Off,
    /// On.
    On,
}

/// `flashrs ring` options.
#[derive(Args, Debug, Clone)]
pub struct RingArgs {
    /// Global sequence lengths, comma-separated (each split over the ring's GPUs).
    #[arg(long, value_delimiter = ',', default_value = "131072,524288")]
    pub seqlen: Vec<usize>,
    /// Ring sizes, comma-separated: a ring of N runs on GPUs 0 to N-1.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub gpus: Vec<usize>,
    /// Batch size.
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// Query heads.
    #[arg(long, default_value_t = 32)]
    pub heads: usize,
    /// Key/value heads, dividing --heads (grouped-query attention).
    #[arg(long, default_value_t = 8)]
    pub heads_kv: usize,
    /// Head dimension.
    #[arg(long, default_value_t = 128)]
    pub head_dim: usize,
    /// Causal masking (zigzag shards).
    #[arg(long, value_enum, default_value_t = Switch::On)]
    pub causal: Switch,
    /// Element type.
    // 16-bit only: the ring's calls have no FP8 form.
    #[arg(long, default_value = "bf16", value_parser = DtypeArg::sixteen_bit())]
    pub dtype: DtypeArg,
    /// Untimed calls before timing (they also set up NCCL's connections).
    #[arg(long, default_value_t = 1)]
    pub warmup: u32,
    /// Timed calls per run.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub iters: u32,
    /// Write the results as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// One run: a global sequence of `seqlen` rows over a ring of `gpus` GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunSpec {
    /// Global sequence length.
    pub seqlen: usize,
    /// Ring size.
    pub gpus: usize,
}

impl std::fmt::Display for RunSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let s = if self.gpus == 1 { "" } else { "s" };
        write!(f, "seqlen {} over {} GPU{s}", self.seqlen, self.gpus)
    }
}

/// The shape every run shares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingShape {
    /// Batch size.
    pub batch: usize,
    /// Query heads.
    pub heads_q: usize,
    /// Key/value heads.
    pub heads_kv: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// Causal masking.
    pub causal: bool,
}

impl RingShape {
    /// Floating-point operations of attention over a whole `seqlen`-row sequence: the two
    /// matmuls, of which causal masking skips half (FlashAttention's convention).
    pub fn flops(&self, seqlen: usize) -> f64 {
        let full = 4.0 * self.batch as f64 * self.heads_q as f64 * (seqlen as f64).powi(2) * self.head_dim as f64;
        if self.causal { full / 2.0 } else { full }
    }

    /// The parameters of one rank's shard of `run`: `seqlen / gpus` rows of contiguous
    /// tensors. Errors (for people): the rows do not split evenly, or the library refuses the
    /// shape.
    pub fn shard_params(&self, run: RunSpec) -> Result<AttentionParams<'static>, String> {
        let RunSpec { seqlen, gpus } = run;
        let parts = if self.causal { gpus.checked_mul(2) } else { Some(gpus) };
        if gpus == 0 || seqlen == 0 || parts.is_none_or(|parts| !seqlen.is_multiple_of(parts)) {
            let why = if self.causal { format!("2 x {gpus}: causal shards are two zigzag chunks per GPU") } else { gpus.to_string() };
            return Err(format!("--seqlen {seqlen} does not split over --gpus {gpus}: it must be a positive multiple of {why}"));
        }
        let p = AttentionParams::builder()
            .batch(self.batch)
            .seqlen(seqlen / gpus)
            .heads_q(self.heads_q)
            .heads_kv(self.heads_kv)
            .head_dim(self.head_dim)
            .causal(self.causal)
            .build()
            .and_then(|p| p.contiguous_lens().map(|_| p));
        p.map_err(|e| format!("{run}: {e}"))
    }
}

impl RingArgs {
    /// The shape every run shares.
    pub fn shape(&self) -> RingShape {
        RingShape { batch: self.batch, heads_q: self.heads, heads_kv: self.heads_kv, head_dim: self.head_dim, causal: self.causal == Switch::On }
    }

    /// The runs asked for, seqlen by seqlen, each checked and planned for an H100 (before any
    /// GPU is touched, so that a bad option fails at once rather than after the first runs).
    pub fn runs(&self) -> Result<Vec<RunSpec>, String> {
        if self.gpus.is_empty() || self.gpus.contains(&0) {
            return Err("--gpus takes ring sizes of 1 GPU or more".into());
        }
        if let Some(n) = self.gpus.iter().enumerate().find_map(|(i, n)| self.gpus[..i].contains(n).then_some(n)) {
            return Err(format!("--gpus names ring size {n} twice"));
        }
        if self.seqlen.is_empty() {
            return Err("--seqlen takes at least one sequence length".into());
        }
        let dims = [("seqlen", self.seqlen.iter().copied().min().unwrap_or(0)), ("batch", self.batch), ("heads", self.heads), ("heads-kv", self.heads_kv), ("head-dim", self.head_dim)];
        if let Some((name, _)) = dims.iter().find(|(_, n)| *n == 0) {
            return Err(format!("--{name} must be at least 1"));
        }
        if !self.heads.is_multiple_of(self.heads_kv) {
            return Err(format!("--heads {} must be a multiple of --heads-kv {}", self.heads, self.heads_kv));
        }
        let shape = self.shape();
        let runs: Vec<RunSpec> = self.seqlen.iter().flat_map(|&seqlen| self.gpus.iter().map(move |&gpus| RunSpec { seqlen, gpus })).collect();
        for &run in &runs {
            preflight(&shape.shard_params(run)?, self.dtype.into()).map_err(|e| format!("{run}: {e}"))?;
        }
        Ok(runs)
    }
}

/// Plans a shard's call for an H100 on stand-in buffers, as `flashrs benchmark` checks its
/// rows: the library's own checks (head_dim, sizes, a kernel for the shape) without a GPU.
fn preflight(p: &AttentionParams, dtype: DType) -> flashrs::Result<()> {
    // Aligned, disjoint and large enough for any shape: 2^40 elements apart.
    let stand_in = |i: u64| flashrs::BufferRef::new(i << 41, 1 << 40);
    let bufs = flashrs::Buffers::new(dtype, stand_in(1), stand_in(2), stand_in(3), stand_in(4));
    p.plan(&bufs, &flashrs::Target::H100).map(|_| ())
}

/// What one run measured, per iteration: the slowest rank's milliseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// The run.
    pub run: RunSpec,
    /// Ring attention, per timed iteration.
    pub ring_ms: Vec<f64>,
    /// The transfers alone, per timed iteration; `None` on one GPU, which has no ring.
    pub transfer_ms: Option<Vec<f64>>,
}

/// One row of the results. Field names are stable: scripts read them from `--json`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RingRecord {
    /// Global sequence length.
    pub seqlen: usize,
    /// Ring size.
    pub gpus: usize,
    /// Batch size.
    pub batch: usize,
    /// Query heads.
    pub heads_q: usize,
    /// Key/value heads.
    pub heads_kv: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// Causal masking.
    pub causal: bool,
    /// Median time of ring attention over the whole sequence, in milliseconds.
    pub median_ms: f64,
    /// The whole ring's tera floating-point operations per second at the median time.
    pub tflops: f64,
    /// Strong-scaling efficiency, `T(1 GPU) / (gpus * T(gpus))` at this seqlen, as a fraction;
    /// `None` when the 1-GPU run was not measured.
    pub efficiency: Option<f64>,
    /// Median time of the ring's transfers alone (`gpus - 1` steps), in milliseconds; `None` on
    /// one GPU.
    pub transfer_ms: Option<f64>,
    /// `transfer_ms / median_ms`.
    pub transfer_share: Option<f64>,
}

/// Strong-scaling efficiency: how much of `n` GPUs' `n`-fold speed-up over one GPU a run got.
pub fn efficiency(t1_ms: f64, n: usize, tn_ms: f64) -> f64 {
    t1_ms / (n as f64 * tn_ms)
}

/// Per-iteration times of a run from every rank's own (`per_rank[rank][iteration]`): an
/// iteration lasts until its slowest rank is done.
pub fn slowest_rank(per_rank: &[Vec<f64>]) -> Vec<f64> {
    let iters = per_rank.iter().map(Vec::len).min().unwrap_or(0);
    (0..iters).map(|i| per_rank.iter().map(|r| r[i]).fold(f64::NEG_INFINITY, f64::max)).collect()
}

/// The records of `measured`, in its order; each run's efficiency against the 1-GPU run of its
/// seqlen, wherever that is in `measured`.
pub fn records(shape: &RingShape, measured: &[Measured]) -> Vec<RingRecord> {
    let median = |ms: &[f64]| Timing::from_samples(ms.to_vec()).median_ms;
    let one_gpu = |seqlen: usize| measured.iter().find(|m| m.run == RunSpec { seqlen, gpus: 1 }).map(|m| median(&m.ring_ms));
    measured
        .iter()
        .map(|m| {
            let RunSpec { seqlen, gpus } = m.run;
            let median_ms = median(&m.ring_ms);
            let transfer_ms = m.transfer_ms.as_deref().map(median);
            RingRecord {
                seqlen,
                gpus,
                batch: shape.batch,
                heads_q: shape.heads_q,
                heads_kv: shape.heads_kv,
                head_dim: shape.head_dim,
                causal: shape.causal,
                median_ms,
                tflops: shape.flops(seqlen) / (median_ms * 1e-3) / 1e12,
                efficiency: one_gpu(seqlen).map(|t1| efficiency(t1, gpus, median_ms)),
                transfer_ms,
                transfer_share: transfer_ms.map(|t| t / median_ms),
            }
        })
        .collect()
}

/// Everything a run produced; serializes to the `--json` document.
#[derive(Clone, Debug, Serialize)]
pub struct RingReport {
    /// [`SCHEMA`].
    pub schema: u32,
    /// The command line that made it.
    pub command: String,
    /// GPU name and kernel module architecture (of GPU 0).
    pub device: String,
    /// Element type name.
    pub dtype: String,
    /// Untimed calls before timing.
    pub warmup: usize,
    /// Timed calls per run.
    pub iters: usize,
    /// Every run, in run order.
    pub records: Vec<RingRecord>,
}

impl RingReport {
    /// The `--json` document.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("reports are plain data") + "\n"
    }

    /// The human-readable table: a line naming the shape, then one row per run.
    pub fn table(&self, shape: &RingShape) -> String {
        let causal = if shape.causal { "causal" } else { "non-causal" };
        let mut out = format!(
            "ring attention, batch {}, heads {}/{} (q/kv), head_dim {}, {causal}, {} on {}: median of {} (after {} warm-up)\n",
            shape.batch, shape.heads_q, shape.heads_kv, shape.head_dim, self.dtype, self.device, self.iters, self.warmup
        );
        let head: Vec<(String, Align)> =
            ["seqlen", "GPUs", "median ms", "TFLOPS", "efficiency", "transfer ms", "transfer share"].iter().map(|h| (h.to_string(), Align::Right)).collect();
        let pct = |x: Option<f64>| x.map_or("-".into(), |x| format!("{:.1}%", 100.0 * x));
        let rows: Vec<Vec<String>> = self
            .records
            .iter()
            .map(|r| {
                vec![
                    r.seqlen.to_string(),
                    r.gpus.to_string(),
                    format!("{:.3}", r.median_ms),
                    format!("{:.1}", r.tflops),
                    pct(r.efficiency),
                    r.transfer_ms.map_or("-".into(), |t| format!("{t:.3}")),
                    pct(r.transfer_share),
                ]
            })
            .collect();
        out += &render(&head, &rows);
        out
    }
}

/// Runs `flashrs ring`.
pub fn run(args: &RingArgs) -> Result<(), CliError> {
    nvls_off();
    let runs = args.runs().map_err(CliError::Usage)?;
    let shape = args.shape();
    // SAFETY: only probes whether the library loads (cudarc stops the process when it is
    // missing).
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(CliError::Cuda("no CUDA driver library (libcuda.so) found: install the NVIDIA driver".into()));
    }
    let present = CudaContext::device_count().map_err(|e| CliError::Cuda(format!("counting GPUs: {e}")))?.max(0) as usize;
    for n in args.gpus.iter().filter(|&&n| n > present) {
        eprintln!("note: skipping the ring of {n} GPUs: this host has {present}");
    }
    let runs: Vec<RunSpec> = runs.into_iter().filter(|r| r.gpus <= present).collect();
    if runs.is_empty() {
        return Err(CliError::Usage(format!("no ring size of --gpus fits the {present} GPU(s) of this host")));
    }

    let progress = bar(runs.len(), "ring");
    let mut measured = Vec::with_capacity(runs.len());
    let mut device = String::new();
    let result = runs.iter().try_for_each(|&run| -> Result<(), CliError> {
        progress.set_message(run.to_string());
        let (m, name) = measure(args, run)?;
        measured.push(m);
        if device.is_empty() {
            device = name;
        }
        progress.inc(1);
        Ok(())
    });
    // Cleared before any error message, so that message is the last thing on the screen.
    progress.finish_and_clear();
    result?;

    let report = RingReport {
        schema: SCHEMA,
        command: std::env::args().skip(1).fold("flashrs".to_string(), |c, a| c + " " + &a),
        device,
        dtype: DType::from(args.dtype).name().into(),
        warmup: args.warmup as usize,
        iters: args.iters as usize,
        records: records(&shape, &measured),
    };
    print!("{}", report.table(&shape));
    if let Some(path) = &args.json {
        std::fs::write(path, report.to_json()).map_err(|e| CliError::Output(format!("writing {}: {e}", path.display())))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// Keeps NVLink multicast (NVLS) off unless the user chose otherwise (see [`LONG_ABOUT`]).
fn nvls_off() {
    const VAR: &str = "NCCL_NVLS_ENABLE";
    if std::env::var_os(VAR).is_none() {
        // SAFETY: called before this process starts any thread (the progress bar, the ranks,
        // NCCL's own), so nothing reads the environment concurrently.
        unsafe { std::env::set_var(VAR, "0") };
    }
}

/// A 16-bit element type the ring runs on.
trait RingElement: Element + NcclType + DeviceRepr + ValidAsZeroBits {}
impl<T: Element + NcclType + DeviceRepr + ValidAsZeroBits> RingElement for T {}

/// One rank's measurements: its GPU's name and its own per-iteration times.
struct RankTimes {
    device: String,
    ring_ms: Vec<f64>,
    transfer_ms: Vec<f64>,
}

/// Runs `run` on GPUs `0..run.gpus`, returning what it measured and GPU 0's name.
fn measure(args: &RingArgs, run: RunSpec) -> Result<(Measured, String), CliError> {
    let ordinals: Vec<usize> = (0..run.gpus).collect();
    let lockstep = Lockstep::new(run.gpus);
    let (shape, reps) = (args.shape(), (args.warmup as usize, args.iters as usize));
    let ranks = match args.dtype {
        DtypeArg::Bf16 => flashrs::ring::launch(&ordinals, |rc| rank::<half::bf16>(rc, &shape, run, reps, &lockstep))?,
        DtypeArg::F16 => flashrs::ring::launch(&ordinals, |rc| rank::<half::f16>(rc, &shape, run, reps, &lockstep))?,
        DtypeArg::E4m3 => return Err(CliError::Usage("flashrs ring runs f16 or bf16 only".into())),
    };
    // A rank that stopped for another's failure returns `None`: report the failure itself.
    let mut times = Vec::with_capacity(ranks.len());
    for r in ranks {
        times.push(r?);
    }
    let mut times: Vec<RankTimes> = times.into_iter().flatten().collect();
    if times.len() != run.gpus {
        return Err(CliError::Cuda(format!("{run}: a rank stopped without saying why")));
    }
    let ring: Vec<Vec<f64>> = times.iter().map(|t| t.ring_ms.clone()).collect();
    let transfers: Vec<Vec<f64>> = times.iter().map(|t| t.transfer_ms.clone()).collect();
    let m = Measured { run, ring_ms: slowest_rank(&ring), transfer_ms: (run.gpus > 1).then(|| slowest_rank(&transfers)) };
    Ok((m, times.swap_remove(0).device))
}

/// Keeps the rank threads in step, and none of them in a barrier that a failed rank will never
/// reach: every rank passes the same numbered checkpoints in the same order, telling each
/// whether its own work since the last one succeeded, and all stop at the first checkpoint
/// where some rank failed.
///
/// Only failures a rank sees on its own are covered: once a ring call has queued transfers, a
/// rank that fails leaves its peers waiting on the GPU for data, which no host code can undo.
struct Lockstep {
    barrier: Barrier,
    /// The earliest checkpoint at which a rank failed (`usize::MAX`: none). Checkpoints rather
    /// than a flag, so that a rank failing after checkpoint `i` cannot make a slower rank,
    /// still reading checkpoint `i`'s verdict, stop one checkpoint before the others.
    failed_at: AtomicUsize,
}

impl Lockstep {
    fn new(ranks: usize) -> Self {
        Lockstep { barrier: Barrier::new(ranks), failed_at: AtomicUsize::new(usize::MAX) }
    }

    /// Checkpoint `*at + 1` (counted in `*at`) with this rank's result since the last one:
    /// `Err` for its own failure, `Ok(None)` when another rank failed, else its value.
    fn pass<X>(&self, at: &mut usize, result: Result<X, CliError>) -> Result<Option<X>, CliError> {
        *at += 1;
        if result.is_err() {
            self.failed_at.fetch_min(*at, Ordering::SeqCst);
        }
        self.barrier.wait();
        let go = self.failed_at.load(Ordering::SeqCst) > *at;
        let value = result?;
        Ok(go.then_some(value))
    }
}

/// Random values in [-1, 1] copied into a shard over and over, so that a shard of billions of
/// elements fills at copy speed: the timing depends on the values being non-trivial, not on
/// their never repeating.
const FILL_BLOCK: usize = 1 << 20;

/// The rank's tensors: its shard of Q, K, V and the output, and (for the transfers alone) a
/// K and a V shard to receive into.
struct Shards<T: DeviceRepr> {
    q: CudaSlice<T>,
    k: CudaSlice<T>,
    v: CudaSlice<T>,
    out: CudaSlice<T>,
    recv: Option<[CudaSlice<T>; 2]>,
}

/// Maps a driver error to the CLI's, naming the GPU and what failed.
fn driver(rank: usize, what: &'static str) -> impl Fn(DriverError) -> CliError {
    move |e| CliError::Cuda(format!("GPU {rank}: {what}: {e}"))
}

/// One rank of `run`: its shards, then the timed ring calls, then the timed transfers.
fn rank<T: RingElement>(rc: RankContext, shape: &RingShape, run: RunSpec, (warmup, iters): (usize, usize), lockstep: &Lockstep) -> Result<Option<RankTimes>, CliError> {
    let mut at = 0;
    let setup = (|| -> Result<_, CliError> {
        let p = shape.shard_params(run).map_err(CliError::Usage)?;
        let n = p.contiguous_lens()?;
        let shards = alloc_shards::<T>(&rc, n.q, n.k)?;
        Ok((p, shards, rc.gpu.name()?))
    })();
    let Some((p, mut s, device)) = lockstep.pass(&mut at, setup)? else { return Ok(None) };

    let ev = |stream: &CudaStream| stream.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(driver(rc.rank, "recording an event"));
    let elapsed = |stream: &CudaStream, start: &cudarc::driver::CudaEvent| -> Result<f64, CliError> {
        let end = ev(stream)?;
        stream.synchronize().map_err(driver(rc.rank, "waiting for the stream"))?;
        Ok(start.elapsed_ms(&end).map_err(driver(rc.rank, "reading events"))? as f64)
    };
    let ring_call = || -> Result<f64, CliError> {
        let start = ev(&rc.stream)?;
        rc.gpu.ring_attention_forward(&rc.ring, &rc.stream, &p, &s.q, &s.k, &s.v, &mut s.out, None)?;
        elapsed(&rc.stream, &start)
    };
    let Some(ring_ms) = timed(lockstep, &mut at, warmup, iters, ring_call)? else { return Ok(None) };

    let mut transfer_ms = Vec::new();
    if let Some([k_recv, v_recv]) = &mut s.recv {
        let comm = rc.ring.comm();
        let stream = comm.stream();
        let (next, prev) = (((rc.rank + 1) % rc.world) as i32, ((rc.rank + rc.world - 1) % rc.world) as i32);
        let nccl = |e: cudarc::nccl::result::NcclError| CliError::Gpu(flashrs::Error::Communication(format!("GPU {}: ring transfer: {e:?}", rc.rank)));
        let (k, v) = (&s.k, &s.v);
        let transfers = || -> Result<f64, CliError> {
            let start = ev(&stream)?;
            for _ in 1..rc.world {
                group_start().map_err(nccl)?;
                let queued = comm.send(k, next).and_then(|_| comm.send(v, next)).and_then(|_| comm.recv(k_recv, prev)).and_then(|_| comm.recv(v_recv, prev));
                // The group ends even when a call in it failed, so that NCCL's group state is left
                // clean.
                let ended = group_end();
                queued.and(ended).map_err(nccl)?;
            }
            elapsed(&stream, &start)
        };
        let Some(ms) = timed(lockstep, &mut at, warmup, iters, transfers)? else { return Ok(None) };
        transfer_ms = ms;
    }
    Ok(Some(RankTimes { device: format!("{} ({:?})", device, rc.gpu.arch()), ring_ms, transfer_ms }))
}

/// `warmup` untimed then `iters` timed calls of `call`, every rank starting each call together:
/// the timed calls' milliseconds, or `None` when another rank failed.
fn timed(lockstep: &Lockstep, at: &mut usize, warmup: usize, iters: usize, mut call: impl FnMut() -> Result<f64, CliError>) -> Result<Option<Vec<f64>>, CliError> {
    let mut samples = Vec::with_capacity(iters);
    let mut last = Ok(());
    for i in 0..warmup + iters {
        // Together: each rank's events then time its own work, not its wait for the others.
        if lockstep.pass(at, last)?.is_none() {
            return Ok(None);
        }
        last = call().map(|ms| {
            if i >= warmup {
                samples.push(ms);
            }
        });
    }
    Ok(lockstep.pass(at, last)?.map(|()| samples))
}

/// Allocates the rank's shards on its stream and fills Q, K and V with [`FILL_BLOCK`]s of
/// random values seeded by the rank.
fn alloc_shards<T: RingElement>(rc: &RankContext, n_q: usize, n_kv: usize) -> Result<Shards<T>, CliError> {
    let stream = &rc.stream;
    let alloc = |n: usize| stream.alloc_zeros::<T>(n.max(1)).map_err(driver(rc.rank, "allocating shards"));
    let mut s = Shards { q: alloc(n_q)?, k: alloc(n_kv)?, v: alloc(n_kv)?, out: alloc(n_q)?, recv: None };
    for (i, buf) in [&mut s.q, &mut s.k, &mut s.v].into_iter().enumerate() {
        let mut rng = StdRng::seed_from_u64((rc.rank * 3 + i) as u64);
        let block: Vec<T> = (0..FILL_BLOCK.min(buf.len())).map(|_| T::from_f32(rng.random_range(-1.0..=1.0))).collect();
        let mut a = 0;
        while a < buf.len() {
            let b = (a + block.len()).min(buf.len());
            stream.memcpy_htod(&block[..b - a], &mut buf.slice_mut(a..b)).map_err(driver(rc.rank, "filling shards"))?;
            a = b;
        }
    }
    if rc.world > 1 {
        // On the transfer stream, where they are received into.
        let cs = rc.ring.comm().stream();
        let alloc = |n: usize| cs.alloc_zeros::<T>(n.max(1)).map_err(driver(rc.rank, "allocating transfer buffers"));
        s.recv = Some([alloc(n_kv)?, alloc(n_kv)?]);
        cs.synchronize().map_err(driver(rc.rank, "allocating transfer buffers"))?;
    }
    stream.synchronize().map_err(driver(rc.rank, "filling shards"))?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Cli, Command};
    use clap::{CommandFactory, Parser};

    fn parse(args: &str) -> Result<RingArgs, clap::Error> {
        let cli = Cli::try_parse_from(["flashrs", "ring"].into_iter().chain(args.split_whitespace()))?;
        match cli.command {
            Command::Ring(r) => Ok(r),
            other => panic!("parsed as {other:?}"),
        }
    }

    const SHAPE: RingShape = RingShape { batch: 1, heads_q: 32, heads_kv: 8, head_dim: 128, causal: true };

    #[test]
    fn defaults_are_long_causal_gqa_sequences_on_1_2_4_gpus() {
        let a = parse("").unwrap();
        assert_eq!((a.seqlen.as_slice(), a.gpus.as_slice()), ([131072, 524288].as_slice(), [1, 2, 4].as_slice()));
        assert_eq!(a.shape(), SHAPE);
        assert_eq!((a.dtype, a.warmup, a.iters, a.json.as_ref()), (DtypeArg::Bf16, 1, 3, None));
        let runs = a.runs().unwrap();
        assert_eq!(runs.len(), 6);
        assert_eq!((runs[0], runs[5]), (RunSpec { seqlen: 131072, gpus: 1 }, RunSpec { seqlen: 524288, gpus: 4 }));
        let p = SHAPE.shard_params(runs[5]).unwrap();
        assert_eq!((p.seqlen_q, p.seqlen_k, p.heads_q, p.heads_kv, p.causal), (131072, 131072, 32, 8, true));
    }

    #[test]
    fn custom_options() {
        let a = parse("--seqlen 4096,8192 --gpus 2,8 --batch 2 --heads 16 --heads-kv 16 --head-dim 64 --causal off --dtype f16 --warmup 0 --iters 5 --json r.json").unwrap();
        assert_eq!(a.shape(), RingShape { batch: 2, heads_q: 16, heads_kv: 16, head_dim: 64, causal: false });
        assert_eq!((a.dtype, a.warmup, a.iters), (DtypeArg::F16, 0, 5));
        assert_eq!(a.json, Some(PathBuf::from("r.json")));
        assert_eq!(a.runs().unwrap().iter().map(|r| (r.seqlen, r.gpus)).collect::<Vec<_>>(), [(4096, 2), (4096, 8), (8192, 2), (8192, 8)]);
        for bad in ["--iters 0", "--causal both", "--dtype f32", "--dtype e4m3", "--gpus x", "--seqlen -1", "--gpus"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn runs_refuse_what_cannot_run() {
        let refused = |args: &str, why: &str| {
            let err = parse(args).unwrap().runs().unwrap_err();
            assert!(err.contains(why), "{args}: {err}");
        };
        refused("--gpus 0", "1 GPU or more");
        refused("--gpus 1,0,2", "1 GPU or more");
        refused("--gpus 2,2", "ring size 2 twice");
        refused(&format!("--gpus {}", usize::MAX), "does not split");
        refused("--seqlen 0", "--seqlen must be at least 1");
        refused("--batch 0", "--batch must be at least 1");
        // Causal shards are zigzag: 2 N chunks; non-causal ones only need N.
        refused("--seqlen 4100 --gpus 4", "2 x 4");
        assert!(parse("--seqlen 4100 --gpus 4 --causal off").unwrap().runs().is_ok());
        refused("--seqlen 4098 --gpus 4 --causal off", "multiple of 4");
        refused("--seqlen 4096 --heads 32 --heads-kv 5", "multiple of --heads-kv 5");
        refused("--seqlen 4096 --head-dim 0", "--head-dim must be at least 1");
        // The library's own checks, planned without a GPU.
        refused("--seqlen 4096 --head-dim 100", "seqlen 4096 over 1 GPU: unsupported head_dim 100");
        let mut a = parse("").unwrap();
        a.gpus.clear();
        assert!(a.runs().unwrap_err().contains("--gpus"));
        a.gpus = vec![1];
        a.seqlen.clear();
        assert!(a.runs().unwrap_err().contains("--seqlen"));
    }

    #[test]
    fn efficiency_and_slowest_ranks() {
        assert_eq!(efficiency(100.0, 4, 25.0), 1.0);
        assert_eq!(efficiency(100.0, 4, 50.0), 0.5);
        assert_eq!(slowest_rank(&[vec![1.0, 5.0, 2.0], vec![3.0, 4.0, 2.5]]), [3.0, 5.0, 2.5]);
        assert!(slowest_rank(&[]).is_empty());
        // TFLOPS = 4 B H S^2 D, halved when causal.
        assert_eq!(SHAPE.flops(1024), 2.0 * 32.0 * 1024.0 * 1024.0 * 128.0);
        assert_eq!(RingShape { causal: false, ..SHAPE }.flops(1024), 2.0 * SHAPE.flops(1024));
    }

    fn measured() -> Vec<Measured> {
        let m = |seqlen, gpus, ring: &[f64], transfer: Option<&[f64]>| Measured { run: RunSpec { seqlen, gpus }, ring_ms: ring.to_vec(), transfer_ms: transfer.map(<[f64]>::to_vec) };
        vec![
            // The 1-GPU run of a seqlen may come after its multi-GPU runs.
            m(8192, 2, &[60.0, 50.0, 70.0], Some(&[10.0, 20.0, 30.0])),
            m(8192, 1, &[100.0, 90.0, 110.0], None),
            m(8192, 4, &[40.0, 40.0, 40.0], Some(&[50.0, 50.0, 50.0])),
            m(16384, 2, &[200.0], Some(&[20.0])),
        ]
    }

    #[test]
    fn records_compute_medians_tflops_efficiency_and_transfer_share() {
        let r = records(&SHAPE, &measured());
        assert_eq!(r.len(), 4);
        assert_eq!((r[0].seqlen, r[0].gpus, r[0].median_ms, r[0].transfer_ms), (8192, 2, 60.0, Some(20.0)));
        assert_eq!(r[0].efficiency, Some(100.0 / 120.0));
        assert_eq!(r[0].transfer_share, Some(20.0 / 60.0));
        assert!((r[0].tflops - SHAPE.flops(8192) / 60e-3 / 1e12).abs() < 1e-9);
        assert_eq!((r[1].efficiency, r[1].transfer_ms, r[1].transfer_share), (Some(1.0), None, None));
        assert_eq!((r[2].efficiency, r[2].transfer_share), (Some(100.0 / 160.0), Some(1.25)));
        // No 1-GPU run at this seqlen: no efficiency.
        assert_eq!((r[3].efficiency, r[3].transfer_share), (None, Some(0.1)));
        assert!(r.iter().all(|r| r.batch == 1 && r.heads_q == 32 && r.heads_kv == 8 && r.head_dim == 128 && r.causal));
    }

    fn report() -> RingReport {
        RingReport { schema: SCHEMA, command: "flashrs ring".into(), device: "GPU (Sm90)".into(), dtype: "bf16".into(), warmup: 1, iters: 3, records: records(&SHAPE, &measured()) }
    }

    #[test]
    fn table_aligns_percentages_and_dashes() {
        let t = report().table(&SHAPE);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].contains("heads 32/8") && lines[0].contains("causal, bf16 on GPU (Sm90)"), "{t}");
        assert_eq!(lines[1].split_whitespace().collect::<Vec<_>>(), ["seqlen", "GPUs", "median", "ms", "TFLOPS", "efficiency", "transfer", "ms", "transfer", "share"]);
        assert_eq!(lines[3].split_whitespace().collect::<Vec<_>>()[..3], ["8192", "2", "60.000"]);
        assert_eq!(lines[3].split_whitespace().collect::<Vec<_>>()[4..], ["83.3%", "20.000", "33.3%"]);
        assert_eq!(lines[4].split_whitespace().collect::<Vec<_>>()[4..], ["100.0%", "-", "-"]);
        assert_eq!(lines[6].split_whitespace().collect::<Vec<_>>()[4..], ["-", "20.000", "10.0%"]);
        // Aligned: every row as wide as the header.
        assert!(lines[1..].iter().all(|l| l.len() == lines[1].len()), "{t}");
    }

    #[test]
    fn json_has_the_documented_fields_and_nulls() {
        let v: serde_json::Value = serde_json::from_str(&report().to_json()).unwrap();
        assert_eq!((v["schema"].as_u64(), v["device"].as_str(), v["dtype"].as_str()), (Some(1), Some("GPU (Sm90)"), Some("bf16")));
        assert!(v["command"].is_string());
        let recs = v["records"].as_array().unwrap();
        let keys: Vec<&str> = recs[0].as_object().unwrap().keys().map(String::as_str).collect();
        let mut want = ["seqlen", "gpus", "batch", "heads_q", "heads_kv", "head_dim", "causal", "median_ms", "tflops", "efficiency", "transfer_ms", "transfer_share"];
        let mut keys = keys;
        keys.sort_unstable();
        want.sort_unstable();
        assert_eq!(keys, want);
        assert!(recs[1]["transfer_ms"].is_null() && recs[1]["transfer_share"].is_null() && recs[3]["efficiency"].is_null());
        assert_eq!(recs[1]["efficiency"].as_f64(), Some(1.0));
    }

    #[test]
    fn help_documents_the_metrics_and_nvls() {
        let mut cmd = Cli::command();
        let help = cmd.find_subcommand_mut("ring").unwrap().render_long_help().to_string();
        assert!(help.contains("NCCL_NVLS_ENABLE") && help.contains("T(1 GPU) / (N * T(N GPUs))"), "{help}");
        assert!(help.contains("[default: 131072,524288]") && help.contains("[default: 1,2,4]"), "{help}");
        assert!(help.contains("- on:") && help.contains("[default: bf16]"), "{help}");
        Cli::command().debug_assert();
    }
}
