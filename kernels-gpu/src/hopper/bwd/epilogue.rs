//! Where a Hopper backward CTA's results leave: each step's dQ parts, added to the f32
//! accumulator from registers (in deterministic mode in key-block order, [`Turn`]), and dK, dV
//! at the end.
use super::{Order, Walk};
use crate::arch::atom::{atom_acq_rel_gpu_add_u32, ld_acquire_gpu_u32, red_relaxed_gpu_add_v4_f32};
use crate::arch::barrier::bar_sync_named;
use crate::dtype::Element;
use flashrs_abi::BwdParams;

/// Deterministic mode's turn at one query block's dQ accumulator (see the module docs of
/// [`super`]): waits until every earlier key block has added its parts (two counts each), and
/// after this key block's adds counts them in, releasing them to the next key block's acquire.
/// Without a counter (not deterministic, see [`Turn::at`]) it does nothing.
#[derive(Clone, Copy)]
pub struct Turn {
    sem: *mut u32,
    before: u32,
}

impl Turn {
    /// The walk's turn after `before` CTAs ([`Walk::turn`]), at the counter of query head `h`'s
    /// 64-row block holding row `row`, where `DET` (deterministic mode), else none.
    /// A compile-time choice, so that the default mode's code carries no trace of the turns:
    /// a run-time null check alone measured 4-5% slower at head_dim 128.
    #[inline(always)]
    pub fn at<const DET: bool, K: Order>(p: &BwdParams, w: &Walk<K>, h: u32, row: u32, before: u32) -> Self {
        let sem = if DET { w.semaphore(p, h, row) } else { core::ptr::null_mut() };
        Turn { sem, before: 2 * before }
    }

    /// Lane 0 of the caller polls until the turn has come. Callers that add from several
    /// threads then meet at a barrier ([`Turn::wait_warpgroup`]).
    #[inline(always)]
    pub unsafe fn wait(self, lane0: bool) {
        if lane0 && !self.sem.is_null() {
            while unsafe { ld_acquire_gpu_u32(self.sem) } < self.before {}
        }
    }

    /// Lane 0 counts `n` adds in (after they completed and, where several threads added, a
    /// barrier).
    #[inline(always)]
    pub unsafe fn end(self, lane0: bool, n: u32) {
        if lane0 && !self.sem.is_null() {
            unsafe { atom_acq_rel_gpu_add_u32(self.sem, n) };
        }
    }

    /// A consumer warpgroup's wait: thread 0 polls, the warpgroup's named barrier `1 + wg`
    /// releases the others.
    #[inline(always)]
    pub unsafe fn wait_warpgroup(self, wg: u32, tid: u32) {
        if !self.sem.is_null() {
            unsafe { self.wait(tid == 0) };
            bar_sync_named(1 + wg, 128);
        }
    }

    /// A consumer warpgroup's end: after its threads' adds (the barrier), thread 0 counts `n`.
    #[inline(always)]
    pub unsafe fn end_warpgroup(self, wg: u32, tid: u32, n: u32) {
        if !self.sem.is_null() {
            bar_sync_named(1 + wg, 128);
            unsafe { self.end(tid == 0, n) };
        }
    }
}

/// Adds a warpgroup's 64 x 64 dQ part (an `m64n64` accumulator) to its accumulator chunk `dst`
/// straight from registers: the chunk's order is the registers' own, so each thread adds 16
/// contiguous bytes at a time and a warp 512.
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
