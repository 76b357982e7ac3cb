//! The FP8 kernels' V transpose: FP8 wgmma reads B K-major only, so `O += P V` needs each V
//! stage with its keys contiguous. The producer warpgroup's warps 1-3 (warp 0's first thread
//! issues the TMA loads) walk the V ring as the loads fill it: wait for a stage, wait until the
//! consumers released the transposed stage's previous contents, write V's `BN x DV` bytes as
//! `DV` rows of `BN` keys in the key order of [`super::fp8::key_at`], then release the loaded
//! stage to the producer and hand the transposed one to the consumers. The producer ends them
//! with a plain arrival on the next stage after writing, in [`Smem::done_slot`], the number of
//! V tiles it loaded plus one: a fill of the last stages may complete before the transposers
//! get to it, so the flag names the position that is no tile rather than just saying "done".
//!
//! A thread moves 4 keys x 16 bytes at a time: four 16-byte loads (one per key), sixteen
//! `prmt`s that turn each 4x4 byte block around, sixteen 4-byte stores. The 32 lanes of a warp
//! take consecutive key quads of one 16-byte column chunk, so each store covers a whole
//! 128-byte transposed row.
use super::fp8::{key_at, slab_row, swizzled};
use super::pipeline::{PipeState, release_own_reads, wait_empty, wait_full};
use super::smem::Smem;
use crate::arch::mbarrier::mbarrier_arrive;
use crate::arch::prmt::prmt;
use crate::arch::smem::{ld_shared_b32, ld_shared_v4, st_shared_b32};

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
/// rows) as `DV` rows of `BN` bytes at `vt`.
#[inline(always)]
unsafe fn transpose<const DV: usize, const BN: usize>(v: u32, vt: u32, i: u32) {
    const { assert!((BN == 64 || BN == 128) && DV % 64 == 0) };
    let quads = (BN / 4) as u32;
    let units = quads * (DV / 16) as u32;
    let row = slab_row(DV) as u32;
    let mut u = i;
    while u < units {
        let (j, n0) = (u % quads, 16 * (u / quads));
        let slab = v + (n0 / row) * BN as u32 * row;
        let r = [0, 1, 2, 3].map(|m| unsafe { ld_shared_v4(slab + swizzled(key_at(4 * j + m) * row + n0 % row, row as usize)) });
        for w in 0..4 {
            // Bytes 0 and 1 of keys 0/1 and 2/3, then bytes 2 and 3; then byte b of all four.
            let (lo01, hi01) = (prmt::<0x5140>(r[0][w], r[1][w]), prmt::<0x7362>(r[0][w], r[1][w]));
            let (lo23, hi23) = (prmt::<0x5140>(r[2][w], r[3][w]), prmt::<0x7362>(r[2][w], r[3][w]));
            let out = [prmt::<0x5410>(lo01, lo23), prmt::<0x7632>(lo01, lo23), prmt::<0x5410>(hi01, hi23), prmt::<0x7632>(hi01, hi23)];
            for (b, x) in out.into_iter().enumerate() {
                let n = n0 + 4 * w as u32 + b as u32;
                unsafe { st_shared_b32(vt + swizzled(n * BN as u32 + 4 * j, BN), x) };
            }
        }
        u += THREADS;
    }
}
