//! Writes the normalised output and the log-sum-exp.
//!
//! Accumulator fragments scatter 4-byte pieces over 8 rows; staging them in shared memory (the
//! warp's own rows of the Q tile, which it no longer reads) turns that into full 16-byte,
//! row-contiguous global stores.
use crate::arch::barrier::bar_warp_sync;
use crate::arch::mma::FragC;
use crate::arch::smem::{ld_shared_v4, st_global_v4, st_shared_b32};
use crate::dtype::Element;
use crate::layout::SmemTile;

use super::warp_merge::owns;

/// Stores the warp's `16 * MT` rows of O (the columns of the fragments warp `wn` of `WN`
/// [`owns`]), starting at tile row `row0` (sequence row `seq_row0 + row0`), into the matrix
/// whose sequence row 0 is at `out` (`row_stride` elements between rows), skipping rows at or
/// past `seqlen_q` and chunks past `head_dim_v`.
#[inline(always)]
pub unsafe fn store_o<T: Element, const MT: usize, const ON: usize, const BM: usize, const D: usize, const WN: usize>(
    o: &[[FragC; ON]; MT],
    wn: usize,
    stage: SmemTile<BM, D>,
    row0: usize,
    lane: usize,
    out: *mut u16,
    row_stride: i64,
    seq_row0: u32,
    seqlen_q: u32,
    head_dim_v: u32,
) {
    for mt in 0..MT {
        for j in 0..ON {
            if !owns::<ON, WN>(j, wn) {
                continue;
            }
            for h in 0..2 {
                let row = row0 + mt * 16 + lane / 4 + 8 * h;
                let addr = stage.chunk_addr(row, j) + (lane % 4) as u32 * 4;
                unsafe { st_shared_b32(addr, T::pack2(o[mt][j][2 * h], o[mt][j][2 * h + 1])) };
            }
        }
    }
    bar_warp_sync();
    // A fragment's 8 columns are one 16-byte chunk: the warp copies out its own chunks.
    let chunks = D / 8 / WN;
    const { assert!((16 * MT * D / 8 / WN) % 32 == 0) };
    for i in 0..(16 * MT * chunks) / 32 {
        let c = lane + 32 * i;
        let (r, chunk) = (c / chunks, wn * chunks + c % chunks);
        let seq_row = seq_row0 + (row0 + r) as u32;
        if seq_row < seqlen_q && (chunk as u32) * 8 < head_dim_v {
            let v = unsafe { ld_shared_v4(stage.chunk_addr(row0 + r, chunk)) };
            let dst = unsafe { out.offset((seq_row as i64 * row_stride) as isize + (chunk * 8) as isize) };
            unsafe { st_global_v4(dst as *mut u32, v) };
        }
    }
}

/// Stores each of the warp's rows' log-sum-exp once (lane `4g` holds rows `g` and `g + 8`).
#[inline(always)]
pub unsafe fn store_lse<const MT: usize>(lse: &[[f32; 2]; MT], dst: *mut f32, first_row: u32, seqlen_q: u32, lane: usize) {
    if lane % 4 != 0 {
        return;
    }
    for mt in 0..MT {
        for h in 0..2 {
            let row = first_row + (mt * 16 + lane / 4 + 8 * h) as u32;
            if row < seqlen_q {
                unsafe { *dst.add(row as usize) = lse[mt][h] };
            }
        }
    }
}

/// Split-KV: stores the warp's rows of the (normalised) f32 partial output (the columns of the
/// fragments warp `wn` of `WN` [`owns`]) straight from the fragments into `out` (`[seqlen_q,
/// D]`, row-contiguous; `first_row` is the warp's first sequence row), skipping rows at or past
/// `seqlen_q`.
#[inline(always)]
pub unsafe fn store_o_f32<const MT: usize, const ON: usize, const D: usize, const WN: usize>(
    o: &[[FragC; ON]; MT],
    wn: usize,
    out: *mut f32,
    first_row: u32,
    seqlen_q: u32,
    lane: usize,
) {
    for mt in 0..MT {
        for h in 0..2 {
            let row = first_row + (mt * 16 + lane / 4 + 8 * h) as u32;
            if row < seqlen_q {
                for j in 0..ON {
                    if !owns::<ON, WN>(j, wn) {
                        continue;
                    }
                    let dst = unsafe { out.add(row as usize * D + j * 8 + 2 * (lane % 4)) };
                    unsafe {
                        *dst = o[mt][j][2 * h];
                        *dst.add(1) = o[mt][j][2 * h + 1];
                    }
                }
            }
        }
    }
}
