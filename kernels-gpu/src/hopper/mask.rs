//! Key-length and causal masking of a consumer warpgroup's score accumulator.
//!
//! Accumulator layout of `wgmma m64nNk16` (f32): thread (warp `w` of the warpgroup, lane
//! `4g + t`) holds `s[4i + 2h + j]` = row `16w + g + 8h`, column `8i + 2t + j`.

pub use crate::mask::Mask;

impl Mask {
    /// Sets masked scores to `-inf`. `row` is the thread's first row (`h = 0`), `col` its
    /// first column (`col0 + 2t`).
    #[inline(always)]
    pub fn apply_wgmma<const SN: usize>(&self, s: &mut [f32; SN], row: i32, col: i32) {
        for h in 0..2 {
            let limit = self.row_limit(row + 8 * h as i32);
            for i in 0..SN / 4 {
                for j in 0..2 {
                    if col + (8 * i + j) as i32 >= limit {
                        s[4 * i + 2 * h + j] = f32::NEG_INFINITY;
                    }
                }
            }
        }
    }
}
