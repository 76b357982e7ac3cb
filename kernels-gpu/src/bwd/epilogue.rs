//! Where the backward's results leave the CTA: a query block's dQ part added to the f32
//! accumulator (in key-block order in deterministic mode), and dK, dV written once at the end.
use crate::arch::atom::{atom_acq_rel_gpu_add_u32, ld_acquire_gpu_u32, red_relaxed_gpu_add_f32};
use crate::arch::barrier::{bar_sync, bar_sync_divergent};
use crate::arch::smem::st_shared_b32;
use crate::arch::mma::FragC;
use crate::dtype::Element;

/// Adds a warp's `32 x 8 NT` dQ part (first row `row0` of the sequence, first column `col0`)
/// to the accumulator rows from `accum` (`accum_dim` f32 per row), skipping rows at or past
/// `seqlen_q`.
#[inline(always)]
pub unsafe fn add_dq<const NT: usize>(dq: &[[FragC; NT]; 2], accum: *mut f32, accum_dim: usize, row0: u32, col0: usize, seqlen_q: u32, lane: usize) {
    for mt in 0..2 {
        for h in 0..2 {
            let row = row0 + (mt * 16 + lane / 4 + 8 * h) as u32;
            if row < seqlen_q {
                let dst = unsafe { accum.add(row as usize * accum_dim + col0 + 2 * (lane % 4)) };
                for nt in 0..NT {
                    unsafe {
                        red_relaxed_gpu_add_f32(dst.add(nt * 8), dq[mt][nt][2 * h]);
                        red_relaxed_gpu_add_f32(dst.add(nt * 8 + 1), dq[mt][nt][2 * h + 1]);
                    }
                }
            }
        }
    }
}

/// Deterministic mode: waits until `before` key blocks have added their parts to the query
/// block whose semaphore is `sem` (thread 0 polls, then the barrier releases the CTA).
#[inline(always)]
pub unsafe fn wait_turn(sem: *const u32, before: u32, tid: u32) {
    if tid == 0 {
        while unsafe { ld_acquire_gpu_u32(sem) } < before {}
    }
    bar_sync_divergent();
}

/// Deterministic mode: after every thread's adds (the barrier), counts this key block's part
/// in, releasing the adds to the next key block's acquire.
#[inline(always)]
pub unsafe fn end_turn(sem: *mut u32, tid: u32) {
    bar_sync();
    if tid == 0 {
        unsafe { atom_acq_rel_gpu_add_u32(sem, 1) };
    }
}

/// Stores a warp's `32 x 8 NT` f32 tile times `scale`, rounded to `T`, into the rows from
/// `out` (`row_stride` elements apart; tile row 0 is sequence row `row0`), skipping rows at or
/// past `rows` and columns past `head_dim`.
#[inline(always)]
pub unsafe fn store_rows<T: Element, const NT: usize>(
    acc: &[[FragC; NT]; 2],
    scale: f32,
    out: *mut u16,
    row_stride: i64,
    row0: u32,
    col0: usize,
    rows: u32,
    head_dim: u32,
    lane: usize,
) {
    for mt in 0..2 {
        for h in 0..2 {
            let row = row0 + (mt * 16 + lane / 4 + 8 * h) as u32;
            if row >= rows {
                continue;
            }
            for nt in 0..NT {
                let col = col0 + nt * 8 + 2 * (lane % 4);
                if (col as u32) < head_dim {
                    let v = T::pack2(acc[mt][nt][2 * h] * scale, acc[mt][nt][2 * h + 1] * scale);
                    unsafe { *(out.offset((row as i64 * row_stride) as isize + col as isize) as *mut u32) = v };
                }
            }
        }
    }
}

/// sm_90: stores a warp's `32 x 8 NT` dQ part (tile row `row0`, column `col0`) in f32 at the
/// shared addresses `staged(row)` gives each row start (rows of `D` f32, the accumulator's
/// layout, as the bulk reduction reads them).
#[inline(always)]
pub unsafe fn stage_dq<const NT: usize>(dq: &[[FragC; NT]; 2], staged: impl Fn(usize) -> u32, row0: usize, col0: usize, lane: usize) {
    for mt in 0..2 {
        for h in 0..2 {
            let at = staged(row0 + mt * 16 + lane / 4 + 8 * h) + ((col0 + 2 * (lane % 4)) * 4) as u32;
            for nt in 0..NT {
                unsafe {
                    st_shared_b32(at + (nt * 32) as u32, dq[mt][nt][2 * h].to_bits());
                    st_shared_b32(at + (nt * 32 + 4) as u32, dq[mt][nt][2 * h + 1].to_bits());
                }
            }
        }
    }
}

/// sm_90 (one thread): adds a staged `BM x D` dQ part (rows `..BM / 2` at `halves[0]`, the
/// rest at `halves[1]`) to the accumulator rows from sequence row `m0` on, skipping rows at
/// or past `seqlen_q`, by bulk reductions.
#[inline(always)]
pub unsafe fn reduce_dq<const BM: usize, const D: usize>(accum: *mut f32, halves: [u32; 2], m0: u32, seqlen_q: u32) {
    #[cfg(target_feature = "sm_90a")]
    {
        use crate::arch::bulk::{cp_async_bulk_commit_group, cp_reduce_async_bulk_add_f32};
        for (i, &src) in halves.iter().enumerate() {
            let first = m0 + (i * BM / 2) as u32;
            let rows = seqlen_q.saturating_sub(first).min((BM / 2) as u32);
            if rows > 0 {
                unsafe { cp_reduce_async_bulk_add_f32(accum.add(first as usize * D), src, rows * (D * 4) as u32) };
            }
        }
        cp_async_bulk_commit_group();
    }
    #[cfg(not(target_feature = "sm_90a"))]
    let _ = (accum, halves, m0, seqlen_q);
}

/// sm_90 (the reducing thread): waits until the staged dQ parts were read.
#[inline(always)]
pub fn staged_read() {
    #[cfg(target_feature = "sm_90a")]
    crate::arch::bulk::cp_async_bulk_wait_group_read::<0>();
}

/// sm_90 (the reducing thread): waits until the reductions are done (before the CTA exits).
#[inline(always)]
pub fn reduced() {
    #[cfg(target_feature = "sm_90a")]
    crate::arch::bulk::cp_async_bulk_wait_group_0();
}
