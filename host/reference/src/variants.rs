//! Attention variants as the reference defines them, on top of [`Problem`]'s masking:
//!
//! * sliding window `(left, right)` (FlashAttention's `window_size`, `None` = unbounded): query
//!   row `i` sees key `j` when `diag - left <= j <= diag + right`, `diag = i + seqlen_k -
//!   seqlen_q` (bottom-right aligned); causal masking is `right = 0` and combines with it;
//! * softcap `cap`: the scaled score `s` becomes `cap * tanh(s / cap)`;
//! * ALiBi: `- slope * |diag - j|` added after the softcap, one slope per query head (or per
//!   (batch, head)); under causal masking FlashAttention-2 adds `slope * j` instead, the same
//!   softmax but a log-sum-exp `slope * diag` higher;
//! * sinks: one logit per query head that joins every row's softmax denominator (gpt-oss): the
//!   probabilities of the row's keys sum to less than 1 and its log-sum-exp includes the sink;
//!   a row that sees no key has output 0 and log-sum-exp the sink's logit;
//! * block sparsity: key `j` counts for query row `i` only when the block of `j` (`j / 128`) is
//!   one the row's block (`i / 128`) visits, on top of the masks above;
//! * a bias: any function of (batch entry, query head, row, key) added last, in units of the
//!   scaled scores (a learned relative-position bias, as a caller's own kernels compute it).
use crate::Problem;
use core::ops::Range;

/// The variants of one call; [`Variants::NONE`] is plain attention.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Variants<'a> {
    /// Keys before (`left`) and after (`right`) the row's diagonal it sees.
    pub window: (Option<usize>, Option<usize>),
    /// Softcap on the scaled scores.
    pub softcap: Option<f64>,
    /// ALiBi slopes: `heads_q` of them, or `batch * heads_q` (`[batch, heads_q]`).
    pub alibi: Option<&'a [f64]>,
    /// Sink logits, `heads_q` of them.
    pub sinks: Option<&'a [f64]>,
    /// Block sparsity: which key blocks each query block visits.
    pub blocks: Option<Blocks<'a>>,
    /// A bias added to every score after the modifications above.
    pub bias: Option<Bias<'a>>,
}

/// A bias on the scores: `f(batch, head, row, key)` in units of the scaled scores, where `row`
/// and `key` are positions within the sequence. Equal when it is the same function.
#[derive(Clone, Copy)]
pub struct Bias<'a>(pub &'a (dyn Fn(usize, usize, usize, usize) -> f64 + Sync));

impl core::fmt::Debug for Bias<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Bias(..)")
    }
}

impl PartialEq for Bias<'_> {
    fn eq(&self, other: &Self) -> bool {
        core::ptr::addr_eq(self.0, other.0)
    }
}

/// Which (query block, key block) pairs of 128 x 128 a block-sparse call computes, per batch
/// entry and query head (a dimension of 1 is shared by all).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Blocks<'a> {
    /// `[batch, heads, q_blocks, kv_blocks]`: true where the pair is computed.
    pub visits: &'a [bool],
    /// Batch entries covered: 1 or the problem's batch.
    pub batch: usize,
    /// Query heads covered: 1 or the problem's `heads_q`.
    pub heads: usize,
    /// Query blocks per (batch entry, head).
    pub q_blocks: usize,
    /// Key blocks per query block.
    pub kv_blocks: usize,
}

/// Rows of a query block and keys of a key block in [`Blocks`].
pub const BLOCK: usize = 128;

impl Blocks<'_> {
    /// True when query row `row` of (`batch`, `head`) computes key `key`'s block.
    pub fn visits(&self, batch: usize, head: usize, row: usize, key: usize) -> bool {
        let (b, h) = (if self.batch == 1 { 0 } else { batch }, if self.heads == 1 { 0 } else { head });
        let kb = key / BLOCK;
        kb < self.kv_blocks && self.visits[((b * self.heads + h) * self.q_blocks + row / BLOCK) * self.kv_blocks + kb]
    }
}

