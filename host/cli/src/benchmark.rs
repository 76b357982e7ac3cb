//! `flashrs benchmark`: checks the options, runs our rows and (on request) torch's, then
//! prints the table and writes the requested files.

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::CudaContext;
use flashrs::Gpu;
use indicatif::{ProgressBar, ProgressStyle};

use super::CliError;
use super::args::{BenchmarkArgs, CompareArg, DtypeArg, LayoutArg};
use super::compare::{self, Interleaved};
use super::configs::{Config, ConfigChoice};
use super::peer_check::{self, Checks};
use super::plot;
use super::record::Record;
use super::report::{Report, Startup};
use super::rounds;
use super::runner::{self, Options, Row};
use super::sweep::Shape;
use super::torch::{self, TorchInfo};

/// Runs the benchmark described by `args`.
pub fn run(args: &BenchmarkArgs) -> Result<(), CliError> {
    let opts = options(args)?;
    let shapes = args.spec().shapes().map_err(CliError::Usage)?;
    let choice = args.config_choice();
    if args.path == flashrs::KernelPath::Wgmma && matches!(choice, ConfigChoice::Forced(Config::Mma(_))) {
        return Err(CliError::Usage("an mma.sync --config (d128_128x64w8s2) forces the mma.sync kernels; --path wgmma takes a Hopper one (d128_128x128s2)".into()));
    }
    if args.path == flashrs::KernelPath::MmaSync && matches!(choice, ConfigChoice::Forced(Config::Hopper(_))) {
        return Err(CliError::Usage("a Hopper --config forces the Hopper kernels; drop --path mma-sync".into()));
    }
    let rows = rows(&shapes, choice);
    runner::preflight(&rows, &opts)?;

    let opened = Instant::now();
    let ctx = open_device(0)?;
    let gpu = Gpu::from_cudarc(&ctx)?;
    let startup = Startup { ms: opened.elapsed().as_secs_f64() * 1e3, kernel_image: gpu.image().name.into() };
    let device = format!("{} ({:?})", gpu.name()?, gpu.arch());
    let ran = run_rows(args, (&ctx, &gpu), (&rows, &shapes), &opts)?;
    let summary = match &ran.rounds {
        Some((_, rows)) => compare::summarize_interleaved(&ran.records, rows),
        None => compare::summarize(&ran.records),
    };
    let (rounds, interleaved) = ran.rounds.map_or((None, Vec::new()), |(n, rows)| (Some(n), rows));
    let report = Report {
        summary,
        rounds,
        interleaved,
        torch: ran.torch,
        torch_unavailable: ran.torch_unavailable,
        timing: opts.timing.name().into(),
        startup: Some(startup),
        date: Some(super::report::today()),
        command: Some(std::env::args().skip(1).fold("flashrs".to_string(), |c, a| c + " " + &a)),
        ..Report::new(device, opts.precision().name(), opts.warmup, opts.iters, ran.records)
    };
    print!("{}", report.table());
    write_outputs(args, &report)
}

/// How every row runs, from `args`; refuses the options no row can run with (before the GPU
/// is opened).
fn options(args: &BenchmarkArgs) -> Result<Options, CliError> {
    let mods = args.mods().map_err(CliError::Usage)?;
    let fp8_queries = args.fp8_queries().map_err(CliError::Usage)?;
    if args.compare == Some(CompareArg::Fa3) && (args.backward || !matches!(args.dtype, DtypeArg::Bf16 | DtypeArg::E4m3)) {
        return Err(CliError::Usage("--compare fa3 times FlashAttention-3's fa3-fwd package, which has a bf16 and an e4m3 forward only: add --dtype bf16 or --dtype e4m3, drop --backward".into()));
    }
    Ok(Options {
        dtype: args.dtype.into(),
        kv: args.kv_dtype.map(Into::into),
        fp8_queries,
        path: args.path,
        warmup: args.warmup as usize,
        iters: args.iters as usize,
        verify: args.verify,
        // Every comparison runs FA3 on FP8 forward rows (the FP8 options refuse --backward).
        share_inputs: args.verify && fp8_queries.is_some() && args.compare.is_some(),
        num_splits: args.num_splits,
        page_size: args.page_size,
        bhsd: args.layout == LayoutArg::Bhsd,
        varlen: args.varlen,
        device_offsets: args.device_offsets,
        timing: args.timing.into(),
        backward: args.backward,
        deterministic: args.deterministic,
        mods,
    })
}

