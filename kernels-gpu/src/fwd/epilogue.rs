//! Writes the normalised output and the log-sum-exp.
//!
//! Accumulator fragments scatter 4-byte pieces over 8 rows; staging them in shared memory (the
//! warp's own rows of the Q tile, which it no longer reads) turns that into full 16-byte,
//! row-contiguous global stores.
use crate::arch::barrier::bar_warp_sync;
use crate::arch::mma::FragC;
use crate::arch::smem::{ld_shared_v4, st_global_v4, st_shared_b32};
use crate::dtype::{Element, KvElement};
use crate::layout::SmemTile;

use super::warp_merge::owns;

/// Where a lane's accumulator values of output tiles `2g` and `2g + 1` lie in the kernels over
/// FP8 caches, as (column, value) pairs of adjacent columns for row half `h` (rows `lane / 4`
/// and `lane / 4 + 8`): tile `2g` holds the group's even columns and `2g + 1` its odd ones (see
/// [`super::mainloop::gemm_pv_fp8`]), so that the lane's four are `16g + 4c ..= 16g + 4c + 3`
/// (`c = lane % 4`). In the 16-bit kernels' layout tile `j` holds columns `8j + 2c, 8j + 2c + 1`.
#[inline(always)]
fn column_pairs(o: [&FragC; 2], g: usize, h: usize, lane: usize) -> [(usize, [f32; 2]); 2] {
    let c = lane % 4;
    [(16 * g + 4 * c, [o[0][2 * h], o[1][2 * h]]), (16 * g + 4 * c + 2, [o[0][2 * h + 1], o[1][2 * h + 1]])]
}

/// Stores the warp's `16 * MT` rows of O (the columns of the fragments warp `wn` of `WN`
/// [`owns`], in the layout of `C`'s kernels: [`column_pairs`]), starting at tile row `row0`
/// (sequence row `seq_row0 + row0`), into the matrix whose sequence row 0 is at `out`
/// (`row_stride` elements between rows), skipping rows at or past `seqlen_q` and chunks past
/// `head_dim_v`.
#[inline(always)]
pub unsafe fn store_o<T: Element, const MT: usize, const ON: usize, const BM: usize, const D: usize, const WN: usize, C: KvElement>(
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
    // Tiles come in pairs a warp owns together (ON / WN is even).
    const { assert!(ON % (2 * WN) == 0) };
    for mt in 0..MT {
        if C::SHR == 0 {
            // (The 16-bit kernels' code as it was: a tile at a time.)
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
            continue;
        }
        for g in 0..ON / 2 {
            if !owns::<ON, WN>(2 * g, wn) {
                continue;
            }
            for h in 0..2 {
                let row = row0 + mt * 16 + lane / 4 + 8 * h;
                for (col, [lo, hi]) in column_pairs([&o[mt][2 * g], &o[mt][2 * g + 1]], g, h, lane) {
                    let addr = stage.chunk_addr(row, col / 8) + (col % 8) as u32 * 2;
                    unsafe { st_shared_b32(addr, T::pack2(lo, hi)) };
                }
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
/// fragments warp `wn` of `WN` [`owns`], in the layout of `C`'s kernels: [`column_pairs`]) straight
/// from the fragments into `out` (`[seqlen_q, D]`, row-contiguous; `first_row` is the warp's
/// first sequence row), skipping rows at or past `seqlen_q`.
#[inline(always)]
pub unsafe fn store_o_f32<const MT: usize, const ON: usize, const D: usize, const WN: usize, C: KvElement>(
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
            if row < seqlen_q && C::SHR == 0 {
                // (The 16-bit kernels' code as it was: a tile at a time.)
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
            } else if row < seqlen_q {
                for g in 0..ON / 2 {
                    if !owns::<ON, WN>(2 * g, wn) {
                        continue;
                    }
                    for (col, [lo, hi]) in column_pairs([&o[mt][2 * g], &o[mt][2 * g + 1]], g, h, lane) {
                        let dst = unsafe { out.add(row as usize * D + col) };
                        unsafe {
                            *dst = lo;
                            *dst.add(1) = hi;
                        }
                    }
                }
            }
        }
    }
}
