//! Online softmax over the score fragments a warp holds.
//!
//! Each lane holds two rows of every 16-row tile (`lane/4` and `lane/4 + 8`) and, of each row,
//! the columns `2*(lane%4) + {0,1}` of every 8-column tile; a row's four holders are the four
//! lanes of a quad, so row reductions take two butterfly shuffles.
use crate::arch::ex2::{ex2_approx_f32, lg2_approx_f32, rcp_approx_f32};
use crate::arch::mma::FragC;
use crate::arch::shfl::{quad_max_f32 as quad_max, quad_sum_f32 as quad_sum};

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
                // A row that has seen only masked keys keeps max = -inf; subtracting 0 instead
                // of -inf keeps its probabilities at 0 rather than NaN.
                let base = if m == f32::NEG_INFINITY { 0.0 } else { m * scale_log2 };
                let alpha = ex2_approx_f32(self.max[mt][h] * scale_log2 - base);
                self.max[mt][h] = m;
                let mut rowsum = 0.0;
                for j in 0..SN {
                    for e in 0..2 {
                        let p = ex2_approx_f32(s[mt][j][2 * h + e] * scale_log2 - base);
                        s[mt][j][2 * h + e] = p;
                        rowsum += p;
                    }
                }
                self.sum[mt][h] = self.sum[mt][h] * alpha + rowsum;
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
        let mut lse = [[0.0; 2]; MT];
        for mt in 0..MT {
            for h in 0..2 {
                let sum = quad_sum(self.sum[mt][h]);
                let inv = if sum == 0.0 { 0.0 } else { rcp_approx_f32(sum) };
                for j in 0..ON {
                    o[mt][j][2 * h] *= inv;
                    o[mt][j][2 * h + 1] *= inv;
                }
                lse[mt][h] = if sum == 0.0 {
                    f32::NEG_INFINITY
                } else {
                    (self.max[mt][h] * scale_log2 + lg2_approx_f32(sum)) * core::f32::consts::LN_2
                };
            }
        }
        lse
    }
}
