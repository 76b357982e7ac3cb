//! The FP8 kernels' V transpose: FP8 wgmma reads B K-major only, so `O += P V` needs each V
//! stage with its keys contiguous. The producer warpgroup's warps 1-3 (warp 0's first thread
//! issues the TMA loads) walk the V ring as the loads fill it: wait for a stage, wait until the
//! consumers released the transposed stage's previous contents, write V's `BN x DV` bytes as
//! `DV` rows of `BN` keys in the key order of P's fragments ([`super::fp8`]), then release the
//! loaded stage to the producer and hand the transposed one to the consumers. The producer
//! ends them with a plain arrival on the next stage after writing, in [`Smem::done_slot`], the
//! number of V tiles it loaded plus one: a fill of the last stages may complete before the
//! transposers get to it, so the flag names the position that is no tile rather than just
//! saying "done".
//!
//! A warp moves 32 keys x 16 columns (512 bytes) at a time, in four matrices of 8x8 16-bit
//! elements: `ldmatrix.trans` reads the keys `8i .. 8i + 8` as matrix `i` and hands lane `l`
//! (`q = l % 4`, `c = l / 4`) keys `8i + 2q` and `8i + 2q + 1` of columns `2c` and `2c + 1`. Two
//! `prmt`s per pair of matrices (keys `2q, 2q + 1, 8 + 2q, 9 + 2q`, or the same plus 16) gather
//! column `2c`'s four keys and column `2c + 1`'s, exactly the key order of [`super::fp8`] at
//! positions `4q .. 4q + 4` (or plus 16), and `stmatrix` writes the four words as rows of the
//! transposed tile. Row `c` of a stored matrix is column `2c` for some lanes and `2c + 1` for
//! others (the choice flips at `c = 4`), so that each store's eight rows fall on eight different
//! swizzle phases: its rows are free of bank conflicts.
use super::fp8::{slab_row, swizzled};
use super::pipeline::{PipeState, release_own_reads, wait_empty, wait_full};
use super::smem::Smem;
use crate::arch::ldmatrix::ldmatrix_x4_trans;
use crate::arch::mbarrier::mbarrier_arrive;
use crate::arch::prmt::prmt;
use crate::arch::smem::ld_shared_b32;
use crate::arch::stmatrix::stmatrix_x4;

/// Threads that transpose: warps 1-3 of the producer warpgroup. `v_empty`'s and `vt_full`'s
/// arrival counts.
pub const THREADS: u32 = 96;

/// Runs transposing thread `i` (0..[`THREADS`]) until the producer says it loaded the last V.
#[inline(always)]
pub unsafe fn run<const D: usize, const DV: usize, const BM: usize, const BN: usize, const STAGES: usize>(smem: Smem<D, DV, BM, BN, STAGES, 1>, i: u32) {
    let mut pipe = PipeState::<STAGES>::new();
    let mut tiles = 0u32;
    loop {
        unsafe { wait_full(smem.v_full(pipe.stage), pipe.phase) };
        if unsafe { ld_shared_b32(smem.done_slot()) } == tiles + 1 {
            break;
        }
        unsafe {
            wait_empty(smem.vt_empty(pipe.stage), pipe.phase);
            transpose::<DV, BN>(smem.v(pipe.stage), smem.vt(pipe.stage), i);
            // The proxy fence in the release orders this thread's loads before the next TMA
            // into the stage and its stores before the consumers' wgmmas (async proxy too).
            release_own_reads(smem.v_empty(pipe.stage));
            mbarrier_arrive(smem.vt_full(pipe.stage));
        }
        pipe.advance();
        tiles += 1;
    }
}

/// Thread `i`'s share of writing the `BN x DV` V stage at `v` (slabs of [`slab_row`]`(DV)`-byte
/// rows) as `DV` rows of `BN` bytes at `vt`; the warps take 32-key x 16-column units in turn.
#[inline(always)]
unsafe fn transpose<const DV: usize, const BN: usize>(v: u32, vt: u32, i: u32) {
    const { assert!((BN == 64 || BN == 128) && DV % 64 == 0) };
    let (warp, lane) = (i / 32, i % 32);
    let chunks = (DV / 16) as u32;
    let units = chunks * (BN / 32) as u32;
    let row = slab_row(DV) as u32;
    // `stmatrix`: lane `l` addresses row `l % 8` of matrix `l / 8`, matrices 0 and 1 holding
    // key positions 0-15, 2 and 3 positions 16-31; the row's column within the 16.
    let (r, m) = (lane % 8, lane / 8);
    let column = 2 * r + ((r / 4) ^ (m % 2));
    let position = 16 * (m / 2);
    // The `prmt` selectors of this lane's words for matrices 0 and 2 (row `c` is column
    // `2c + 1` where `c >= 4`), then 1 and 3 (where `c < 4`): bytes 0 and 2 of each source word
    // are column `2c`, bytes 1 and 3 column `2c + 1`.
    let (even, odd) = if lane / 4 >= 4 { (0x7531, 0x6420) } else { (0x6420, 0x7531) };
    let mut u = warp;
    while u < units {
        let (n0, k0) = (16 * (u % chunks), 32 * (u / chunks));
        let slab = v + (n0 / row) * BN as u32 * row;
        let [a0, a1, a2, a3] = unsafe { ldmatrix_x4_trans(slab + swizzled((k0 + lane) * row + n0 % row, row as usize)) };
        let words = [prmt(a0, a1, even), prmt(a0, a1, odd), prmt(a2, a3, even), prmt(a2, a3, odd)];
        unsafe { stmatrix_x4(vt + swizzled((n0 + column) * BN as u32 + k0 + position, BN), words) };
        u += THREADS / 32;
    }
}
