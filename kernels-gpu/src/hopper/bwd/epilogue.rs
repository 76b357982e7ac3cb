//! Where a Hopper backward CTA's results leave: each step's dQ part, added to the f32
//! accumulator by one bulk reduction per warpgroup (or, where shared memory has no room to
//! stage it, from registers), and dK, dV at the end.
use crate::arch::atom::red_relaxed_gpu_add_v4_f32;
use crate::arch::barrier::bar_sync_named;
use crate::arch::bulk::{cp_async_bulk_commit_group, cp_async_bulk_wait_group_read, cp_reduce_async_bulk_add_f32};
use crate::arch::fence::fence_proxy_async_shared_cta;
use crate::arch::smem::st_shared_v4;
use crate::dtype::Element;
use flashrs_abi::AccumLayout;

/// Adds warpgroup `wg`'s 64 x 64 dQ part (an `m64n64` accumulator) to its accumulator chunk
/// `dst` ([`flashrs_abi::AccumLayout::Fragments`]: the registers' own order, so the staging
/// stores are 16 contiguous bytes per thread, conflict-free), through the staging tile
/// `staged`, one of the warpgroup's two staging tiles ([`super::smem::Smem::DQ_BUFS`]), used in
/// turn. Thread 0 of the warpgroup issues the reduction and, before the staging, waits until
/// the reduction that last used this tile (two steps ago) has read it.
#[inline(always)]
pub unsafe fn add_dq(dq: &[f32; 32], staged: u32, dst: *mut f32, wg: u32, tid: u32) {
    let barrier = 1 + wg;
    if tid == 0 {
        cp_async_bulk_wait_group_read::<1>();
    }
    bar_sync_named(barrier, 128);
    for k in 0..8 {
        let v = [dq[4 * k].to_bits(), dq[4 * k + 1].to_bits(), dq[4 * k + 2].to_bits(), dq[4 * k + 3].to_bits()];
        unsafe { st_shared_v4(staged + (k * 2048) as u32 + 16 * tid, v) };
    }
    fence_proxy_async_shared_cta();
    bar_sync_named(barrier, 128);
    if tid == 0 {
        unsafe { cp_reduce_async_bulk_add_f32(dst, staged, (AccumLayout::CHUNK * 4) as u32) };
        cp_async_bulk_commit_group();
    }
}

/// Adds a warpgroup's 64 x 64 dQ part (an `m64n64` accumulator) to its accumulator chunk `dst`
/// straight from registers: the chunk's order is the registers' own, so each thread adds 16
/// contiguous bytes at a time and a warp 512 ([`add_dq`]'s layout without the staging).
#[inline(always)]
pub unsafe fn add_dq_from_registers(dq: &[f32; 32], dst: *mut f32, tid: u32) {
    for k in 0..8 {
        let v = [dq[4 * k], dq[4 * k + 1], dq[4 * k + 2], dq[4 * k + 3]];
        unsafe { red_relaxed_gpu_add_v4_f32(dst.add(k * 512 + 4 * tid as usize), v) };
    }
}

/// Stores a warpgroup's 64-row f32 accumulator (`acc[4i + 2h + j]`: row `16 warp + g + 8h`,
/// column `8i + 2t + j`) times `scale`, rounded to `T`, into the rows from `out` (the thread's
/// first row, `row_stride` elements between rows): rows at or past `rows` and columns past
/// `head_dim` are skipped. `row` is the thread's first row's index.
#[inline(always)]
pub unsafe fn store_rows<T: Element, const N: usize>(
    acc: &[f32; N],
    scale: f32,
    out: *mut u16,
    row_stride: i64,
    row: i32,
    rows: u32,
    head_dim: u32,
    t: u32,
) {
    for h in 0..2 {
        if row + 8 * h >= rows as i32 {
            continue;
        }
        let out = out.wrapping_offset((8 * h as i64 * row_stride) as isize);
        for i in 0..N / 4 {
            let col = 8 * i as u32 + 2 * t;
            if col < head_dim {
                let v = T::pack2(acc[4 * i + 2 * h as usize] * scale, acc[4 * i + 2 * h as usize + 1] * scale);
                unsafe { *(out.add(col as usize) as *mut u32) = v };
            }
        }
    }
}
