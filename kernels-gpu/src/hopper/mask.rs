//! Key-length and causal masking of a consumer warpgroup's score accumulator.
//!
//! Accumulator layout of `wgmma m64nNk16` (f32): thread (warp `w` of the warpgroup, lane
//! `4g + t`) holds `s[4i + 2h + j]` = row `16w + g + 8h`, column `8i + 2t + j`.

/// Which keys each query row may see.
#[derive(Clone, Copy)]
pub struct Mask {
    /// Keys per sequence: columns at or past it do not exist.
    pub seqlen_k: i32,
    /// `Some(seqlen_k - seqlen_q)` under causal masking: row `r` sees columns `<= r + offset`.
    pub causal_offset: Option<i32>,
}

impl Mask {
    /// True when some score of rows `row0 .. row0 + 64` x columns `col0 .. col0 + cols` is
    /// masked: only those tiles pay for [`Mask::apply`].
    #[inline(always)]
    pub fn touches(&self, row0: i32, col0: i32, cols: i32) -> bool {
        let last = col0 + cols - 1;
        last >= self.seqlen_k || matches!(self.causal_offset, Some(off) if last > row0 + off)
    }

    /// Sets masked scores to `-inf`. `row` is the thread's first row (`h = 0`), `col` its
    /// first column (`col0 + 2t`).
    #[inline(always)]
    pub fn apply<const SN: usize>(&self, s: &mut [f32; SN], row: i32, col: i32) {
        for h in 0..2 {
            let r = row + 8 * h as i32;
            let limit = match self.causal_offset {
                Some(off) => self.seqlen_k.min(r + off + 1),
                None => self.seqlen_k,
            };
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
