//! Online-softmax and log-sum-exp arithmetic every kernel shares, one scalar at a time; the
//! kernels apply it to their own fragment layouts (`fwd::softmax`, `hopper::softmax`) and
//! merges (`fwd::warp_merge`, `fwd::split_merge`).
//!
//! A row's running state is the max `m` of its raw scores and the sum of `2^(s * scale_log2 -
//! m * scale_log2)`: the softmax scale and `log2 e` fold into one FMA per score, and the
//! exponential is `ex2`. Partial results of one row (from warps or CTAs that each saw part of
//! its keys) merge as `lse = log sum_i exp(lse_i)`, `O = sum_i exp(lse_i - lse) O_i`. A row that
//! saw no key has output 0 and log-sum-exp `-inf`, and merges as such.
use crate::arch::ex2::{ex2_approx_f32, lg2_approx_f32, rcp_approx_f32};
use crate::arch::fma::fma_rn_f32;
use core::f32::consts::{LN_2, LOG2_E};

/// Minus the scaled max a row's scores are exponentiated against: `-(m * scale_log2)`, or 0
/// while the row has seen only masked keys (`m = -inf`), which keeps their probabilities 0
/// rather than NaN.
#[inline(always)]
pub fn neg_base(m: f32, scale_log2: f32) -> f32 {
    if m == f32::NEG_INFINITY { 0.0 } else { -(m * scale_log2) }
}

/// `2^(s * scale_log2 + neg_base)`: a score's unnormalised probability, or with the previous
/// max as `s`, the factor the row's accumulators are rescaled by.
#[inline(always)]
pub fn exp_scaled(s: f32, scale_log2: f32, neg_base: f32) -> f32 {
    ex2_approx_f32(fma_rn_f32(s, scale_log2, neg_base))
}

/// The running sum after a tile: the old sum rescaled by `alpha`, plus the tile's.
#[inline(always)]
pub fn rescaled_sum(sum: f32, alpha: f32, tile_sum: f32) -> f32 {
    fma_rn_f32(sum, alpha, tile_sum)
}

/// What a row's accumulator is multiplied by to normalise it: `1 / sum`, 0 for a row that saw
/// no key.
#[inline(always)]
pub fn inv_sum(sum: f32) -> f32 {
    if sum == 0.0 { 0.0 } else { rcp_approx_f32(sum) }
}

/// A row's natural-log log-sum-exp of its scaled scores from its final state (`sum` summed
/// over the row's lanes): `-inf` for a row that saw no key.
#[inline(always)]
pub fn of_row(m: f32, scale_log2: f32, sum: f32) -> f32 {
    if sum == 0.0 { f32::NEG_INFINITY } else { fma_rn_f32(m, scale_log2, lg2_approx_f32(sum)) * LN_2 }
}

/// A row's normaliser and natural-log log-sum-exp when a sink of logit `sink_log2` (log2 units
/// of the scaled scores; `-inf`: none) joins its denominator: the accumulator is multiplied by
/// the first, and the second includes the sink. A row that saw no key gets 0 and the sink's
/// logit (`-inf` without a sink).
///
/// No branch skips the use of `sum`: it is a quad shuffle's result, and the shuffles'
/// `asm!` is pure, so LLVM sinks them into whichever branch uses them; a branch taken by some
/// lanes only (rows that saw no key, without a sink) then left a full-warp `shfl.sync` to the
/// others, which hangs.
#[inline(always)]
pub fn with_sink(m: f32, scale_log2: f32, sum: f32, sink_log2: f32) -> (f32, f32) {
    let m = if m == f32::NEG_INFINITY { m } else { m * scale_log2 };
    let top = m.max(sink_log2);
    // Neither a key nor a sink: any finite base gives zero weights and a zero total.
    let base = if top == f32::NEG_INFINITY { 0.0 } else { top };
    let w = ex2_approx_f32(m - base);
    let total = fma_rn_f32(sum, w, ex2_approx_f32(sink_log2 - base));
    if total == 0.0 { (0.0, f32::NEG_INFINITY) } else { (w * rcp_approx_f32(total), (base + lg2_approx_f32(total)) * LN_2) }
}

/// The base a merge measures parts against: the largest part log-sum-exp, or 0 when every
/// part is `-inf` (no part saw a key).
#[inline(always)]
pub fn merge_base(max_lse: f32) -> f32 {
    if max_lse == f32::NEG_INFINITY { 0.0 } else { max_lse }
}

/// `exp(lse - base)`: a part's unnormalised weight in a merge (0 for a part that saw no key).
#[inline(always)]
pub fn part_weight(lse: f32, base: f32) -> f32 {
    ex2_approx_f32((lse - base) * LOG2_E)
}

/// The merged log-sum-exp from the merge's base and the sum of the parts' weights: `-inf` when
/// no part saw a key.
#[inline(always)]
pub fn merged(base: f32, weight_sum: f32) -> f32 {
    if weight_sum > 0.0 { base + lg2_approx_f32(weight_sum) * LN_2 } else { f32::NEG_INFINITY }
}

/// What a backward pass adds to `s * scale_log2` to recompute a probability from the forward's
/// log-sum-exp: `-lse * log2 e`, or `-inf` for a row that saw no key (`lse = -inf`), whose
/// probabilities are then 0 rather than NaN.
#[inline(always)]
pub fn neg_lse_base(lse: f32) -> f32 {
    if lse == f32::NEG_INFINITY { f32::NEG_INFINITY } else { -(lse * LOG2_E) }
}
