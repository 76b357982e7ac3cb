//! `flashrs benchmark --rounds N`: each row alternates ours and torch's timings N times.
//!
//! The GPU's clocks follow its power state, which moves long compute-bound rows by up to 10%
//! from one minute to the next; a sweep of ours followed by a sweep of theirs compares two
//! different GPUs. Back to back on one row, both see the same clocks, so each round's ratio
//! is fair and the median over rounds (with its range) settles what one sweep cannot. The
//! order alternates too (ours first in even rounds, theirs first in odd ones), so that a
//! row's warming GPU favours neither.

use std::sync::Arc;

use cudarc::driver::CudaContext;
use flashrs::Gpu;

use super::CliError;
use super::compare::Interleaved;
use super::peer_check;
use super::record::Record;
use super::runner::{self, Options, Row};
use super::torch::{self, Session};

/// What the rounds produced.
#[derive(Debug)]
pub struct Outcome {
    /// One record per row, configuration and implementation: the median of the rounds'
    /// medians and the fastest time of any round.
    pub records: Vec<Record>,
    /// Per row and other implementation, the rounds' ratios.
    pub interleaved: Vec<Interleaved>,
    /// Why torch stopped answering, if it did (its rows after that are n/a).
    pub problem: Option<String>,
}

/// Runs every row `rounds` times, ours and torch's (through `session`) back to back in each
/// round; `tick` is called after each of ours and each of torch's. Only the first round
/// verifies (`opts.verify`): the kernels do not change between rounds. With
/// [`Options::share_inputs`], FlashAttention-3 also runs on that round's inputs right after
/// ours ([`peer_check`]), and the row's merged FA3 record carries its check.
pub fn run(ctx: &Arc<CudaContext>, gpu: &Gpu, rows: &[Row], opts: &Options, rounds: usize, session: &mut Session, mut tick: impl FnMut()) -> Result<Outcome, CliError> {
    let mut out = Outcome { records: Vec::new(), interleaved: Vec::new(), problem: None };
    let mut theirs_all = Vec::new();
    for row in rows {
        let (mut ours, mut theirs) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
        let mut checks = Vec::new();
        for round in 0..rounds {
            let once = Options { verify: opts.verify && round == 0, share_inputs: opts.share_inputs && round == 0, ..*opts };
            if round % 2 == 1 {
                theirs.push(run_theirs(session, row, opts, &mut out.problem));
                tick();
            }
            let run = runner::run_row(ctx, gpu, row, &once, || {})?;
            if let Some(shared) = run.shared {
                checks.push((row.0, peer_check::check_fa3(session, &shared)));
            }
            ours.push(run.records);
            tick();
            if round % 2 == 0 {
                theirs.push(run_theirs(session, row, opts, &mut out.problem));
                tick();
            }
        }
        out.records.extend(merge(&ours));
        let peers = theirs.iter().map(Vec::len).min().unwrap_or(0);
        for peer in 0..peers {
            let by_round: Vec<Record> = theirs.iter().map(|t| t[peer].clone()).collect();
            out.interleaved.extend(Interleaved::new(&ours, &by_round));
        }
        let mut merged = merge(&theirs);
        peer_check::attach(&mut merged, &checks);
        theirs_all.extend(merged);
    }
    // Ours first, then theirs, as a run without rounds lists them.
    out.records.extend(theirs_all);
    Ok(out)
}

/// Torch's records of `row` in one round; the first reason the script gave for stopping or
/// not running is kept in `problem`.
fn run_theirs(session: &mut Session, row: &Row, opts: &Options, problem: &mut Option<String>) -> Vec<Record> {
    match session.run(&[row.0], opts.precision(), (opts.warmup, opts.iters, opts.timing), opts.backward, &opts.mods, || {}) {
        torch::Outcome::Ran { records, problem: p, .. } => {
            *problem = problem.take().or(p);
            records
        }
        torch::Outcome::Unavailable(why) => {
            *problem = problem.take().or(Some(why));
            Vec::new()
        }
    }
}