/// Each shape with the tile configurations `choice` gives it: those of the wider of its two
/// head dimensions, the one its kernels are compiled for (the narrower operands padded).
fn rows(shapes: &[Shape], choice: ConfigChoice) -> Vec<Row> {
    shapes.iter().map(|s| (*s, choice.for_head_dim(s.head_dim.max(s.head_dim_v())))).collect()
}

/// cudarc's context on GPU `ordinal`, after checking that the driver library is there (cudarc
/// loads it at run time and stops the process when it is missing).
fn open_device(ordinal: usize) -> Result<Arc<CudaContext>, CliError> {
    // SAFETY: only probes whether the library loads.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(CliError::Cuda("no CUDA driver library (libcuda.so) found: install the NVIDIA driver".into()));
    }
    CudaContext::new(ordinal).map_err(|e| CliError::Cuda(format!("opening GPU {ordinal}: {e}")))
}

/// A progress bar on stderr (hidden when stderr is not a terminal).
pub fn bar(len: usize, what: &str) -> ProgressBar {
    let style = ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {elapsed_precise} {msg}")
        .expect("the template is valid")
        .progress_chars("=> ");
    ProgressBar::new(len as u64).with_style(style).with_prefix(what.to_string())
}

/// What the rows produced, ours and (with `--compare`) theirs.
struct Ran {
    /// Ours first, then theirs.
    records: Vec<Record>,
    /// The torch compared with.
    torch: Option<TorchInfo>,
    /// Why torch was asked for but not compared.
    torch_unavailable: Option<String>,
    /// With `--rounds`: their number and each problem's per-round ratios.
    rounds: Option<(usize, Vec<Interleaved>)>,
}

/// Runs our rows and, with `--compare torch`, theirs: in interleaved rounds with `--rounds`
/// (ours alone, once, when torch cannot start), else as a sweep after ours. FP8 rows verified
/// against FlashAttention-3 ([`Options::share_inputs`]) start the script before ours, so that
/// FA3 runs on each row's inputs right after ours ([`peer_check`]).
fn run_rows(args: &BenchmarkArgs, (ctx, gpu): (&Arc<CudaContext>, &Gpu), (rows, shapes): (&[Row], &[Shape]), opts: &Options) -> Result<Ran, CliError> {
    let mut ran = Ran { records: Vec::new(), torch: None, torch_unavailable: None, rounds: None };
    let Some(compare) = args.compare else {
        ran.records = run_ours(ctx, gpu, rows, opts, None)?.0;
        return Ok(ran);
    };
    if let Some(rounds) = args.rounds {
        match torch::Session::start(compare.peers()) {
            Ok(mut session) => {
                let progress = bar(rows.len() * rounds * 2, "rounds ");
                let out = rounds::run(ctx, gpu, rows, opts, rounds, &mut session, || progress.inc(1));
                progress.finish_and_clear();
                let out = out?;
                ran.torch = Some(session.info().clone());
                if let Some(p) = out.problem.or_else(|| session.finish()) {
                    eprintln!("warning: {p}");
                }
                (ran.records, ran.rounds) = (out.records, Some((rounds, out.interleaved)));
            }
            Err(why) => {
                ran.records = run_ours(ctx, gpu, rows, &Options { share_inputs: false, ..*opts }, None)?.0;
                ran.torch_unavailable = Some(why);
            }
        }
        return Ok(ran);
    }
    let mut session = None;
    if opts.share_inputs {
        match torch::Session::start(compare.peers()) {
            Ok(s) => session = Some(s),
            Err(why) => ran.torch_unavailable = Some(why),
        }
    }
    let (records, checks) = run_ours(ctx, gpu, rows, &Options { share_inputs: session.is_some(), ..*opts }, session.as_mut())?;
    ran.records = records;
    if ran.torch_unavailable.is_some() {
        // The script could not start for FA3's checks: it cannot for the sweep either.
        return Ok(ran);
    }
    match run_torch(shapes, opts, compare.peers(), session) {
        torch::Outcome::Ran { info, records: mut theirs, problem } => {
            if let Some(p) = problem {
                eprintln!("warning: {p}");
            }
            peer_check::attach(&mut theirs, &checks);
            ran.torch = Some(info);
            ran.records.extend(theirs);
        }
        torch::Outcome::Unavailable(why) => ran.torch_unavailable = Some(why),
    }
    Ok(ran)
}

