//! The producer: one thread of the producer warpgroup issues every TMA load of the CTA: K and
//! V once, then per step of the walk the step's Q and dO tiles and its rows' statistics (one
//! 512-byte bulk copy) into the next stage of the ring (after the consumers released its
//! previous fill). Rows past the sequence arrive as zeros, and their statistics as the prep
//! kernel's padding.
use super::{Order, Walk};
use super::smem::Smem;
use crate::arch::bulk::cp_async_bulk_g2s;
use crate::arch::mbarrier::mbarrier_arrive_expect_tx;
use crate::arch::tma::{TensorMap, prefetch_tensormap};
use crate::hopper::pipeline::{PipeState, wait_empty};
use crate::hopper::producer::load_tile;
use flashrs_abi::{AccumLayout, BwdParams, BwdSm90Config};

/// The CTA's tensor maps (4-D `[head_dim, seqlen, heads, batch]`, 64-column boxes, 128-byte
/// swizzle).
#[derive(Clone, Copy)]
pub struct Maps {
    /// Q, boxes of `block_m` rows.
    pub q: *const TensorMap,
    /// K, boxes of `block_n` rows.
    pub k: *const TensorMap,
    /// V, boxes of `block_n` rows.
    pub v: *const TensorMap,
    /// dO, boxes of `block_m` rows.
    pub dout: *const TensorMap,
}

/// Runs the producer (one thread) over the CTA's walk; `BN` is the CTA's keys.
#[inline(always)]
pub unsafe fn run<K: Order, const D: usize, const BM: usize, const BN: usize, const STAGES: usize, const VARLEN: bool>(maps: Maps, p: &BwdParams, smem: Smem<D, BM, STAGES>, w: Walk<K>) {
    const { assert!(BN == BwdSm90Config { head_dim: D, block_m: BM, stages: STAGES }.block_n()) };
    // One block of statistics per 64 rows of the step.
    const STATS_BYTES: u32 = (AccumLayout::STATS * 4) as u32;
    let blocks = BM as u32 / 64;
    unsafe {
        prefetch_tensormap(maps.q);
        prefetch_tensormap(maps.k);
        prefetch_tensormap(maps.v);
        prefetch_tensormap(maps.dout);
        let kv = smem.kv_full();
        mbarrier_arrive_expect_tx(kv, (2 * BN * D * 2) as u32);
        let keys = w.extent.k_start + w.n0;
        load_tile::<D, BN>(smem.k(), maps.k, keys, w.h_kv, w.map_batch, kv);
        load_tile::<D, BN>(smem.v(), maps.v, keys, w.h_kv, w.map_batch, kv);
    }
    let mut pipe = PipeState::<STAGES>::new();
    for i in 0..w.steps() {
        let full = smem.q_full(pipe.stage);
        unsafe { wait_empty(smem.q_empty(pipe.stage), pipe.phase) };
        // After the wait: the step's slot is the stage's (the barrier's arrive publishes it).
        let (h, m) = w.produce(p, i, smem.step(pipe.stage));
        let row = m * BM as u32;
        unsafe {
            mbarrier_arrive_expect_tx(full, (2 * BM * D * 2) as u32 + blocks * STATS_BYTES);
            let rows = w.extent.q_start + row;
            load_tile::<D, BM>(smem.q(pipe.stage), maps.q, rows, h, w.map_batch, full);
            load_tile::<D, BM>(smem.dout(pipe.stage), maps.dout, rows, h, w.map_batch, full);
            for b in 0..blocks {
                let at = w.stats::<VARLEN>(p, h, row + 64 * b) as *const u8;
                cp_async_bulk_g2s(smem.stats(pipe.stage) + b * STATS_BYTES, at, STATS_BYTES, full);
            }
        }
        pipe.advance();
    }
}
