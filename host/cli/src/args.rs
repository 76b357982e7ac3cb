//! Options of `flashrs benchmark`.

use std::path::PathBuf;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, ValueEnum};
use flashrs::{DType, Fp8, KernelPath};

use super::configs::{self, ConfigChoice};
use super::mods::{self, ModSpec, Window};
use super::plot;
use super::sweep::SweepSpec;

/// `--path` values and the kernel path each selects: adding a path is one line here.
const PATHS: &[(&str, KernelPath)] = &[("auto", KernelPath::Auto), ("mma-sync", KernelPath::MmaSync), ("wgmma", KernelPath::Wgmma)];

/// Parses `--path` by [`PATHS`], listing its names in `--help`.
fn path_parser() -> impl TypedValueParser<Value = KernelPath> {
    PossibleValuesParser::new(PATHS.iter().map(|p| p.0))
        .map(|name| PATHS.iter().find(|p| p.0 == name).expect("clap admits only names from PATHS").1)
}

/// Parses `--plot`, refusing formats the plotter cannot write.
fn plot_path(s: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(s);
    plot::Format::of(&path)?;
    Ok(path)
}

/// One-line help of `flashrs benchmark`.
pub const ABOUT: &str = "Times the forward attention kernels with CUDA events and prints a table";

/// `flashrs benchmark --help`: what runs and how the numbers are computed.
pub const LONG_ABOUT: &str = "\
Times the forward attention kernels with CUDA events and prints a table (and, on request, \
JSON, CSV and a plot).

Without shape options this runs the standard sweep, the shapes of the PyTorch SDPA anchors: \
16384 query tokens per row (batch = 16384 / seqlen), heads = 2048 / head_dim, head_dim 64, 128 \
and 256, seqlen 512 to 16384, causal off and on. Each shape option narrows or overrides one axis \
of that sweep; --head-dim, --seqlen, --batch, --heads and --causal on|off together give a \
single custom shape.

Each row: `--warmup` untimed launches, then `--iters` launches each between two CUDA events; \
the median and the fastest are reported. With `--timing queued` each timed launch waits behind a \
50 us spin kernel, so that the events see the GPU's time without the host's launch work.

  TFLOPS = 2 * batch * heads_q * seqlen_q * seqlen_k * (head_dim + head_dim_v) / median time,
           halved when causal (FlashAttention's convention: the two matmuls, Q K^T and P V, of
           which causal masking skips half; head_dim_v is head_dim unless --head-dim-v sets it)
  GB/s   = bytes of Q, K and V read once plus O written once / median time (the least traffic
           any implementation needs)

--compare torch --rounds N alternates: each row runs ours and theirs back to back N times \
(who goes first alternating), so that both see the same GPU clocks, whose power state moves \
long rows by up to 10% from minute to minute; the table then gives each row's median per-round \
ratio and its range, and the geomeans are of those medians.