/// One record per position of the rounds' records (each round's list in the same order):
/// the first round's, timed at the median of the rounds' medians and the fastest of their
/// fastest; a position some round has no time for is that round's n/a record.
pub fn merge(rounds: &[Vec<Record>]) -> Vec<Record> {
    let positions = rounds.iter().map(Vec::len).min().unwrap_or(0);
    (0..positions)
        .map(|i| {
            let all: Vec<&Record> = rounds.iter().map(|r| &r[i]).collect();
            if let Some(missing) = all.iter().find(|r| r.median_ms.is_none()) {
                return (*missing).clone();
            }
            let medians: Vec<f64> = all.iter().filter_map(|r| r.median_ms).collect();
            let fastest = all.iter().filter_map(|r| r.min_ms).fold(f64::INFINITY, f64::min);
            let median = super::bench::median(&medians).expect("every round has a time");
            all[0].clone().timed(median, fastest)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mods::ModSpec;
    use crate::record::Implementation;
    use crate::sweep::Shape;

    fn shape(seqlen: usize) -> Shape {
        Shape { batch: 1, heads_q: 2, heads_kv: 2, seqlen_q: seqlen, seqlen_k: seqlen, head_dim: 128, head_dim_v: None, causal: false }
    }

    fn rec(i: Implementation, seqlen: usize, ms: Option<(f64, f64)>) -> Record {
        let r = Record::new(i, shape(seqlen), "bf16", "p", "k");
        match ms {
            Some((median, min)) => r.timed(median, min),
            None => r.unavailable("refused"),
        }
    }

    #[test]
    fn merged_records_take_the_median_of_medians_and_the_fastest_time() {
        use Implementation::*;
        let rounds = vec![
            vec![rec(Flashrs, 4096, Some((1.0, 0.9))), rec(Fa3, 4096, Some((2.0, 1.5)))],
            vec![rec(Flashrs, 4096, Some((3.0, 0.8))), rec(Fa3, 4096, None)],
            vec![rec(Flashrs, 4096, Some((2.0, 1.9))), rec(Fa3, 4096, Some((1.0, 1.0)))],
        ];
        let merged = merge(&rounds);
        assert_eq!((merged[0].median_ms, merged[0].min_ms), (Some(2.0), Some(0.8)));
        // Rates follow the merged median.
        assert_eq!(merged[0].tflops, rec(Flashrs, 4096, Some((2.0, 0.8))).tflops);
        // A round without a time makes the position n/a, with that round's reason.
        assert_eq!((merged[1].median_ms, merged[1].note.as_deref()), (None, Some("refused")));
        assert_eq!(merge(&[]).len(), 0);
    }

    #[test]
    fn interleaved_ratios_pair_each_round_and_skip_rounds_without_both_times() {
        use Implementation::*;
        // Two configurations of ours per round: the faster of each round counts.
        let ours = vec![
            vec![rec(Flashrs, 4096, Some((2.0, 2.0))), rec(Flashrs, 4096, Some((1.0, 1.0)))],
            vec![rec(Flashrs, 4096, Some((2.0, 2.0)))],
            vec![rec(Flashrs, 4096, Some((1.0, 1.0)))],
            vec![rec(Flashrs, 4096, None)],
        ];
        let theirs = vec![rec(Fa3, 4096, Some((1.1, 1.0))), rec(Fa3, 4096, Some((2.4, 2.0))), rec(Fa3, 4096, None), rec(Fa3, 4096, Some((1.0, 1.0)))];
        let i = Interleaved::new(&ours, &theirs).unwrap();
        assert_eq!(i.against, Fa3);
        assert_eq!(i.ratios.len(), 2);
        assert!((i.ratios[0] - 1.1).abs() < 1e-12 && (i.ratios[1] - 1.2).abs() < 1e-12);
        assert!((i.median - 1.15).abs() < 1e-12 && i.min == i.ratios[0] && i.max == i.ratios[1]);
        assert!(i.is_of(Fa3, &ours[0][0]) && !i.is_of(TorchCudnn, &ours[0][0]));
        assert!(!i.is_of(Fa3, &ours[0][0].clone().with_mods(ModSpec { alibi: true, ..ModSpec::default() })));
        assert!(Interleaved::new(&ours[2..], &theirs[2..]).is_none());
        // JSON: the problem's fields flattened beside the ratios.
        let v = serde_json::to_value(&i).unwrap();
        assert_eq!((&v["against"], &v["seqlen_q"], &v["median"]), (&"fa3".into(), &4096.into(), &serde_json::json!(i.median)));
        assert_eq!(serde_json::from_value::<Interleaved>(v).unwrap(), i);
    }

    #[test]
    fn summaries_over_rounds_take_the_geomean_of_the_rows_medians() {
        use Implementation::*;
        let records = vec![rec(Flashrs, 512, Some((1.0, 1.0))), rec(Flashrs, 4096, Some((1.0, 1.0))), rec(TorchCudnn, 512, Some((1.0, 1.0))), rec(Fa3, 4096, None)];
        let row = |against, seqlen, median| Interleaved { against, shape: shape(seqlen), mods: ModSpec::default(), ratios: vec![median], median, min: median, max: median };
        let rows = vec![row(TorchCudnn, 512, 4.0), row(TorchCudnn, 4096, 1.0), row(Fa3, 4096, 1.5)];
        let s = crate::compare::summarize_interleaved(&records, &rows);
        assert_eq!(s.iter().map(|c| c.against).collect::<Vec<_>>(), [TorchCudnn, Fa3]);
        assert_eq!((s[0].rows, s[0].rows_seqlen_ge_2048), (2, 1));
        assert!((s[0].geomean.unwrap() - 2.0).abs() < 1e-12 && (s[0].geomean_seqlen_ge_2048.unwrap() - 1.0).abs() < 1e-12);
        assert_eq!((s[1].rows, s[1].geomean), (1, Some(1.5)));
    }
}
