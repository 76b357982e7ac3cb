//! Online softmax over the score fragments a warp holds.
//!
//! Each lane holds two rows of every 16-row tile (`lane/4` and `lane/4 + 8`) and, of each row,
//! the columns `2*(lane%4) + {0,1}` of every 8-column tile; a row's four holders are the four
//! lanes of a quad, so row reductions take two butterfly shuffles. The arithmetic is
//! [`crate::lse`]'s, shared with the Hopper kernels.
use crate::arch::mma::FragC;
use crate::arch::shfl::{quad_max_f32 as quad_max, quad_sum_f32 as quad_sum};
use crate::lse;

/// Running max and (lane-partial) sum of `2 * MT` rows.
pub struct Softmax<const MT: usize> {
    /// Running max of raw scores per row (`-inf` until a key is seen).
    pub max: [[f32; 2]; MT],
    /// This lane's share of the running sum of `2^(s*scale_log2 - max*scale_log2)`.
    pub sum: [[f32; 2]; MT],
}

impl<const MT: usize> Softmax<MT> {
    /// No rows seen yet.
    #[inline(always)]
    pub fn new() -> Self {
        Softmax { max: [[f32::NEG_INFINITY; 2]; MT], sum: [[0.0; 2]; MT] }
    }

    /// Folds a tile of scores into the running state: turns `s` into unnormalised
    /// probabilities in place and rescales the output accumulators `o` by `2^(old-new max)`.
    #[inline(always)]
    pub fn update<const SN: usize, const ON: usize>(
        &mut self,
        s: &mut [[FragC; SN]; MT],
        o: &mut [[FragC; ON]; MT],
        scale_log2: f32,
    ) {
        for mt in 0..MT {
            for h in 0..2 {
                let mut m = self.max[mt][h];
                for j in 0..SN {
                    m = m.max(s[mt][j][2 * h]).max(s[mt][j][2 * h + 1]);
                }
                let m = quad_max(m);
                let neg_base = lse::neg_base(m, scale_log2);
                let alpha = lse::exp_scaled(self.max[mt][h], scale_log2, neg_base);
                self.max[mt][h] = m;
                let mut rowsum = 0.0;
                for j in 0..SN {
                    for e in 0..2 {
                        let p = lse::exp_scaled(s[mt][j][2 * h + e], scale_log2, neg_base);
                        s[mt][j][2 * h + e] = p;
                        rowsum += p;
                    }
                }
                self.sum[mt][h] = lse::rescaled_sum(self.sum[mt][h], alpha, rowsum);
                for j in 0..ON {
                    o[mt][j][2 * h] *= alpha;
                    o[mt][j][2 * h + 1] *= alpha;
                }
            }
        }
    }

    /// Normalises `o` by the row sums and returns each row's natural-log log-sum-exp of the
    /// scaled scores (`-inf`, with `o` = 0, for rows that saw no key).
    #[inline(always)]
    pub fn finish<const ON: usize>(&self, o: &mut [[FragC; ON]; MT], scale_log2: f32) -> [[f32; 2]; MT] {
        self.finish_by(o, |m, sum| (lse::inv_sum(sum), lse::of_row(m, scale_log2, sum)))
    }

    /// [`Softmax::finish`] with a sink of logit `sink_log2` in every row's denominator (see
    /// [`lse::with_sink`]).
    #[inline(always)]
    pub fn finish_with_sink<const ON: usize>(&self, o: &mut [[FragC; ON]; MT], scale_log2: f32, sink_log2: f32) -> [[f32; 2]; MT] {
        self.finish_by(o, |m, sum| lse::with_sink(m, scale_log2, sum, sink_log2))
    }

    /// Multiplies each row of `o` by the first of `norm(max, sum)` and returns the second, the
    /// row's log-sum-exp.
    #[inline(always)]
    fn finish_by<const ON: usize>(&self, o: &mut [[FragC; ON]; MT], norm: impl Fn(f32, f32) -> (f32, f32)) -> [[f32; 2]; MT] {
        let mut out = [[0.0; 2]; MT];
        for mt in 0..MT {
            for h in 0..2 {
                let (inv, row_lse) = norm(self.max[mt][h], quad_sum(self.sum[mt][h]));
                for j in 0..ON {
                    o[mt][j][2 * h] *= inv;
                    o[mt][j][2 * h + 1] *= inv;
                }
                out[mt][h] = row_lse;
            }
        }
        out
    }
}