--head-dim-v N runs every row with V and the output N wide (DeepSeek's 192 / 128, for one): \
the table shows such rows' head dimensions as `192/128`, and the JSON and CSV records carry \
`head_dim_v`; --backward rows too. A call the library cannot run with such a V is that \
row's error, before the GPU is opened. With --compare \
torch, SDPA's backends, FlashAttention-3 and FlexAttention get V N wide too; one that refuses \
it is n/a.

--window, --softcap, --alibi, --sinks and --block-sparsity run every row with those attention \
modifications (on the library's kernels for them); with --window, TFLOPS count only the \
(query, key) pairs the window lets through, with --block-sparsity only the key blocks visited. \
Records name a row's modifications (`mods`). With --compare torch, SDPA's backends are n/a \
for such rows (they take none of them), FlashAttention-3 runs the same window and softcap \
(not ALiBi, sinks or block masks), and FlexAttention (compiled per shape) the same window, \
softcap, ALiBi and block sparsity (its own random blocks, as many per query block; not sinks), \
forward and, with --backward, its compiled backward.

--dtype e4m3 runs FP8 attention: E4M3 Q, K and V (random, dequantization factors 1) with a \
bf16 output, forward only, on the sm_90a Hopper kernels; GB/s count Q, K and V at one byte an \
element. With --compare, FlashAttention-3 runs its own FP8 forward (E4M3 Q, K and V, bf16 \
output); SDPA's backends, which take no FP8 inputs, are n/a. With --verify too, \
FlashAttention-3 also runs once on each row's own inputs (the E4M3 bytes ours ran on, handed \
to the script in a temporary file, its output handed back in another), and its output is \
checked against the same CPU reference as ours: the table shows its max abs error (`fa3 max \
err`) beside ours (`max err`), and its JSON and CSV records carry `max_abs_err` and \
`verified_rows` as ours do. Only ours must be within tolerance; FA3's error is reported, \
larger or smaller. With --rounds, the first round's inputs, as only that round verifies.";

/// Element type on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DtypeArg {
    /// IEEE half precision.
    F16,
    /// bfloat16.
    Bf16,
    /// E4M3 Q, K and V with a bf16 output (FP8 attention: forward only, sm_90a only).
    E4m3,
}

impl DtypeArg {
    /// Q's, K's and V's FP8 format, where the inputs are FP8 (`None`: 16-bit throughout).
    pub fn fp8_inputs(self) -> Option<Fp8> {
        match self {
            DtypeArg::F16 | DtypeArg::Bf16 => None,
            DtypeArg::E4m3 => Some(Fp8::E4m3),
        }
    }

    /// Parses a 16-bit element type only, listing those in `--help` as `value_enum` would,
    /// for commands with no FP8 path.
    pub fn sixteen_bit() -> impl TypedValueParser<Value = DtypeArg> {
        let values = DtypeArg::value_variants().iter().filter(|d| d.fp8_inputs().is_none()).filter_map(ValueEnum::to_possible_value);
        PossibleValuesParser::new(values).map(|name| DtypeArg::from_str(&name, false).expect("clap admits only DtypeArg's names"))
    }
}

/// The output's element type: the inputs' unless they are FP8, whose output is bf16.
impl From<DtypeArg> for DType {
    fn from(d: DtypeArg) -> DType {
        match d {
            DtypeArg::F16 => DType::F16,
            DtypeArg::Bf16 | DtypeArg::E4m3 => DType::Bf16,
        }
    }
}

/// K/V element type on the command line, where it differs from the queries'.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum KvDtypeArg {
    /// FP8 E4M3.
    E4m3,
    /// FP8 E5M2.
    E5m2,
}

impl From<KvDtypeArg> for Fp8 {
    fn from(d: KvDtypeArg) -> Fp8 {
        match d {
            KvDtypeArg::E4m3 => Fp8::E4m3,
            KvDtypeArg::E5m2 => Fp8::E5m2,
        }
    }
}

/// Which causal settings to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CausalArg {
    /// Non-causal only.
    Off,
    /// Causal only.
    On,
    /// Both, non-causal first.
    Both,
}

impl CausalArg {
    /// The `causal` flags to run, in order.
    fn values(self) -> Vec<bool> {
        match self {
            CausalArg::Off => vec![false],
            CausalArg::On => vec![true],
            CausalArg::Both => vec![false, true],
        }
    }
}

/// Memory layout of our Q, K, V and output tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LayoutArg {
    /// `[batch, seqlen, heads, head_dim]` (FlashAttention's): a sequence's heads interleaved.
    Bshd,
    /// `[batch, heads, seqlen, head_dim]` (PyTorch SDPA's, the one the torch rows use): each
    /// head's rows contiguous.
    Bhsd,
}

/// What the events around a timed launch see (`--timing`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TimingArg {
    /// Each call on an idle stream, the host's launch work included (the PyTorch anchors'
    /// way; torch pays its Python dispatch there).
    Call,
    /// Each call queued behind a 50 us spin kernel that holds the stream while the host
    /// enqueues it: the GPU's time alone, as amid queued work or in a CUDA graph.
    Queued,
}

impl From<TimingArg> for crate::bench::TimingMode {
    fn from(t: TimingArg) -> Self {
        match t {
            TimingArg::Call => crate::bench::TimingMode::Call,
            TimingArg::Queued => crate::bench::TimingMode::Queued,
        }
    }
}

