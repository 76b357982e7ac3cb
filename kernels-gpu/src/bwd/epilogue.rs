//! Where the backward's results leave the CTA: a query block's dQ part added to the f32
//! accumulator (in key-block order in deterministic mode), and dK, dV written once at the end.
use crate::arch::atom::{atom_acq_rel_gpu_add_u32, ld_acquire_gpu_u32};
use crate::arch::barrier::{bar_sync, bar_sync_divergent};
use crate::arch::mma::FragC;
use crate::dtype::Element;

/// Adds a warp's `32 x 8 NT` dQ part (first row `row0` of the sequence, first column `col0`)
/// to the accumulator rows from `accum` (`accum_dim` f32 per row), skipping rows at or past
/// `seqlen_q`: a lane's two neighbouring values at once on sm_90a (8-byte reductions), one at a
/// time before.
#[inline(always)]
pub unsafe fn add_dq<const NT: usize>(dq: &[[FragC; NT]; 2], accum: *mut f32, accum_dim: usize, row0: u32, col0: usize, seqlen_q: u32, lane: usize) {
    for mt in 0..2 {
        for h in 0..2 {
            let row = row0 + (mt * 16 + lane / 4 + 8 * h) as u32;
            if row < seqlen_q {
                let dst = unsafe { accum.add(row as usize * accum_dim + col0 + 2 * (lane % 4)) };
                for nt in 0..NT {
                    #[cfg(target_feature = "sm_90a")]
                    unsafe { crate::arch::atom::red_relaxed_gpu_add_v2_f32(dst.add(nt * 8), [dq[mt][nt][2 * h], dq[mt][nt][2 * h + 1]]) };
                    #[cfg(not(target_feature = "sm_90a"))]
                    unsafe {
                        crate::arch::atom::red_relaxed_gpu_add_f32(dst.add(nt * 8), dq[mt][nt][2 * h]);
                        crate::arch::atom::red_relaxed_gpu_add_f32(dst.add(nt * 8 + 1), dq[mt][nt][2 * h + 1]);
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

/// sm_90a: adds a warp's `32 x 8 NT` dQ part (first column `col0`) to the accumulator in
/// fragment order ([`flashrs_abi::AccumLayout::Fragments`]): `chunk0` is the first chunk of
/// the 64-row block holding the part's rows, and `group` (0 or 2) their first 16-row group in
/// it. A lane's four values of an MMA tile are there in its fragment's order, 16 contiguous
/// bytes at `512 * (column / 8) + 4 * (32 * group + lane)`, so each is one vector reduction.
#[inline(always)]
pub unsafe fn add_dq_fragments<const NT: usize>(dq: &[[FragC; NT]; 2], chunk0: *mut f32, group: usize, col0: usize, lane: usize) {
    #[cfg(target_feature = "sm_90a")]
    for mt in 0..2 {
        let at = chunk0.wrapping_add(512 * (col0 / 8) + 4 * (32 * (group + mt) + lane));
        for nt in 0..NT {
            unsafe { crate::arch::atom::red_relaxed_gpu_add_v4_f32(at.add(512 * nt), dq[mt][nt]) };
        }
    }
    #[cfg(not(target_feature = "sm_90a"))]
    let _ = (dq, chunk0, group, col0, lane);
}
