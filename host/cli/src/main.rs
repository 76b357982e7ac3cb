//! The `flashrs` command line: `flashrs benchmark` times the kernels, optionally against
//! PyTorch, and reports tables, JSON, CSV and plots; `flashrs ring` times ring attention over
//! the GPUs of a host.
#![warn(missing_docs)]

pub mod args;
pub mod bench;
pub mod benchmark;
pub mod compare;
pub mod configs;
pub mod docs;
pub mod mods;
pub mod peer_check;
pub mod plot;
pub mod record;
pub mod report;
pub mod ring;
pub mod rounds;
pub mod runner;
pub mod sweep;
pub mod torch;
pub mod verify;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `flashrs`: FlashAttention-class kernels written in Rust.
#[derive(Parser, Debug)]
#[command(name = "flashrs", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
// Parsed once per run: the size of the larger variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Times the attention kernels.
    #[command(about = args::ABOUT, long_about = args::LONG_ABOUT)]
    Benchmark(args::BenchmarkArgs),
    /// Writes the benchmark documentation (docs/BENCHMARKS.md, the README's summary) from
    /// `flashrs benchmark --json` files.
    Report(docs::ReportArgs),
    /// Times ring attention over the GPUs of this host, with strong scaling.
    #[command(about = ring::ABOUT, long_about = ring::LONG_ABOUT)]
    Ring(ring::RingArgs),
}

/// Why a command failed; printed as `error: <message>`.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The GPU could not be opened or queried (no driver, no device, ...).
    #[error(transparent)]
    Gpu(#[from] flashrs::Error),
    /// A row could not be planned or run.
    #[error("{row}: {source}")]
    Row {
        /// The row's shape.
        row: String,
        /// What failed.
        source: bench::BenchError,
    },
    /// The CUDA driver could not be loaded or the device opened.
    #[error("CUDA: {0}")]
    Cuda(String),
    /// Options that describe no runnable shape.
    #[error("{0}")]
    Usage(String),
    /// A kernel's output differs from the reference.
    #[error("{0}")]
    Verify(String),
    /// An output file could not be written.
    #[error("{0}")]
    Output(String),
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Benchmark(args) => benchmark::run(&args),
        Command::Report(args) => docs::run(&args),
        Command::Ring(args) => ring::run(&args),
    }
}