/// Other implementations to time on the same shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CompareArg {
    /// PyTorch SDPA's FlashAttention-2 and cuDNN backends, and FlashAttention-3 (the `fa3-fwd`
    /// package: bf16 and e4m3 only) where it is installed, through `python3`; on rows with
    /// attention modifications also PyTorch's FlexAttention. With --dtype e4m3 FlashAttention-3
    /// alone runs (SDPA takes no FP8 inputs).
    Torch,
    /// FlashAttention-3 alone (the `fa3-fwd` package, importable as `fa3_fwd_interface`: bf16
    /// or e4m3 with a bf16 output, forward only), through `python3` and torch.
    Fa3,
}

impl CompareArg {
    /// The script's backends this comparison times.
    pub fn peers(self) -> crate::torch::Peers {
        match self {
            CompareArg::Torch => crate::torch::Peers::All,
            CompareArg::Fa3 => crate::torch::Peers::Fa3,
        }
    }
}

/// `flashrs benchmark` options.
#[derive(Args, Debug, Clone)]
pub struct BenchmarkArgs {
    /// Element type of Q, K, V and the output (e4m3: of Q, K and V, the output bf16; without
    /// --backward, --kv-dtype, modifications, paged or split K/V, --decode or --all-configs).
    #[arg(long, value_enum, default_value_t = DtypeArg::F16)]
    pub dtype: DtypeArg,
    /// K and V as FP8 caches of this format (random values, dequantization factors 1), read by
    /// --dtype queries; torch, which has no FP8 attention, still runs its 16-bit K and V. K+V
    /// GB/s count the bytes read (one per element).
    #[arg(long, value_enum, conflicts_with = "backward")]
    pub kv_dtype: Option<KvDtypeArg>,
    /// Head dimensions, comma-separated [default: 64,128,256; with --config: its head_dim].
    #[arg(long, value_delimiter = ',')]
    pub head_dim: Vec<usize>,
    /// Head dimension of V and the output of every row (a multiple of 8, at most 256; e.g. 128
    /// with --head-dim 192) [default: each row's --head-dim].
    #[arg(long, value_name = "N")]
    pub head_dim_v: Option<usize>,
    /// Query sequence lengths, comma-separated [default: 512,1024,2048,4096,8192,16384].
    #[arg(long, value_delimiter = ',')]
    pub seqlen: Vec<usize>,
    /// Key/value sequence length [default: the query's].
    #[arg(long)]
    pub seqlen_k: Option<usize>,
    /// Batch size [default: 16384 / seqlen].
    #[arg(long)]
    pub batch: Option<usize>,
    /// Query heads [default: 2048 / head_dim].
    #[arg(long)]
    pub heads: Option<usize>,
    /// Key/value heads, dividing --heads (grouped-query attention) [default: --heads].
    #[arg(long)]
    pub heads_kv: Option<usize>,
    /// Causal masking (bottom-right aligned when seqlen != seqlen-k).
    #[arg(long, value_enum, default_value_t = CausalArg::Both)]
    pub causal: CausalArg,
    /// Timed launches per row.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    pub iters: u32,
    /// Untimed launches before timing.
    #[arg(long, default_value_t = 5)]
    pub warmup: u32,
    /// Kernel path.
    #[arg(long, default_value = "auto", value_parser = path_parser())]
    pub path: KernelPath,
    /// Force a tile configuration by tag: the kernel name's suffix, e.g. d128_128x64w8s2
    /// (mma.sync) or d64_128x128s3, d128_128x128s2_serial (Hopper, which it then takes).
    #[arg(long, value_parser = configs::parse_tag, conflicts_with = "all_configs")]
    pub config: Option<configs::Config>,
    /// Time every tile configuration compiled for each row's head_dim (for tuning): the
    /// mma.sync kernels', or with --path wgmma the Hopper kernels'.
    #[arg(long)]
    pub all_configs: bool,
    /// Check each row's output against the CPU reference before timing it; exit non-zero
    /// on a mismatch. With --dtype e4m3 --compare, FlashAttention-3's output on the same
    /// inputs is checked too, and its error reported beside ours (never a failure).
    #[arg(long)]
    pub verify: bool,
    /// Also time another implementation on the same shapes.
    #[arg(long, value_enum)]
    pub compare: Option<CompareArg>,
    /// With --compare: time each row N times, ours and theirs back to back in every round
    /// (alternating who goes first), and report each row's median per-round ratio and its
    /// range; times are the median of the rounds' medians. Without it, ours run as a sweep
    /// and theirs as another, minutes apart, on whatever clocks the GPU then has.
    #[arg(long, value_name = "N", requires = "compare", value_parser = clap::value_parser!(u32).range(1..=100).map(|n| n as usize))]
    pub rounds: Option<usize>,
    /// Write the results as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write the results as CSV.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Run the decode sweep instead of the standard one: batch 1,8,64 x KV cache
    /// 1k,8k,32k,128k, 32 query / 8 key-value heads, head_dim 128, one query row, non-causal
    /// (--batch, --seqlen-k, --seqlen (query rows), --heads, --heads-kv, --head-dim and
    /// --causal on override). The table adds K+V read bandwidth (K+V GB/s).
    #[arg(long)]
    pub decode: bool,
    /// Force this many split-KV CTAs per query block (1 to 32) [default: the library's choice
    /// for this GPU].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=32).map(|n| n as usize))]
    pub num_splits: Option<usize>,
    /// Read K and V from a paged cache with pages of this many rows (a power of two, 16 or
    /// more), every sequence's pages shuffled over the cache; torch (which has no paged
    /// attention) still runs the contiguous tensors.
    #[arg(long, value_name = "ROWS")]
    pub page_size: Option<usize>,
    /// Layout of our tensors (torch always runs `bhsd`).
    #[arg(long, value_enum, default_value_t = LayoutArg::Bshd, conflicts_with = "page_size")]
    pub layout: LayoutArg,
    /// Run each row as a variable-length call: the batch's sequences (all of the row's
    /// lengths) packed as `[total, heads, head_dim]` with `cu_seqlens` offsets, as serving
    /// engines' prefill calls come (with --page-size: packed queries against a paged cache;
    /// with --decode: a decode step's batch, split across CTAs like fixed-length decode but
    /// without GQA packing); torch (whose SDPA takes no offsets) runs the padded batch, which
    /// holds the same rows.
    #[arg(long, conflicts_with_all = ["layout"])]
    pub varlen: bool,
    /// With --varlen: the offsets are already on the GPU (as `flash_attn_varlen_func` takes
    /// them), instead of host offsets that each call uploads.
    #[arg(long, requires = "varlen")]
    pub device_offsets: bool,
    /// Time the backward pass (dQ, dK, dV from dO; torch: autograd through SDPA) instead of
    /// the forward. TFLOPS count 2.5 forward passes (FlashAttention's convention).
    #[arg(long, conflicts_with_all = ["page_size", "decode"])]
    pub backward: bool,
    /// With --backward: deterministic mode (bit-identical gradients, dQ's parts added in one
    /// order); torch runs as it does by default.
    #[arg(long, requires = "backward")]
    pub deterministic: bool,
    /// Sliding window, as FlashAttention's `window_size`: each query row sees the LEFT keys
    /// before its (bottom-right aligned) diagonal and the RIGHT keys after it, -1 for an
    /// unbounded side (e.g. 4096,0: causal local attention over 4096 keys back).
    // Hyphen values: `-1,0` would otherwise read as an unknown short option.
    #[arg(long, value_name = "LEFT,RIGHT", value_parser = mods::parse_window, allow_hyphen_values = true)]
    pub window: Option<Window>,
    /// Softcap the scaled scores: `s` becomes `CAP * tanh(s / CAP)` (Gemma 2 uses 50).
    // Negative numbers reach the parser, which says what a softcap must be.
    #[arg(long, value_name = "CAP", value_parser = mods::parse_softcap, allow_negative_numbers = true)]
    pub softcap: Option<f32>,
    /// ALiBi with BLOOM's slopes, 2^(-8 (h+1) / heads) for query head h.
    #[arg(long)]
    pub alibi: bool,
    /// Learnable sinks (gpt-oss): one logit per query head, drawn uniformly from [-2, 2] by a
    /// seeded generator, joins every row's softmax denominator.
    #[arg(long)]
    pub sinks: bool,
    /// Block sparsity: each 128-row query block visits a random `round((1 - S) * key blocks)`
    /// of the 128-key blocks (seeded; the same count for every query block); TFLOPS count the
    /// blocks visited.
    #[arg(long, value_name = "S", value_parser = mods::parse_sparsity, allow_negative_numbers = true)]
    pub block_sparsity: Option<f32>,
    /// What the events around each timed launch see (ours and torch's alike).
    #[arg(long, value_enum, default_value_t = TimingArg::Call)]
    pub timing: TimingArg,
    /// Plot TFLOPS against seqlen (.svg or .png).
    #[arg(long, value_name = "FILE", value_parser = plot_path)]
    pub plot: Option<PathBuf>,
}

