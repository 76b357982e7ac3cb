//! Writes a consumer warpgroup's normalised output rows and their log-sum-exp.
//!
//! The accumulator scatters 4-byte pairs over 16 rows per warp; staging them in shared memory
//! (the warpgroup's own 64 rows of the Q tile, which it no longer reads once its last
//! `Q K^T` completed) turns that into 16-byte, row-contiguous global stores. The staging uses
//! the Q tile's 128-byte swizzle, so both the fragment writes and the row reads are free of
//! bank conflicts.
use crate::arch::barrier::bar_sync_named;
use crate::arch::smem::{ld_shared_v4, st_global_v4, st_shared_b32};
use crate::dtype::Element;

/// Named barrier of consumer warpgroup `wg`: ids 1 ..= consumers (0 is `bar.sync 0`, the
/// whole CTA; the consumers' ping-pong turns take the ids after these).
#[inline(always)]
pub fn wg_barrier(wg: u32) {
    bar_sync_named(1 + wg, 128);
}

/// Stores the warpgroup's 64 rows of O (first sequence row `m0 + 64 * wg`) into the matrix
/// whose sequence row 0 is at `out` (`row_stride` elements between rows), skipping rows at or
/// past `seqlen_q` and 8-column chunks at or past `head_dim_v`. `q_tile` is the CTA's Q tile
/// (`BM` rows per slab); `tid` is the thread's index in the warpgroup (0..128).
#[inline(always)]
pub unsafe fn store_o<T: Element, const D: usize, const BM: usize, const ON: usize>(
    o: &[f32; ON],
    q_tile: u32,
    wg: u32,
    tid: u32,
    out: *mut u16,
    row_stride: i64,
    m0: u32,
    seqlen_q: u32,
    head_dim_v: u32,
) {
    const { assert!(ON == D / 2 && D % 64 == 0) };
    let (warp, lane) = (tid / 32, tid % 32);
    let (g, t) = (lane / 4, lane % 4);
    let slab = |s: usize| q_tile + (s * BM * 128) as u32;
    // Row within the tile: 64wg + 16warp + g (+ 8h); its swizzle phase (row % 8) is g.
    let row = 64 * wg + 16 * warp + g;
    for i in 0..D / 8 {
        for h in 0..2 {
            let addr = slab(i / 8) + (row + 8 * h as u32) * 128 + (((i % 8) as u32 ^ g) << 4) + 4 * t;
            unsafe { st_shared_b32(addr, T::pack2(o[4 * i + 2 * h], o[4 * i + 2 * h + 1])) };
        }
    }
    wg_barrier(wg);
    // Each thread copies one fixed 8-column chunk of every (128 / chunks)-th row.
    let chunks = (D / 8) as u32;
    let rows_per_pass = 128 / chunks;
    let c = tid % chunks;
    if c * 8 >= head_dim_v {
        return;
    }
    let r0 = tid / chunks;
    for pass in 0..(64 * D / 8) / 128 {
        let r = 64 * wg + r0 + pass as u32 * rows_per_pass;
        let seq_row = m0 + r;
        if seq_row < seqlen_q {
            let v = unsafe { ld_shared_v4(slab((c / 8) as usize) + r * 128 + (((c % 8) ^ (r % 8)) << 4)) };
            let dst = out.wrapping_offset((seq_row as i64 * row_stride) as isize + (c * 8) as isize);
            unsafe { st_global_v4(dst as *mut u32, v) };
        }
    }
}

/// Stores the warpgroup's 64 rows of O (first sequence row `row0`) straight from the
/// accumulator, a pair of elements per 4-byte store, skipping rows at or past `seqlen_q` and
/// columns at or past `head_dim_v` (a multiple of 8 past which nothing is stored: the host
/// checks). For the FP8 kernels, whose Q tile is too small to stage the output in.
#[inline(always)]
pub unsafe fn store_o_direct<T: Element, const ON: usize>(o: &[f32; ON], tid: u32, out: *mut u16, row_stride: i64, row0: u32, seqlen_q: u32, head_dim_v: u32) {
    let (warp, lane) = (tid / 32, tid % 32);
    let (g, t) = (lane / 4, lane % 4);
    for h in 0..2 {
        let r = row0 + 16 * warp + g + 8 * h as u32;
        if r >= seqlen_q {
            continue;
        }
        let dst = out.wrapping_offset((r as i64 * row_stride) as isize);
        for i in 0..ON / 4 {
            let col = 8 * i as u32 + 2 * t;
            if col < head_dim_v {
                unsafe { *(dst.add(col as usize) as *mut u32) = T::pack2(o[4 * i + 2 * h], o[4 * i + 2 * h + 1]) };
            }
        }
    }
}

/// Stores the log-sum-exp of the thread's two rows (lanes with `t = 0` hold each row once).
/// `dst` is the (batch, head)'s `seqlen_q` values; `row` is the thread's first sequence row.
#[inline(always)]
pub unsafe fn store_lse(lse: [f32; 2], dst: *mut f32, row: u32, seqlen_q: u32, lane: u32) {
    if lane % 4 != 0 {
        return;
    }
    for h in 0..2 {
        let r = row + 8 * h as u32;
        if r < seqlen_q {
            unsafe { *dst.add(r as usize) = lse[h] };
        }
    }
}
