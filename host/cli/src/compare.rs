//! Ours against each other implementation: per-shape speed ratios and their geometric means.

use serde::{Deserialize, Serialize};

use super::mods::ModSpec;
use super::record::{Implementation, Record};
use super::sweep::Shape;

/// Rows with at least this query length form the "long sequences" summary, where launch
/// overheads no longer dominate.
pub const LONG_SEQLEN: usize = 2048;

/// Geometric means of ours/theirs throughput against one implementation. Field names are
/// part of the JSON output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// The other implementation.
    pub against: Implementation,
    /// Shapes where both have a time.
    pub rows: usize,
    /// Geometric mean of ours/theirs TFLOPS over those shapes (above 1: ours is faster).
    pub geomean: Option<f64>,
    /// Shapes with `seqlen_q >= LONG_SEQLEN` where both have a time.
    pub rows_seqlen_ge_2048: usize,
    /// Geometric mean over those.
    pub geomean_seqlen_ge_2048: Option<f64>,
}

/// Ours/theirs throughput (their time over ours: both did the same work).
pub fn speedup(ours: &Record, theirs: &Record) -> Option<f64> {
    Some(theirs.median_ms? / ours.median_ms?)
}

/// Geometric mean; `None` for no values.
pub fn geomean(xs: impl IntoIterator<Item = f64>) -> Option<f64> {
    let (n, log_sum) = xs.into_iter().fold((0usize, 0.0f64), |(n, s), x| (n + 1, s + x.ln()));
    (n > 0).then(|| (log_sum / n as f64).exp())
}

/// Whether two records ran the same problem: shape and attention modifications.
pub fn same_problem(a: &Record, b: &Record) -> bool {
    a.shape == b.shape && a.mods == b.mods
}

/// The record of `implementation` for the problem `ours` ran, if any.
pub fn find<'a>(records: &'a [Record], implementation: Implementation, ours: &Record) -> Option<&'a Record> {
    records.iter().find(|r| r.implementation == implementation && same_problem(r, ours))
}

/// Our fastest record of each problem (shape and modifications), in the order they first
/// appear. With several tile configurations per shape (`--all-configs`) the comparison is with
/// the best of them.
pub fn best_ours(records: &[Record]) -> Vec<&Record> {
    let mut best: Vec<&Record> = Vec::new();
    let time = |r: &Record| r.median_ms.unwrap_or(f64::INFINITY);
    for r in records.iter().filter(|r| r.implementation == Implementation::Flashrs) {
        match best.iter_mut().find(|b| same_problem(b, r)) {
            Some(b) if time(r) < time(b) => *b = r,
            Some(_) => {}
            None => best.push(r),
        }
    }
    best
}

/// One comparison per other implementation that has any record.
pub fn summarize(records: &[Record]) -> Vec<Comparison> {
    let ours = best_ours(records);
    let pairs = others(records).flat_map(|against| {
        ours.iter().filter_map(move |o| Some((against, o.shape.seqlen_q, speedup(o, find(records, against, o)?)?))).collect::<Vec<_>>()
    });
    comparisons(records, pairs)
}

/// The other implementations with any record, in [`Implementation::ALL`] order.
fn others(records: &[Record]) -> impl Iterator<Item = Implementation> + '_ {
    Implementation::ALL.into_iter().filter(|&i| i != Implementation::Flashrs && records.iter().any(|r| r.implementation == i))
}

/// One comparison per other implementation of `records`, from `(against, seqlen_q, ratio)`
/// per shape.
fn comparisons(records: &[Record], pairs: impl IntoIterator<Item = (Implementation, usize, f64)>) -> Vec<Comparison> {
    let pairs: Vec<(Implementation, usize, f64)> = pairs.into_iter().collect();
    others(records)
        .map(|against| {
            let all: Vec<(usize, f64)> = pairs.iter().filter(|p| p.0 == against).map(|&(_, s, x)| (s, x)).collect();
            let long: Vec<f64> = all.iter().filter(|(s, _)| *s >= LONG_SEQLEN).map(|&(_, x)| x).collect();
            Comparison {
                against,
                rows: all.len(),
                geomean: geomean(all.iter().map(|&(_, x)| x)),
                rows_seqlen_ge_2048: long.len(),
                geomean_seqlen_ge_2048: geomean(long),
            }
        })
        .collect()
}

