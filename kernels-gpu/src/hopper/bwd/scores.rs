//! The step math both consumer shapes share, on a warpgroup's transposed scores: an m64
//! accumulator whose rows are keys and whose columns are some of the step's query rows
//! (`s[4i + 2h + j]`: key `16 warp + g + 8h`, column `col0 + 8i + 2t + j`, [`crate::hopper::mask`]'s
//! layout). From S^T and dP^T it forms P^T and dS^T, reading the rows' statistics from the
//! stage, and stores the packed results transposed into shared memory for the GEMMs that take
//! them from there.
use super::Mask;
use crate::arch::smem::{ld_shared_v2, st_shared_b32};
use crate::arch::wgmma::FragA;
use crate::dtype::Element;
use crate::lse;
use flashrs_abi::AccumLayout;

/// The step's row statistics in the stage, as the columns a thread holds see them: column
/// `col0 + 8i + 2t + j`'s at `[i][j]`, one 8-byte shared load per `i`. Padding rows read as
/// `-inf` and 0, so their P is 0.
#[derive(Clone, Copy)]
pub struct ColumnStats<const BM: usize> {
    /// The stage's statistics ([`super::smem::Smem::stats`]).
    pub stats: u32,
    /// The thread's first column.
    pub col0: u32,
}

impl<const BM: usize> ColumnStats<BM> {
    /// Offset of the log-sum-exp bases, and of the dsums ([`AccumLayout::fragment_stats`]).
    pub const BASES: u32 = 0;
    pub const DSUMS: u32 = 64;

    /// The statistic at `at` ([`Self::BASES`], [`Self::DSUMS`]) of columns `8i + 2t + j`, j = 0, 1
    /// (each 64 columns a block of statistics: `BM = 128` steps have two).
    #[inline(always)]
    pub fn get(self, at: u32, i: usize, t: u32) -> [f32; 2] {
        let col = self.col0 + 8 * i as u32 + 2 * t;
        let index = if BM > 64 { (col / 64) * AccumLayout::STATS as u32 + at + col % 64 } else { at + col };
        let v = unsafe { ld_shared_v2(self.stats + 4 * index) };
        [f32::from_bits(v[0]), f32::from_bits(v[1])]
    }

    /// The statistic at `at` of every column group, read now. Where registers allow (64-column
    /// steps) the loads are issued together; a 128-column step reads each where it is used
    /// ([`Self::get`]), as 64 registers of statistics beside its scores would spill.
    #[inline(always)]
    pub fn all<const I: usize>(self, at: u32, t: u32) -> [[f32; 2]; I] {
        core::array::from_fn(|i| self.get(at, i, t))
    }
}

/// Turns the scores S^T into probabilities P^T in place: `2^(s scale_log2 + base)` per column.
/// Where `mask.on`, key `key + 8h` against column `8i + 2t + j` (`key` is the thread's first
/// key) scores `-inf` first when past the column's last visible key ([`super::Mask`]).
#[inline(always)]
pub fn probabilities<const SN: usize, const I: usize>(s: &mut [f32; SN], bases: impl Fn(usize) -> [f32; 2], scale_log2: f32, mask: Mask, key: i32, t: u32) {
    const { assert!(SN == 4 * I) };
    for i in 0..I {
        let bases = bases(i);
        for j in 0..2 {
            let last = (mask.diagonal + (8 * i as u32 + 2 * t + j as u32) as i32).min(mask.last);
            for h in 0..2 {
                let e = 4 * i + 2 * h + j;
                if mask.on && key + 8 * h as i32 > last {
                    s[e] = f32::NEG_INFINITY;
                }
                s[e] = lse::exp_scaled(s[e], scale_log2, bases[j]);
            }
        }
    }
}

/// Turns dP^T into dS^T in place: `P (dP - dsum)` per column, with P as rounded to `T` in its
/// packed fragments `p` (what the dV GEMM multiplies by).
#[inline(always)]
pub fn dscores<T: Element, const SN: usize, const I: usize, const KP: usize>(dp: &mut [f32; SN], p: &[FragA; KP], dsums: impl Fn(usize) -> [f32; 2]) {
    const { assert!(SN == 4 * I && SN == 8 * KP) };
    for i in 0..I {
        let dsums = dsums(i);
        for j in 0..2 {
            for h in 0..2 {
                let e = 4 * i + 2 * h + j;
                let pe = T::unpack2(p[e / 8][(e % 8) / 2])[e % 2];
                dp[e] = pe * (dp[e] - dsums[j]);
            }
        }
    }
}

/// Stores packed transposed results (k-step `kk`'s register `r`: key row `row + 8 (r % 2)`,
/// columns `col0 + 16 kk + 8 (r / 2) + 2t` and the next) into the tile at `tile`: 128-byte rows
/// of 64 columns, 128B swizzle (a row's phase is `row % 8 = g`, so the stores are
/// conflict-free), the next 64 columns `slab_rows` rows on.
#[inline(always)]
pub unsafe fn store_transposed<const KP: usize>(tile: u32, slab_rows: u32, f: &[FragA; KP], row: u32, col0: u32, g: u32, t: u32) {
    for kk in 0..KP {
        for r in 0..4 {
            let c = col0 / 8 + (2 * kk + r / 2) as u32;
            let addr = tile + (c / 8) * slab_rows * 128 + (row + 8 * (r % 2) as u32) * 128 + (((c % 8) ^ g) << 4) + 4 * t;
            unsafe { st_shared_b32(addr, f[kk][r]) };
        }
    }
}