impl BenchmarkArgs {
    /// How rows pick tile configurations.
    pub fn config_choice(&self) -> ConfigChoice {
        match (self.config, self.all_configs) {
            (Some(c), _) => ConfigChoice::Forced(c),
            (None, true) if self.path == flashrs::KernelPath::Wgmma => ConfigChoice::AllHopper,
            (None, true) => ConfigChoice::All,
            (None, false) => ConfigChoice::Default,
        }
    }

    /// The attention modifications every row runs with. Refuses the combinations the library
    /// would refuse only once the GPU is open or deep in a row (paged caches take no
    /// modification), where its error would not name the options at fault.
    pub fn mods(&self) -> Result<ModSpec, String> {
        let spec = self.mod_spec();
        if spec.is_plain() {
            return Ok(spec);
        }
        let given = "--window, --softcap, --alibi, --sinks, --block-sparsity";
        if self.page_size.is_some() {
            return Err(format!("--page-size takes no attention modifications ({given}): the library's paged kernels have none yet"));
        }
        Ok(spec)
    }

    /// The modifications as given, unchecked.
    fn mod_spec(&self) -> ModSpec {
        ModSpec { window: self.window.unwrap_or_default(), softcap: self.softcap, alibi: self.alibi, sinks: self.sinks, block_sparsity: self.block_sparsity }
    }