/// One problem against one other implementation over interleaved rounds (`--rounds`): in
/// each round both ran the problem back to back, so the GPU's clocks moved little between
/// the two times, and the median of the per-round ratios is steadier than the ratio of
/// medians taken minutes apart. Field names are part of the JSON output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interleaved {
    /// The other implementation.
    pub against: Implementation,
    /// The problem.
    #[serde(flatten)]
    pub shape: Shape,
    /// Its attention modifications.
    #[serde(default)]
    pub mods: ModSpec,
    /// Ours/theirs throughput of each round where both had a time (our fastest
    /// configuration of the round), in round order.
    pub ratios: Vec<f64>,
    /// Their median.
    pub median: f64,
    /// The lowest.
    pub min: f64,
    /// The highest.
    pub max: f64,
}

impl Interleaved {
    /// The rounds' ratios of `ours` (our records of one problem, by round) against `theirs`
    /// (one implementation's, by round); `None` when no round has both times.
    pub fn new(ours: &[Vec<Record>], theirs: &[Record]) -> Option<Interleaved> {
        let ratios: Vec<f64> = ours.iter().zip(theirs).filter_map(|(o, t)| speedup(best_ours(o).first()?, t)).collect();
        let median = super::bench::median(&ratios)?;
        let first = theirs.first()?;
        let (min, max) = ratios.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        Some(Interleaved { against: first.implementation, shape: first.shape, mods: first.mods, ratios, median, min, max })
    }

    /// Whether it compares `ours`'s problem with `against`.
    pub fn is_of(&self, against: Implementation, ours: &Record) -> bool {
        self.against == against && self.shape == ours.shape && self.mods == ours.mods
    }
}

/// [`summarize`] over interleaved rounds: the geometric means of each problem's median
/// per-round ratio, one comparison per other implementation of `records`.
pub fn summarize_interleaved(records: &[Record], rows: &[Interleaved]) -> Vec<Comparison> {
    comparisons(records, rows.iter().map(|r| (r.against, r.shape.seqlen_q, r.median)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::Shape;

    fn shape(seqlen: usize) -> Shape {
        Shape { batch: 1, heads_q: 1, heads_kv: 1, seqlen_q: seqlen, seqlen_k: seqlen, head_dim: 64, head_dim_v: None, causal: false }
    }

    fn rec(i: Implementation, seqlen: usize, ms: Option<f64>) -> Record {
        let r = Record::new(i, shape(seqlen), "f16", "p", "k");
        match ms {
            Some(ms) => r.timed(ms, ms),
            None => r.unavailable("refused"),
        }
    }

    #[test]
    fn geomean_basics() {
        assert_eq!(geomean([]), None);
        assert!((geomean([2.0, 8.0]).unwrap() - 4.0).abs() < 1e-12);
    }

    #[test]
    fn summary_pairs_best_ours_with_each_backend_and_skips_missing_times() {
        use Implementation::*;
        let records = vec![
            rec(Flashrs, 512, Some(2.0)),
            rec(Flashrs, 512, Some(1.0)), // a faster configuration of the same shape
            rec(Flashrs, 4096, Some(4.0)),
            rec(Flashrs, 8192, None),
            rec(TorchFa2, 512, Some(4.0)),
            rec(TorchFa2, 4096, Some(2.0)),
            rec(TorchFa2, 8192, Some(2.0)),
            rec(TorchCudnn, 512, None),
        ];
        assert_eq!(best_ours(&records).iter().map(|r| r.median_ms).collect::<Vec<_>>(), vec![Some(1.0), Some(4.0), None]);
        let s = summarize(&records);
        assert_eq!(s.len(), 2);
        let fa2 = &s[0];
        assert_eq!((fa2.against, fa2.rows, fa2.rows_seqlen_ge_2048), (TorchFa2, 2, 1));
        // Ratios 4/1 and 2/4.
        assert!((fa2.geomean.unwrap() - 2f64.sqrt()).abs() < 1e-12);
        assert!((fa2.geomean_seqlen_ge_2048.unwrap() - 0.5).abs() < 1e-12);
        assert_eq!((s[1].against, s[1].rows, s[1].geomean), (TorchCudnn, 0, None));
    }

    #[test]
    fn records_of_another_problem_are_not_paired() {
        use Implementation::*;
        let window = crate::mods::ModSpec { window: (Some(64), Some(0)), ..Default::default() };
        let ours = rec(Flashrs, 512, Some(1.0)).with_mods(window);
        let plain = rec(TorchFa2, 512, Some(2.0));
        assert!(find(std::slice::from_ref(&plain), TorchFa2, &ours).is_none());
        let records = vec![ours.clone(), rec(Flashrs, 512, Some(3.0)), plain];
        assert_eq!(best_ours(&records).len(), 2);
        assert_eq!(summarize(&records)[0].rows, 1);
    }
}
