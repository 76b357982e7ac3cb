//! The `flashrs` command line: `flashrs benchmark` times the kernels, optionally against
//! PyTorch, and reports tables, JSON, CSV and plots.

pub mod args;
pub mod benchmark;
pub mod compare;
pub mod configs;
pub mod plot;
pub mod record;
pub mod report;
pub mod runner;
pub mod sweep;
pub mod torch;
pub mod verify;

use clap::{Parser, Subcommand};

/// `flashrs`: FlashAttention-class kernels written in Rust.
#[derive(Parser, Debug)]
#[command(name = "flashrs", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Times the attention kernels.
    #[command(about = args::ABOUT, long_about = args::LONG_ABOUT)]
    Benchmark(args::BenchmarkArgs),
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
        source: flashrs::Error,
    },
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
    }
}
