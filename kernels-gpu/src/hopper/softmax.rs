//! Online softmax over a consumer warpgroup's score accumulator (layout: see [`super::mask`]).
//!
//! A thread holds two rows (`h = 0, 1`); each row's values are spread over the 4 lanes of a
//! quad (`t = 0..4`), so row reductions take two butterfly shuffles. The arithmetic is
//! [`crate::lse`]'s, shared with the mma.sync kernels.
use crate::arch::shfl::{quad_max_f32 as quad_max, quad_sum_f32 as quad_sum};
use crate::lse;

/// Running max and (lane-partial) sum of the thread's two rows.
pub struct OnlineSoftmax {
    /// Running max of raw scores per row (`-inf` until a visible key is seen).
    pub max: [f32; 2],
    /// This lane's share of the running sum of probabilities (as computed, `2^p_log2` times).
    pub sum: [f32; 2],
    /// Probabilities come out `2^p_log2` times their value ([`super::gemm::Operands::P_LOG2`]): a term of
    /// the exponent, where a multiply would cost one per score. The sums carry the factor too,
    /// so that `O / sum` is unchanged; [`OnlineSoftmax::finish`] takes it out of the rest.
    p_log2: u32,
}

impl OnlineSoftmax {
    /// No keys seen yet; probabilities `2^p_log2` times their value.
    #[inline(always)]
    pub fn new(p_log2: u32) -> Self {
        OnlineSoftmax { max: [f32::NEG_INFINITY; 2], sum: [0.0; 2], p_log2 }
    }

    /// Folds a tile of scores into the running state, turning `s` into unnormalised
    /// probabilities in place. Returns each row's factor `2^(old max - new max)` (scaled) by
    /// which the output accumulator must be multiplied ([`rescale`]).
    #[inline(always)]
    pub fn update<const SN: usize>(&mut self, s: &mut [f32; SN], scale_log2: f32) -> [f32; 2] {
        let mut alpha = [0.0; 2];
        for h in 0..2 {
            let mut m = self.max[h];
            for i in 0..SN / 4 {
                m = m.max(s[4 * i + 2 * h]).max(s[4 * i + 2 * h + 1]);
            }
            let m = quad_max(m);
            let neg_base = lse::neg_base(m, scale_log2);
            alpha[h] = lse::exp_scaled(self.max[h], scale_log2, neg_base);
            self.max[h] = m;
            // Known at compile time: a 16-bit kernel's exponents stay as they were.
            let neg_base = if self.p_log2 != 0 { neg_base + self.p_log2 as f32 } else { neg_base };
            let mut rowsum = 0.0;
            for i in 0..SN / 4 {
                for j in 0..2 {
                    let e = 4 * i + 2 * h + j;
                    let p = lse::exp_scaled(s[e], scale_log2, neg_base);
                    s[e] = p;
                    rowsum += p;
                }
            }
            self.sum[h] = lse::rescaled_sum(self.sum[h], alpha[h], rowsum);
        }
        alpha
    }

    /// Normalises `o` by the row sums and returns each row's natural-log log-sum-exp of the
    /// scaled scores (`-inf`, with `o` = 0, for rows that saw no key).
    #[inline(always)]
    pub fn finish<const ON: usize>(&self, o: &mut [f32; ON], scale_log2: f32) -> [f32; 2] {
        self.finish_by(o, |m, sum| (lse::inv_sum(sum), lse::of_row(m, scale_log2, sum)))
    }

    /// [`OnlineSoftmax::finish`] with a sink of logit `sink_log2` in every row's denominator
    /// (see [`lse::with_sink`]).
    #[inline(always)]
    pub fn finish_with_sink<const ON: usize>(&self, o: &mut [f32; ON], scale_log2: f32, sink_log2: f32) -> [f32; 2] {
        self.finish_by(o, |m, sum| lse::with_sink(m, scale_log2, sum, sink_log2))
    }

    /// Multiplies each row of `o` by the first of `norm(max, sum)` and returns the second, the
    /// row's log-sum-exp; `o` and the sum lose the probabilities' factor `2^p_log2`.
    #[inline(always)]
    fn finish_by<const ON: usize>(&self, o: &mut [f32; ON], norm: impl Fn(f32, f32) -> (f32, f32)) -> [f32; 2] {
        let mut out = [0.0; 2];
        let mut inv = [0.0; 2];
        let scaled = self.p_log2 != 0;
        let unscale = 1.0 / (1u32 << self.p_log2) as f32;
        for h in 0..2 {
            let sum = quad_sum(self.sum[h]);
            (inv[h], out[h]) = norm(self.max[h], if scaled { sum * unscale } else { sum });
            if scaled {
                inv[h] *= unscale;
            }
        }
        rescale(o, inv);
        out
    }
}

/// Multiplies each row of an accumulator (`o[4i + 2h + j]`, row `h`) by `factor[h]`.
#[inline(always)]
pub fn rescale<const ON: usize>(o: &mut [f32; ON], factor: [f32; 2]) {
    for i in 0..ON / 4 {
        for h in 0..2 {
            for j in 0..2 {
                o[4 * i + 2 * h + j] *= factor[h];
            }
        }
    }
}