    /// Q's, K's and V's FP8 format (`--dtype e4m3`; `None`: 16-bit inputs). Refuses the
    /// options the FP8 kernels cannot run with, which the library would refuse only once rows
    /// are planned, in words that do not name the option.
    pub fn fp8_queries(&self) -> Result<Option<Fp8>, String> {
        let Some(fp8) = self.dtype.fp8_inputs() else { return Ok(None) };
        let mods = "--window, --softcap, --alibi, --sinks, --block-sparsity";
        let refused = [
            (self.backward, "--backward", "the FP8 kernels are forward-only"),
            (self.kv_dtype.is_some(), "--kv-dtype", "K and V are E4M3 already (FP8 caches read by 16-bit queries: --dtype bf16 --kv-dtype e4m3)"),
            (!self.mod_spec().is_plain(), mods, "the FP8 kernels take no attention modifications"),
            (self.page_size.is_some(), "--page-size", "the FP8 kernels read contiguous K and V"),
            (self.num_splits.is_some_and(|n| n > 1), "--num-splits", "the FP8 kernels run unsplit"),
            (self.decode, "--decode", "the FP8 kernels run unsplit in 128-row query tiles, which one-row decode queries leave idle (FP8 caches read by 16-bit queries: --kv-dtype e4m3)"),
            (self.path == KernelPath::MmaSync, "--path mma-sync", "the FP8 kernels are Hopper (wgmma) kernels"),
            (matches!(self.config, Some(configs::Config::Mma(_))), "an mma.sync --config", "the FP8 kernels are Hopper (wgmma) kernels"),
            (self.all_configs, "--all-configs", "the FP8 kernels have one configuration per head dimension"),
        ];
        match refused.into_iter().find(|r| r.0) {
            Some((_, given, why)) => Err(format!("--dtype {} takes no {given}: {why}", fp8.name())),
            None => Ok(Some(fp8)),
        }
    }

