//! Key-length and causal masking: which keys a query row sees (both kernel families), and
//! applying that to the `mma.sync` fragment layout (the wgmma layout's `Mask::apply_wgmma` is
//! in `hopper::mask`).
use crate::arch::mma::FragC;

/// Which keys each query row may see.
#[derive(Clone, Copy)]
pub struct Mask {
    /// Keys per sequence: columns at or past it do not exist.
    pub seqlen_k: i32,
    /// `Some(seqlen_k - seqlen_q)` under causal masking: row `r` sees columns `<= r + offset`
    /// (the diagonal aligned to the bottom-right corner).
    pub causal_offset: Option<i32>,
}

impl Mask {
    /// True when some score of the block `rows x [col0, col0 + cols)` is masked, where `row0` is
    /// the block's first row: only those blocks pay for [`Mask::apply`].
    #[inline(always)]
    pub fn touches(&self, row0: i32, col0: i32, cols: i32) -> bool {
        let last = col0 + cols - 1;
        last >= self.seqlen_k || matches!(self.causal_offset, Some(off) if last > row0 + off)
    }

    /// Columns row `r` may see are those below this.
    #[inline(always)]
    pub fn row_limit(&self, r: i32) -> i32 {
        match self.causal_offset {
            Some(off) => self.seqlen_k.min(r + off + 1),
            None => self.seqlen_k,
        }
    }

    /// Sets masked scores to `-inf`. `row` is the lane's first row (tile 0, `lane/4`), `col`
    /// its first column (`col0 + 2*(lane%4)`).
    #[inline(always)]
    pub fn apply<const MT: usize, const SN: usize>(&self, s: &mut [[FragC; SN]; MT], row: i32, col: i32) {
        for mt in 0..MT {
            for h in 0..2 {
                let limit = self.row_limit(row + (mt * 16 + 8 * h) as i32);
                for j in 0..SN {
                    for e in 0..2 {
                        if col + (j * 8 + e) as i32 >= limit {
                            s[mt][j][2 * h + e] = f32::NEG_INFINITY;
                        }
                    }
                }
            }
        }
    }
}
