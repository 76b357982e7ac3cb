//! Split-KV: merging the splits' partial results, in the split that finishes last.
//!
//! Each of a query block's `num_splits` CTAs stores its normalised f32 partial output and
//! log-sum-exp, then counts itself in at the block's arrival counter; the CTA that arrives last
//! merges every split's rows into O and the log-sum-exp while the other blocks' splits are still
//! running. A separate combine kernel cost about 5 us of a 57 us batch-1 decode call on an H100
//! (a launch, its ramp, dependent loads); this merge adds 1.5-2 us to the kernel's tail. A row
//! merges as `lse = log sum_s exp(lse_s)`, `O =
//! sum_s exp(lse_s - lse) O_s`; rows no split saw a key for get 0 and `-inf`.
use crate::arch::atom::atom_acq_rel_gpu_add1_u32_to_shared;
use crate::arch::barrier::bar_sync;
use crate::arch::shfl::{shfl_sync_bfly_f32, shfl_sync_idx_u32};
use crate::arch::smem::{ld_global_cg_f32, ld_global_cg_v2_f32, ld_global_cg_v4_f32, ld_shared_b32};
use crate::dtype::Element;
use crate::lse;

use flashrs_abi::tiles::MAX_SPLITS;
use flashrs_abi::FwdParams;

/// f32 registers of partial outputs a lane holds at once: `D / 32` columns each of `2048 / D`
/// splits (16 splits for head_dim 128), whose loads are all in flight together. The merge is
/// latency-bound, so a row costs one memory latency per batch of splits, not one per split.
const IN_FLIGHT: usize = 64;

/// Counts this CTA in at `counter` (its query block's; zero before the first split arrives)
/// after its partial-result stores, and returns, the same in every thread, whether it was the
/// block's last split; then the other splits' partials are visible to its `ld.global.cg` loads,
/// and the counter is back at zero for the next launch. Every thread calls it (two CTA
/// barriers); `flag` is 4 bytes of shared memory nothing else uses now.
#[inline(always)]
pub unsafe fn arrive_last(p: &FwdParams, counter: *mut u32, tid: u32, flag: u32) -> bool {
    bar_sync();
    unsafe { atom_acq_rel_gpu_add1_u32_to_shared(tid == 0, counter, flag) };
    bar_sync();
    let last = unsafe { ld_shared_b32(flag) } == p.num_splits - 1;
    if last && tid == 0 {
        // Every split has counted in.
        unsafe { *counter = 0 };
    }
    last
}

/// Where a (batch, head)'s merged rows go: row `i` of the output at `o + i * row_stride`
/// (elements), its log-sum-exp at `lse + i` (ignored when the launch has none).
#[derive(Clone, Copy)]
pub struct RowsOut {
    /// Row 0's first element in O.
    pub o: *mut u16,
    /// Elements between rows in O.
    pub row_stride: i64,
    /// Row 0's log-sum-exp offset in `p.lse`.
    pub lse: usize,
}

/// Merges the splits' partials of rows `first..end` of (batch, head) `bh` (the workspace's
/// view: rows are `[batch * heads_q, seqlen_q]`, `seqlen_q` the launch's) into `out`, each of
/// the CTA's `warps` warps a row at a time.
#[inline(always)]
pub unsafe fn merge_rows<T: Element, const D: usize>(p: &FwdParams, bh: u32, first: u32, end: u32, out: RowsOut, tid: u32, warps: u32) {
    let (warp, lane) = (tid / 32, tid % 32);
    let mut r = first + warp;
    while r < end {
        unsafe { merge_row::<T, D>(p, bh, r, out, lane) };
        r += warps;
    }
}

/// Loads `D / 32` columns from `col` on of splits `s0 .. s0 + 2048 / D` (clamped to the last
/// split) of partial row `row` into `part`.
#[inline(always)]
unsafe fn load_partials<const D: usize>(p: &FwdParams, rows: u32, row: u32, col: usize, s0: u32, part: &mut [f32; IN_FLIGHT]) {
    let cols = D / 32;
    let o_acc = p.o_accum as *const f32;
    for j in 0..IN_FLIGHT / cols {
        let s = (s0 + j as u32).min(p.num_splits - 1);
        let src = unsafe { o_acc.add((s * rows + row) as usize * D + col) };
        if cols == 2 {
            let v = unsafe { ld_global_cg_v2_f32(src) };
            part[2 * j..2 * j + 2].copy_from_slice(&v);
        } else {
            for q in 0..cols / 4 {
                let v = unsafe { ld_global_cg_v4_f32(src.add(4 * q)) };
                part[j * cols + 4 * q..j * cols + 4 * q + 4].copy_from_slice(&v);
            }
        }
    }
}

/// One warp merges row `i` of (batch, head) `bh` into `out`. Lane `s < num_splits` reads split
/// `s`'s log-sum-exp; lane `c` owns columns `c * D / 32 ..` of the output row.
#[inline(always)]
unsafe fn merge_row<T: Element, const D: usize>(p: &FwdParams, bh: u32, i: u32, out: RowsOut, lane: u32) {
    let (cols, batch) = (D / 32, (IN_FLIGHT / (D / 32)) as u32);
    let rows = p.batch * p.heads_q * p.seqlen_q;
    let row = bh * p.seqlen_q + i;
    let splits = p.num_splits;
    let col = lane as usize * cols;
    // The first batch of partials does not depend on the weights: its loads go out first.
    let mut part = [0.0f32; IN_FLIGHT];
    unsafe { load_partials::<D>(p, rows, row, col, 0, &mut part) };
    let lse_acc = p.lse_accum as *const f32;
    let l = if lane < splits { unsafe { ld_global_cg_f32(lse_acc.add((lane * rows + row) as usize)) } } else { f32::NEG_INFINITY };
    let mut m = l;
    for x in [16, 8, 4, 2, 1] {
        m = m.max(shfl_sync_bfly_f32(m, x));
    }
    let base = lse::merge_base(m);
    let e = lse::part_weight(l, base);
    let mut sum = e;
    for x in [16, 8, 4, 2, 1] {
        sum += shfl_sync_bfly_f32(sum, x);
    }
    // Weight of this lane's split: exp(l - lse) = e / sum.
    let w = if sum > 0.0 { e / sum } else { 0.0 };
    let mut acc = [0.0f32; 8];
    let mut s0 = 0;
    loop {
        for j in 0..batch {
            let s = s0 + j;
            let ws = f32::from_bits(shfl_sync_idx_u32(w.to_bits(), s.min(MAX_SPLITS as u32 - 1)));
            if s < splits {
                for k in 0..cols {
                    acc[k] += ws * part[j as usize * cols + k];
                }
            }
        }
        s0 += batch;
        if s0 >= splits {
            break;
        }
        unsafe { load_partials::<D>(p, rows, row, col, s0, &mut part) };
    }
    if col < p.head_dim_v as usize {
        let dst = unsafe { out.o.offset((i as i64 * out.row_stride + col as i64) as isize) as *mut u32 };
        for k in 0..cols / 2 {
            unsafe { *dst.add(k) = T::pack2(acc[2 * k], acc[2 * k + 1]) };
        }
    }
    if lane == 0 && p.lse != 0 {
        unsafe { *(p.lse as *mut f32).add(out.lse + i as usize) = lse::merged(base, sum) };
    }
}
