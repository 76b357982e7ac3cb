//! Key-length and causal masking: which keys a query row sees (both kernel families, plain
//! attention; [`crate::mods`] has the trait it implements and the sliding window), and
//! applying a [`MaskMod`] and a [`ScoreMod`] to the `mma.sync` fragment layout (the wgmma
//! layout's are in `hopper::mask`).
//!
//! Fragment layout of `mma.sync m16n8` (f32): lane `4g + t` holds, of the warp's 16-row tile
//! `mt` and 8-key tile `j`, `s[mt][j][2h + e]` = row `16 mt + g + 8h`, key `8j + 2t + e`.
use crate::arch::mma::FragC;
use crate::mods::{At, MaskMod, ScoreMod};

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
    /// the block's first row: only those blocks pay for [`apply`].
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
}

/// Modifies a warp's scores: `row` is the lane's first row (tile 0, `g`), `col` its first key
/// (`col0 + 2t`).
#[inline(always)]
pub fn modify<S: ScoreMod, const MT: usize, const SN: usize>(s: &mut [[FragC; SN]; MT], score: &S, row: i32, col: i32) {
    let colf = col as f32;
    // One pass per part that is on ([`ScoreMod::PARTS`]).
    for part in 0..S::PARTS {
        if !score.part_on(part) {
            continue;
        }
        for mt in 0..MT {
            for h in 0..2 {
                let r = row + (mt * 16 + 8 * h) as i32;
                let rowf = r as f32;
                for j in 0..SN {
                    for e in 0..2 {
                        let d = j * 8 + e;
                        let at = At { row: r, key: col + d as i32, rowf, keyf: colf + d as f32 };
                        s[mt][j][2 * h + e] = score.score_part(part, s[mt][j][2 * h + e], at);
                    }
                }
            }
        }
    }
}

/// Sets a warp's masked scores to `-inf` (`row`, `col` as for [`modify`]).
#[inline(always)]
pub fn apply<M: MaskMod, const MT: usize, const SN: usize>(s: &mut [[FragC; SN]; MT], mask: &M, row: i32, col: i32) {
    for mt in 0..MT {
        for h in 0..2 {
            let b = mask.bounds(row + (mt * 16 + 8 * h) as i32);
            for j in 0..SN {
                for e in 0..2 {
                    if !M::sees(b, col + (j * 8 + e) as i32) {
                        s[mt][j][2 * h + e] = f32::NEG_INFINITY;
                    }
                }
            }
        }
    }
}
