//! Where a Hopper backward CTA's results leave: each step's dQ parts, staged by the consumers
//! and added to the f32 accumulator by a writer warp's bulk reductions (head_dim 64) or added
//! from registers (elsewhere, see [`flashrs_abi::BwdSm90Config::dq_buffers`]), and dK, dV at
//! the end.
use super::Walk;
use super::smem::Smem;
use crate::arch::atom::{atom_acq_rel_gpu_add_u32, ld_acquire_gpu_u32, red_relaxed_gpu_add_v4_f32};
use crate::arch::barrier::{bar_arrive_named, bar_sync_named};
use crate::arch::bulk::{cp_async_bulk_commit_group, cp_async_bulk_wait_group_0, cp_async_bulk_wait_group_read, cp_reduce_async_bulk_add_f32};
use crate::arch::fence::fence_proxy_async_shared_cta;
use crate::arch::mbarrier::mbarrier_arrive;
use crate::arch::smem::st_shared_v4;
use crate::dtype::Element;
use crate::hopper::pipeline::wait_empty;
use flashrs_abi::{AccumLayout, BwdParams};

/// Named barriers (two per consumer warpgroup, one per staging tile) on which a consumer
/// warpgroup (arriving) hands a staged dQ part to the dQ writer warp (waiting): 128 + 32
/// threads. One per tile, so that a warpgroup's next arrival (which first waits for the other
/// tile to be free, see [`stage_dq`]) never meets the writer's previous wait.
const STAGED: u32 = 4;

/// Consumer side: stages warpgroup `wg`'s step-`i` dQ part (an `m64n64` accumulator) in its
/// tile `i % 2` ([`Smem::dq`]: the registers' own order, 16 contiguous bytes per thread,
/// conflict-free) and hands it to the writer warp ([`dq_writer`]) without waiting for it. First
/// waits until the writer freed the tile (its reduction of step `i - 2` has read it).
#[inline(always)]
pub unsafe fn stage_dq<const D: usize, const BM: usize, const STAGES: usize>(dq: &[f32; 32], smem: Smem<D, BM, STAGES>, i: u32, wg: u32, tid: u32) {
    let b = i % 2;
    unsafe { wait_empty(smem.dq_free(wg, b), (i / 2) & 1) };
    for k in 0..8 {
        let v = [dq[4 * k].to_bits(), dq[4 * k + 1].to_bits(), dq[4 * k + 2].to_bits(), dq[4 * k + 3].to_bits()];
        unsafe { st_shared_v4(smem.dq(wg, b) + (k * 2048) as u32 + 16 * tid, v) };
    }
    fence_proxy_async_shared_cta();
    bar_arrive_named(STAGED + 2 * wg + b, 160);
}

/// The dQ writer, one warp of the producer warpgroup where the consumers stage their dQ parts
/// ([`flashrs_abi::BwdSm90Config::dq_buffers`], head_dim 64): per step of the walk, waits for
/// each consumer warpgroup's staged part ([`stage_dq`]) and adds it to the accumulator (both
/// parts go to the step's one chunk: at head_dim 64 the consumers split dQ by keys) with one
/// bulk reduction from lane 0; once a step's reductions are issued, frees the tiles of the step
/// before, whose reductions have then read them. FlashAttention-3's arrangement: the consumers never wait
/// for a reduction to be issued.
#[inline(always)]
pub unsafe fn dq_writer<const D: usize, const BM: usize, const STAGES: usize, const DET: bool>(p: &BwdParams, smem: Smem<D, BM, STAGES>, w: Walk, lane: u32) {
    for i in 0..w.steps() {
        let (h, m) = w.step(i);
        let dst = w.dq_chunk::<D>(p, h, m * BM as u32, 0);
        // Deterministic mode: the two parts one after the other, each complete before the next
        // add to the chunk (bulk reductions in flight are not ordered among themselves).
        let turn = Turn::at::<DET>(p, &w, h, m * BM as u32);
        unsafe { turn.wait(lane == 0) };
        for wg in 0..2 {
            bar_sync_named(STAGED + 2 * wg + i % 2, 160);
            if lane == 0 {
                unsafe { cp_reduce_async_bulk_add_f32(dst, smem.dq(wg, i % 2), (AccumLayout::CHUNK * 4) as u32) };
                cp_async_bulk_commit_group();
                if DET {
                    cp_async_bulk_wait_group_0();
                }
            }
        }
        unsafe { turn.end(lane == 0, 2) };
        if lane == 0 && i > 0 {
            cp_async_bulk_wait_group_read::<2>();
            unsafe {
                mbarrier_arrive(smem.dq_free(0, (i - 1) % 2));
                mbarrier_arrive(smem.dq_free(1, (i - 1) % 2));
            }
        }
    }
    if lane == 0 {
        cp_async_bulk_wait_group_0();
    }
}

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
    /// The walk's turn at the counter of query head `h`'s block holding row `row` where `DET`
    /// (deterministic mode), else none.
    /// A compile-time choice, so that the default mode's code carries no trace of the turns:
    /// a run-time null check alone measured 4-5% slower at head_dim 128.
    #[inline(always)]
    pub fn at<const DET: bool>(p: &BwdParams, w: &Walk, h: u32, row: u32) -> Self {
        let sem = if DET { w.semaphore(p, h, row) } else { core::ptr::null_mut() };
        Turn { sem, before: 2 * w.key_block }
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
/// contiguous bytes at a time and a warp 512 ([`stage_dq`]'s layout without the staging).
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
