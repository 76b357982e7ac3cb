//! Score modification and masking of a consumer warpgroup's score accumulator.
//!
//! Accumulator layout of `wgmma m64nNk16` (f32): thread (warp `w` of the warpgroup, lane
//! `4g + t`) holds `s[4i + 2h + j]` = row `16w + g + 8h`, column `8i + 2t + j`.
use crate::mods::{At, MaskMod, ScoreMod};

/// Modifies the scores: `row` is the thread's first row (`h = 0`), `col` its first column
/// (`col0 + 2t`).
#[inline(always)]
pub fn modify<S: ScoreMod, const SN: usize>(s: &mut [f32; SN], score: &S, row: i32, col: i32) {
    let colf = col as f32;
    // One pass per part that is on ([`ScoreMod::PARTS`]).
    for part in 0..S::PARTS {
        if !score.part_on(part) {
            continue;
        }
        for h in 0..2 {
            let r = row + 8 * h as i32;
            let rowf = r as f32;
            for i in 0..SN / 4 {
                for j in 0..2 {
                    let d = 8 * i + j;
                    let at = At { row: r, key: col + d as i32, rowf, keyf: colf + d as f32 };
                    s[4 * i + 2 * h + j] = score.score_part(part, s[4 * i + 2 * h + j], at);
                }
            }
        }
    }
}

/// Sets masked scores to `-inf`: `row` as for [`modify`], `col0` the tile's first key (a
/// multiple of the tile width) and `col` the thread's first column in the tile (`2t`), which
/// are or-ed: the thread's columns `col + d` stay loop-invariant values, as the plain kernels
/// were tuned with.
#[inline(always)]
pub fn apply<M: MaskMod, const SN: usize>(s: &mut [f32; SN], mask: &M, row: i32, col0: i32, col: i32) {
    for h in 0..2 {
        let b = mask.bounds(row + 8 * h as i32);
        for i in 0..SN / 4 {
            for j in 0..2 {
                if !M::sees(b, col0 | (col + (8 * i + j) as i32)) {
                    s[4 * i + 2 * h + j] = f32::NEG_INFINITY;
                }
            }
        }
    }
}