/// Runs every row of ours, stopping at the first failure. With `session` (and
/// [`Options::share_inputs`]), FlashAttention-3 runs on each row's inputs right after ours,
/// while they are on disk (one row's at a time), and its checks come back by shape.
fn run_ours(ctx: &Arc<CudaContext>, gpu: &Gpu, rows: &[Row], opts: &Options, mut session: Option<&mut torch::Session>) -> Result<(Vec<Record>, Checks), CliError> {
    let progress = bar(rows.iter().map(|r| r.1.len()).sum(), "flashrs");
    let (mut records, mut checks) = (Vec::new(), Vec::new());
    let result = rows.iter().try_for_each(|row| {
        progress.set_message(row.0.label());
        let run = runner::run_row(ctx, gpu, row, opts, || progress.inc(1))?;
        records.extend(run.records);
        if let (Some(session), Some(shared)) = (session.as_deref_mut(), run.shared) {
            progress.set_message(format!("{} (FlashAttention-3 on our inputs)", row.0.label()));
            checks.push((row.0, peer_check::check_fa3(session, &shared)));
        }
        Ok(())
    });
    // Cleared before any error message, so that message is the last thing on the screen.
    progress.finish_and_clear();
    result.map(|()| (records, checks))
}

/// Runs the torch script on `shapes` (in `session` where it has started already, else in its
/// own), with a progress bar.
fn run_torch(shapes: &[Shape], opts: &Options, peers: torch::Peers, session: Option<torch::Session>) -> torch::Outcome {
    let progress = bar(shapes.len(), "torch  ");
    progress.set_message(match (peers, opts.fp8_queries) {
        (torch::Peers::All, None) => "SDPA flash + cuDNN backends, FlashAttention-3",
        (torch::Peers::Fa3, None) => "FlashAttention-3",
        // SDPA takes no FP8 inputs.
        (_, Some(_)) => "FlashAttention-3 (FP8)",
    });
    let timing = (opts.warmup, opts.iters, opts.timing);
    let outcome = match session {
        Some(s) => s.sweep(shapes, opts.precision(), timing, opts.backward, &opts.mods, || progress.inc(1)),
        None => torch::run(shapes, opts.precision(), timing, opts.backward, &opts.mods, peers, || progress.inc(1)),
    };
    progress.finish_and_clear();
    outcome
}