    /// The shapes asked for.
    pub fn spec(&self) -> SweepSpec {
        let head_dims = if self.head_dim.is_empty() { self.config_choice().default_head_dims() } else { self.head_dim.clone() };
        // Decode rows are non-causal unless causal is asked for alone (one query row sees the
        // whole cache either way).
        let causal = if self.decode && self.causal == CausalArg::Both { vec![false] } else { self.causal.values() };
        SweepSpec {
            decode: self.decode,
            head_dims,
            seqlens: self.seqlen.clone(),
            seqlen_k: self.seqlen_k,
            batch: self.batch,
            heads: self.heads,
            heads_kv: self.heads_kv,
            head_dim_v: self.head_dim_v,
            causal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Cli, Command};
    use clap::{CommandFactory, Parser};
    use flashrs::tiles::CONFIGS;

    fn parse(args: &str) -> Result<BenchmarkArgs, clap::Error> {
        let cli = Cli::try_parse_from(["flashrs", "benchmark"].into_iter().chain(args.split_whitespace()))?;
        match cli.command {
            Command::Benchmark(b) => Ok(b),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn defaults_are_the_standard_sweep() {
        let a = parse("").unwrap();
        assert_eq!((a.iters, a.warmup, a.path, a.dtype), (20, 5, KernelPath::Auto, DtypeArg::F16));
        assert_eq!(a.config_choice(), ConfigChoice::Default);
        assert_eq!(a.spec(), SweepSpec { causal: vec![false, true], ..Default::default() });
        assert!(!a.verify && a.compare.is_none());
    }

    #[test]
    fn lists_paths_and_custom_shapes() {
        let a =
            parse("--head-dim 64,128 --seqlen 4096 --batch 2 --heads 16 --heads-kv 4 --causal on --path mma-sync --dtype bf16").unwrap();
        assert_eq!(a.head_dim, [64, 128]);
        assert_eq!((a.path, a.dtype), (KernelPath::MmaSync, DtypeArg::Bf16));
        let shapes = a.spec().shapes().unwrap();
        assert_eq!(shapes.len(), 2);
        assert!(shapes.iter().all(|s| s.batch == 2 && s.heads_q == 16 && s.heads_kv == 4 && s.causal && s.seqlen_q == 4096));
        assert_eq!(parse("--path wgmma").unwrap().path, KernelPath::Wgmma);
        assert!(parse("--path tcgen05").is_err());
        assert!(parse("--iters 0").is_err());
        assert!(parse("--causal maybe").is_err());
    }

    #[test]
    fn head_dim_v_reaches_every_row() {
        assert_eq!(parse("").unwrap().head_dim_v, None);
        let a = parse("--head-dim 192,128 --head-dim-v 128 --seqlen 1024 --causal on").unwrap();
        assert_eq!(a.head_dim_v, Some(128));
        let shapes = a.spec().shapes().unwrap();
        assert_eq!(shapes.iter().map(|s| (s.head_dim, s.head_dim_v)).collect::<Vec<_>>(), [(192, Some(128)), (128, Some(128))]);
        assert_eq!(shapes[0].dims(), "192/128");
        let decode = parse("--decode --head-dim 192 --head-dim-v 128").unwrap().spec().shapes().unwrap();
        assert!(decode.iter().all(|s| s.head_dim_v == Some(128)));
        assert!(parse("--head-dim-v x").is_err() && parse("--head-dim-v -8").is_err());
        assert_eq!(parse("--head-dim-v 0").unwrap().spec().shapes().unwrap_err(), "--head-dim-v must be at least 1");
    }

    #[test]
    fn kv_dtype_takes_the_fp8_formats_for_the_forward() {
        assert_eq!(parse("").unwrap().kv_dtype, None);
        assert_eq!(parse("--decode --kv-dtype e4m3").unwrap().kv_dtype.map(Fp8::from), Some(Fp8::E4m3));
        assert_eq!(parse("--kv-dtype e5m2").unwrap().kv_dtype.map(Fp8::from), Some(Fp8::E5m2));
        assert!(parse("--kv-dtype f16").is_err());
        assert!(parse("--backward --kv-dtype e4m3").is_err());
    }

    #[test]
    fn configs_and_output_files() {
        let last = *CONFIGS.last().unwrap();
        let a =
            parse(&format!("--config {} --compare torch --json r.json --csv r.csv --plot r.png --verify", configs::tag(&last))).unwrap();
        assert_eq!(a.config_choice(), ConfigChoice::Forced(configs::Config::Mma(last)));
        assert!(a.spec().shapes().unwrap().iter().all(|s| s.head_dim == last.head_dim));
        assert_eq!(a.compare, Some(CompareArg::Torch));
        assert_eq!(a.plot, Some(PathBuf::from("r.png")));
        assert_eq!(parse("--all-configs").unwrap().config_choice(), ConfigChoice::All);
        assert_eq!(parse("--all-configs --path wgmma").unwrap().config_choice(), ConfigChoice::AllHopper);
        assert!(parse(&format!("--all-configs --config {}", configs::tag(&last))).is_err());
        assert!(parse("--config nope").unwrap_err().to_string().contains(&configs::tag(&CONFIGS[0])));
        assert!(parse("--plot r.pdf").unwrap_err().to_string().contains(".svg or .png"));
    }

    #[test]
    fn fa3_alone_is_a_peer() {
        let a = parse("--compare fa3 --dtype bf16 --rounds 3").unwrap();
        assert_eq!((a.compare, a.rounds), (Some(CompareArg::Fa3), Some(3)));
        assert_eq!(a.compare.unwrap().peers(), crate::torch::Peers::Fa3);
        assert_eq!(CompareArg::Torch.peers(), crate::torch::Peers::All);
    }

    #[test]
    fn rounds_need_a_peer_to_alternate_with() {
        assert_eq!(parse("").unwrap().rounds, None);
        assert_eq!(parse("--compare torch --rounds 5").unwrap().rounds, Some(5));
        assert!(parse("--rounds 3").unwrap_err().to_string().contains("--compare"));
        assert!(parse("--compare torch --rounds 0").is_err() && parse("--compare torch --rounds 101").is_err());
    }

    #[test]
    fn modifications_parse_and_refuse_what_the_library_cannot_run() {
        let a = parse("--window 128,-1 --softcap 30 --alibi --sinks").unwrap();
        assert_eq!(a.mods().unwrap(), ModSpec { window: (Some(128), None), softcap: Some(30.0), alibi: true, sinks: true, block_sparsity: None });
        assert_eq!(parse("--block-sparsity 0.9").unwrap().mods().unwrap().block_sparsity, Some(0.9));
        assert!(parse("--block-sparsity 1.5").is_err());
        assert_eq!(parse("--window -1,0").unwrap().window, Some((None, Some(0))));
        assert_eq!(parse("--window=4096,0").unwrap().mods().unwrap().label(), "window 4096,0");
        assert!(parse("").unwrap().mods().unwrap().is_plain());
        for (bad, why) in [("--window 128", "LEFT,RIGHT"), ("--window -2,0", "neither a key count nor -1"), ("--window 1,x", "right side"), ("--softcap 0", "positive softcap"), ("--softcap -3", "positive softcap")] {
            let err = parse(bad).unwrap_err().to_string();
            assert!(err.contains(why), "{bad}: {err}");
        }
        assert_eq!(parse("--softcap 30 --block-sparsity 0.8 --backward").unwrap().mods().unwrap().block_sparsity, Some(0.8));
        assert!(parse("--sinks --softcap 30 --backward").unwrap().mods().unwrap().softcap == Some(30.0));
        assert!(parse("--sinks --backward").unwrap().mods().unwrap().sinks);
        assert!(parse("--window 8,0 --alibi --backward").unwrap().mods().unwrap().alibi);
        assert!(parse("--window 8,0 --page-size 16").unwrap().mods().unwrap_err().contains("--page-size"));
        // The plain backward and paged runs are unaffected.
        assert!(parse("--backward").unwrap().mods().unwrap().is_plain());
    }

    #[test]
    fn help_explains_the_metrics() {
        let mut cmd = Cli::command();
        let help = cmd.find_subcommand_mut("benchmark").unwrap().render_long_help().to_string();
        assert!(help.contains("TFLOPS = 2 * batch * heads_q * seqlen_q * seqlen_k * (head_dim + head_dim_v) / median time"));
        assert!(help.contains("--head-dim-v N runs every row with V and the output N wide"), "{help}");
        assert!(help.contains("halved when causal") && help.contains("GB/s"));
        assert!(help.contains("[possible values: auto, mma-sync, wgmma]"), "{help}");
        Cli::command().debug_assert();
    }
}