impl Variants<'_> {
    /// Plain attention.
    pub const NONE: Variants<'static> = Variants { window: (None, None), softcap: None, alibi: None, sinks: None, blocks: None, bias: None };

    /// The keys query row `row` sees: a range, possibly empty.
    pub fn visible(&self, p: &Problem, row: usize) -> Range<usize> {
        let diag = row as i64 + p.seqlen_k as i64 - p.seqlen_q as i64;
        let right = if p.causal { Some(0) } else { self.window.1 };
        let lo = self.window.0.map_or(0, |l| diag - l as i64).clamp(0, p.seqlen_k as i64);
        let hi = right.map_or(p.seqlen_k as i64, |r| diag + r as i64 + 1).clamp(0, p.seqlen_k as i64);
        lo as usize..(hi as usize).max(lo as usize)
    }

    /// The score of key `key` for query row `row` of (`batch`, `head`) from its scaled dot
    /// product `s`, and the derivative of that score with respect to `s`.
    pub fn score(&self, p: &Problem, batch: usize, head: usize, row: usize, key: usize, s: f64) -> (f64, f64) {
        let (mut x, mut ds) = (s, 1.0);
        if let Some(cap) = self.softcap {
            let t = (s / cap).tanh();
            (x, ds) = (cap * t, 1.0 - t * t);
        }
        if let Some(slopes) = self.alibi {
            let slope = if slopes.len() == p.heads_q { slopes[head] } else { slopes[batch * p.heads_q + head] };
            let diag = row as i64 + p.seqlen_k as i64 - p.seqlen_q as i64;
            x -= slope * (diag - key as i64).abs() as f64;
        }
        if let Some(Bias(f)) = self.bias {
            x += f(batch, head, row, key);
        }
        (x, ds)
    }

    /// True when the block mask (if any) lets query row `row` of (`batch`, `head`) see key `key`.
    pub fn block_visits(&self, batch: usize, head: usize, row: usize, key: usize) -> bool {
        self.blocks.is_none_or(|b| b.visits(batch, head, row, key))
    }

    /// Query head `head`'s sink logit, if there are sinks.
    pub fn sink(&self, head: usize) -> Option<f64> {
        self.sinks.map(|s| s[head])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{RefInputs, reference_row_with};

    fn problem(seqlen_q: usize, seqlen_k: usize, causal: bool) -> Problem {
        Problem { batch: 2, seqlen_q, seqlen_k, heads_q: 2, heads_kv: 1, head_dim: 2, head_dim_v: 2, causal, scale: 1.0 }
    }

    #[test]
    fn windows_are_bottom_right_aligned_and_combine_with_causal() {
        // 3 queries over 6 keys: the diagonals are keys 3, 4, 5.
        let p = problem(3, 6, false);
        let w = |l, r| Variants { window: (l, r), ..Variants::NONE };
        assert_eq!((0..3).map(|i| w(Some(1), Some(0)).visible(&p, i)).collect::<Vec<_>>(), [2..4, 3..5, 4..6]);
        assert_eq!((0..3).map(|i| w(Some(0), Some(1)).visible(&p, i)).collect::<Vec<_>>(), [3..5, 4..6, 5..6]);
        assert_eq!(w(None, Some(0)).visible(&p, 0), 0..4);
        assert_eq!(w(Some(2), None).visible(&p, 0), 1..6);
        // Causal caps the right side at the diagonal whatever the window says.
        assert_eq!(w(Some(1), Some(3)).visible(&problem(3, 6, true), 0), 2..4);
        // More queries than keys: the first rows' windows lie before key 0.
        let tall = problem(6, 2, true);
        assert_eq!((0..6).map(|i| w(Some(1), None).visible(&tall, i)).collect::<Vec<_>>(), [0..0, 0..0, 0..0, 0..0, 0..1, 0..2]);
        assert_eq!(Variants::NONE.visible(&tall, 4), 0..1);
    }

    #[test]
    fn softcap_bounds_scores_and_alibi_penalises_distance() {
        let p = problem(1, 3, false);
        let cap = Variants { softcap: Some(2.0), ..Variants::NONE };
        let (x, dx) = cap.score(&p, 0, 0, 0, 0, 50.0);
        assert!((x - 2.0).abs() < 1e-12 && dx.abs() < 1e-12);
        let (x, dx) = cap.score(&p, 0, 0, 0, 0, 1e-9);
        assert!((x - 1e-9).abs() < 1e-15 && (dx - 1.0).abs() < 1e-12);
        // Slopes per (batch, head): batch 1, head 1 is the fourth; row 0's diagonal is key 2.
        let slopes = [0.0, 0.0, 0.0, 0.5];
        let alibi = Variants { alibi: Some(&slopes), ..Variants::NONE };
        assert_eq!(alibi.score(&p, 1, 1, 0, 0, 1.0), (0.0, 1.0));
        assert_eq!(alibi.score(&p, 1, 1, 0, 2, 1.0), (1.0, 1.0));
        assert_eq!(alibi.score(&p, 0, 1, 0, 0, 1.0), (1.0, 1.0));
    }

    #[test]
    fn a_sink_joins_the_denominator_and_keeps_rows_without_keys_at_zero() {
        // Zero queries: every key scores 0, so the row's lse is ln(keys + e^sink).
        let p = problem(3, 2, true);
        let (q, k) = (vec![0.0; 12], vec![0.0; 4]);
        let v = vec![1.0, 1.0, 3.0, 3.0];
        let sinks = [0.5, -0.5];
        let var = Variants { sinks: Some(&sinks), ..Variants::NONE };
        let x = RefInputs { q: &q, k: &k, v: &v };
        // Row 0 sees no key: output 0, lse the sink's logit.
        let r0 = reference_row_with(&p, &var, &x, 0, 1, 0);
        assert_eq!((r0.out.clone(), r0.lse), (vec![0.0, 0.0], -0.5));
        // Row 2 sees both keys: weights 1 / (2 + e^0.5) each.
        let r2 = reference_row_with(&p, &var, &x, 0, 0, 2);
        let z = 2.0 + 0.5f64.exp();
        assert!((r2.lse - z.ln()).abs() < 1e-12);
        assert!((r2.out[0] - 4.0 / z).abs() < 1e-12);
    }

    #[test]
    fn a_block_mask_drops_the_keys_of_skipped_blocks() {
        // One query row over 300 keys (3 key blocks) that visits block 1 only: the same as
        // attending keys 128..256 alone.
        let (d, n) = (2, 300);
        let q = vec![0.3, -0.7];
        let k: Vec<f64> = (0..n * d).map(|i| ((i * 37 % 101) as f64 / 50.0) - 1.0).collect();
        let v: Vec<f64> = (0..n * d).map(|i| ((i * 53 % 97) as f64 / 40.0) - 1.2).collect();
        let p = Problem { batch: 1, seqlen_q: 1, seqlen_k: n, heads_q: 1, heads_kv: 1, head_dim: d, head_dim_v: d, causal: false, scale: 0.5 };
        let visits = [false, true, false];
        let blocks = Blocks { visits: &visits, batch: 1, heads: 1, q_blocks: 1, kv_blocks: 3 };
        let var = Variants { blocks: Some(blocks), ..Variants::NONE };
        let sparse = reference_row_with(&p, &var, &RefInputs { q: &q, k: &k, v: &v }, 0, 0, 0);
        let sub = Problem { seqlen_k: 128, ..p };
        let dense = reference_row_with(&sub, &Variants::NONE, &RefInputs { q: &q, k: &k[128 * d..256 * d], v: &v[128 * d..256 * d] }, 0, 0, 0);
        assert!((sparse.lse - dense.lse).abs() < 1e-12);
        assert!(sparse.out.iter().zip(&dense.out).all(|(a, b)| (a - b).abs() < 1e-12));
        // No visited block: no key, as a row past a window.
        let none = [false; 3];
        let var = Variants { blocks: Some(Blocks { visits: &none, ..blocks }), ..Variants::NONE };
        let empty = reference_row_with(&p, &var, &RefInputs { q: &q, k: &k, v: &v }, 0, 0, 0);
        assert_eq!((empty.lse, empty.out), (f64::NEG_INFINITY, vec![0.0, 0.0]));
    }
}