/// Writes the `--json`, `--csv` and `--plot` files that were asked for.
fn write_outputs(args: &BenchmarkArgs, report: &Report) -> Result<(), CliError> {
    let write = |path: &std::path::Path, text: String| {
        std::fs::write(path, text).map_err(|e| CliError::Output(format!("writing {}: {e}", path.display())))?;
        eprintln!("wrote {}", path.display());
        Ok::<(), CliError>(())
    };
    if let Some(path) = &args.json {
        write(path, report.to_json())?;
    }
    if let Some(path) = &args.csv {
        write(path, report.to_csv())?;
    }
    if let Some(path) = &args.plot {
        plot::write(path, report).map_err(CliError::Output)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::preflight;
    use flashrs::{DType, KernelPath};

    fn args(line: &str) -> BenchmarkArgs {
        use clap::Parser;
        match crate::Cli::try_parse_from(["flashrs", "benchmark"].into_iter().chain(line.split_whitespace())).unwrap().command {
            crate::Command::Benchmark(b) => b,
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn fp8_rows_verified_against_a_comparison_share_their_inputs_with_fa3() {
        for (line, share) in [
            ("--dtype e4m3 --verify --compare fa3", true),
            ("--dtype e4m3 --verify --compare torch", true),
            ("--dtype e4m3 --verify --compare fa3 --rounds 3", true),
            ("--dtype e4m3 --compare fa3", false),
            ("--dtype e4m3 --verify", false),
            ("--dtype bf16 --verify --compare fa3", false),
        ] {
            assert_eq!(options(&args(line)).unwrap().share_inputs, share, "{line}");
        }
        assert!(crate::args::LONG_ABOUT.contains("With --verify too") && crate::args::LONG_ABOUT.contains("`fa3 max err`"));
    }

    #[test]
    fn fa3_alone_needs_bf16_or_e4m3_forward_rows_before_the_gpu_opens() {
        for line in ["--compare fa3", "--compare fa3 --dtype bf16 --backward", "--compare fa3 --dtype f16"] {
            match run(&args(line)) {
                Err(CliError::Usage(why)) => assert!(why.contains("--dtype bf16 or --dtype e4m3") && why.contains("--backward"), "{line}: {why}"),
                other => panic!("{line}: {other:?}"),
            }
        }
        // FP8 inputs: FA3's own FP8 forward, the output bf16.
        for line in ["--compare fa3 --dtype e4m3", "--compare torch --dtype e4m3", "--compare fa3 --dtype bf16"] {
            let o = options(&args(line)).unwrap();
            assert_eq!(o.dtype, DType::Bf16, "{line}");
            assert_eq!((o.fp8_queries, o.kv), (line.contains("e4m3").then_some(flashrs::Fp8::E4m3), None), "{line}");
        }
        match run(&args("--compare fa3 --dtype e4m3 --backward")) {
            Err(CliError::Usage(why)) => assert!(why.contains("--dtype e4m3 takes no --backward"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn e4m3_rows_plan_on_the_fp8_kernels_and_the_rest_is_refused_before_the_gpu_opens() {
        let o = options(&args("--dtype e4m3")).unwrap();
        assert_eq!((o.precision().name(), o.kv), ("e4m3", None));
        let shapes = args("--dtype e4m3").spec().shapes().unwrap();
        preflight(&rows(&shapes, ConfigChoice::Default), &o).unwrap();
        let line = format!("--dtype e4m3 --varlen --head-dim 128 --path wgmma --config {}", crate::configs::config_tag(&crate::configs::Config::Hopper(flashrs::sm90::FP8_CONFIGS[1])));
        let a = args(&line);
        preflight(&rows(&a.spec().shapes().unwrap(), a.config_choice()), &options(&a).unwrap()).unwrap();
        // What the planner refuses deep in a row is a usage error naming the option.
        for (line, why) in [
            ("--backward", "forward-only"),
            ("--kv-dtype e4m3", "E4M3 already"),
            ("--softcap 30", "no attention modifications"),
            ("--window 128,0", "no attention modifications"),
            ("--page-size 64", "contiguous K and V"),
            ("--num-splits 4", "unsplit"),
            ("--decode", "one-row decode queries"),
            ("--path mma-sync", "Hopper (wgmma)"),
            ("--all-configs", "one configuration per head dimension"),
        ] {
            match run(&args(&format!("--dtype e4m3 {line}"))) {
                Err(CliError::Usage(msg)) => assert!(msg.starts_with("--dtype e4m3 takes no") && msg.contains(why), "{line}: {msg}"),
                other => panic!("{line}: {other:?}"),
            }
        }
        // A split count of 1 is no split.
        assert!(options(&args("--dtype e4m3 --num-splits 1")).is_ok());
        // A Hopper configuration other than the FP8 kernels' is the planner's to refuse.
        let a = args("--dtype e4m3 --config d64_128x128s3");
        let err = preflight(&rows(&a.spec().shapes().unwrap(), a.config_choice()), &options(&a).unwrap()).unwrap_err().to_string();
        assert!(err.contains("FP8"), "{err}");
    }

    #[test]
    fn rows_take_the_configurations_of_the_wider_head_dimension() {
        let s = Shape { batch: 1, heads_q: 4, heads_kv: 4, seqlen_q: 1024, seqlen_k: 1024, head_dim: 128, head_dim_v: Some(192), causal: false };
        let all = rows(&[s, Shape { head_dim: 192, head_dim_v: Some(128), ..s }], ConfigChoice::All);
        assert!(all.iter().all(|(_, configs)| !configs.is_empty() && configs == &ConfigChoice::All.for_head_dim(192)));
        let opts = Options {
            dtype: DType::F16,
            kv: None,
            fp8_queries: None,
            path: KernelPath::MmaSync,
            warmup: 0,
            iters: 1,
            verify: false,
            share_inputs: false,
            num_splits: None,
            page_size: None,
            bhsd: false,
            varlen: false,
            device_offsets: false,
            timing: crate::bench::TimingMode::Call,
            backward: false,
            deterministic: false,
            mods: crate::mods::ModSpec::default(),
        };
        preflight(&all, &opts).unwrap();
        assert_eq!(rows(&[Shape { head_dim_v: None, ..s }], ConfigChoice::All)[0].1, ConfigChoice::All.for_head_dim(128));
    }
}
