//! The producer: one thread of the producer warpgroup issues every TMA load of the CTA.
//!
//! Q once (completing on `q_full`), then the key tiles in the consumers' order (last tile
//! first), each K and V into the next free stage (after its `k_empty`/`v_empty` phase), K one
//! tile ahead of V. Each tile is `D / 64` boxes of 64 columns x rows; rows past the sequence
//! (and columns past head_dim) arrive as zeros and still count their full bytes.
use super::config::BLOCK_M;
use super::pipeline::{PipeState, wait_empty};
use super::scheduler::Work;
use super::smem::Smem;
use crate::arch::mbarrier::mbarrier_arrive_expect_tx;
use crate::arch::tma::{TensorMap, cp_async_bulk_tensor_4d_g2s, prefetch_tensormap};

/// The CTA's tensor maps (4-D views `[head_dim, seqlen, heads, batch]`, innermost first, boxes
/// of 64 columns x rows, 128-byte swizzle).
#[derive(Clone, Copy)]
pub struct Maps {
    /// Q, boxes of `BLOCK_M` rows.
    pub q: *const TensorMap,
    /// K, boxes of `BN` rows.
    pub k: *const TensorMap,
    /// V, boxes of `BN` rows.
    pub v: *const TensorMap,
}

/// Loads `D / 64` boxes of `ROWS` rows at sequence row `row` into the slabs at `dst`.
#[inline(always)]
unsafe fn load_tile<const D: usize, const ROWS: usize>(dst: u32, map: *const TensorMap, row: u32, head: u32, batch: u32, bar: u32) {
    for s in 0..D / 64 {
        unsafe {
            cp_async_bulk_tensor_4d_g2s(dst + (s * ROWS * 128) as u32, map, (64 * s) as i32, row as i32, head as i32, batch as i32, bar)
        };
    }
}

/// Runs the producer loop (one thread).
#[inline(always)]
pub unsafe fn run<const D: usize, const BN: usize, const STAGES: usize>(maps: Maps, smem: Smem<D, BN, STAGES>, work: Work) {
    let kv_bytes = (BN * D * 2) as u32;
    unsafe {
        prefetch_tensormap(maps.q);
        prefetch_tensormap(maps.k);
        prefetch_tensormap(maps.v);
        mbarrier_arrive_expect_tx(smem.q_full(), (BLOCK_M * D * 2) as u32);
        load_tile::<D, BLOCK_M>(smem.q(), maps.q, work.m0, work.head, work.batch, smem.q_full());
    }
    // K of tile t+1 goes before V of tile t: the pipelined consumers need S(t+1) = Q K(t+1)^T
    // before P(t) V(t). Tile t (from the last) starts at key (n_tiles - 1 - t) * BN.
    let row = |t: u32| (work.n_tiles - 1 - t) * BN as u32;
    let load_k = |pipe: PipeState<STAGES>, t: u32| unsafe {
        wait_empty(smem.k_empty(pipe.stage), pipe.phase);
        mbarrier_arrive_expect_tx(smem.k_full(pipe.stage), kv_bytes);
        load_tile::<D, BN>(smem.k(pipe.stage), maps.k, row(t), work.head_kv, work.batch, smem.k_full(pipe.stage));
    };
    let load_v = |pipe: PipeState<STAGES>, t: u32| unsafe {
        wait_empty(smem.v_empty(pipe.stage), pipe.phase);
        mbarrier_arrive_expect_tx(smem.v_full(pipe.stage), kv_bytes);
        load_tile::<D, BN>(smem.v(pipe.stage), maps.v, row(t), work.head_kv, work.batch, smem.v_full(pipe.stage));
    };
    if work.n_tiles == 0 {
        return;
    }
    let mut pk = PipeState::<STAGES>::new();
    load_k(pk, 0);
    for t in 1..work.n_tiles {
        let pv = pk;
        pk.advance();
        load_k(pk, t);
        load_v(pv, t - 1);
    }
    load_v(pk, work.n_tiles - 1);
}
