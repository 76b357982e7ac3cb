//! Which (batch, head, query block) a CTA computes, and the key tiles that block needs.
use crate::arch::atom::{atom_acq_rel_gpu_add_u32, atom_relaxed_gpu_add_u32};
use crate::arch::ids::{block_idx_x, grid_dim_x};
use crate::arch::shfl::shfl_sync_idx_u32;
use flashrs_abi::FwdParams;
use flashrs_abi::grid::{Extent, Tile, div_rem, tile_for_block};

/// The work of one CTA.
#[derive(Clone, Copy)]
pub struct Work {
    /// Batch index.
    pub batch: u32,
    /// Query head.
    pub head: u32,
    /// Key/value head (`head / group`).
    pub head_kv: u32,
    /// First query row (`m_block * BM`) within the sequence.
    pub m0: u32,
    /// Key tiles of `BN` rows the block sees: tiles `0..n_tiles`, walked from the last down.
    pub n_tiles: u32,
    /// The sequence's lengths and, variable-length, where its rows start in the packed tensors.
    pub extent: Extent,
    /// Batch coordinate of the tensor maps: `batch`, or 0 for variable-length launches, whose
    /// maps see the packed rows as one sequence.
    pub map_batch: u32,
}

impl Work {
    /// This work as lane 0 of the warp sees it ([`uniform_extent`]).
    #[inline(always)]
    pub fn warp_uniform(self) -> Self {
        Work { n_tiles: shfl_sync_idx_u32(self.n_tiles, 0), extent: uniform_extent(self.extent), ..self }
    }

    /// Row of the K/V maps where the key tile of iteration `t` starts (tiles are walked from the
    /// last, `BN` keys each).
    #[inline(always)]
    pub fn key_row<const BN: usize>(&self, t: u32) -> u32 {
        self.extent.k_start + (self.n_tiles - 1 - t) * BN as u32
    }

    /// True for a query block past its sequence's end (variable-length launches size the grid
    /// for the longest sequence): it has no row to compute.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.m0 >= self.extent.seqlen_q
    }
}

/// `e` as lane 0 of the warp sees it. The fields a variable-length launch loads from the
/// offsets are the same in every lane, but ptxas cannot tell: branching on them (the key loop,
/// the mask) would make it treat the consumers' wgmma code as divergent (9% slower on an H100).
/// Values that come from a `shfl.idx` of one lane it does treat as warp-uniform.
#[inline(always)]
pub fn uniform_extent(e: Extent) -> Extent {
    let b = |x: u32| shfl_sync_idx_u32(x, 0);
    Extent { seqlen_q: b(e.seqlen_q), seqlen_k: b(e.seqlen_k), q_start: b(e.q_start), k_start: b(e.k_start) }
}

/// Work tiles of a launch: `batch * heads_q * m_blocks` query blocks.
#[inline(always)]
pub fn tile_count(p: &FwdParams) -> u32 {
    p.batch * p.heads_q * p.m_blocks
}

/// Value of a work-tile slot that means "no more tiles" (any index past the last would do).
pub const NO_TILE: u32 = u32::MAX;

/// The first work tile of this CTA: its block index. The host launches one CTA per tile, or,
/// persistent, one per SM, each then claiming more ([`claim_next`]).
#[inline(always)]
pub fn first_tile() -> u32 {
    block_idx_x()
}

/// The work tile this CTA takes after `tile` (at least [`tile_count`]: none left). With a
/// launch counter ([`FwdParams::tile_counter`]), the next unclaimed one in grid order, so that
/// a CTA that finishes early takes more; otherwise every grid-size-th. Called by the
/// producer's one thread, as early as the claim can be made, so that the atomic's round trip
/// overlaps the current tile's loads.
#[inline(always)]
pub unsafe fn claim_next(p: &FwdParams, tile: u32) -> u32 {
    if p.tile_counter == 0 {
        return tile + grid_dim_x();
    }
    // The first grid-size tiles are the block indices; the counter numbers those after.
    unsafe { atom_relaxed_gpu_add_u32(p.tile_counter as *mut u32, 1) + grid_dim_x() }
}

/// Counts this CTA out after its last claim (one that found no tile); the last CTA out zeroes
/// the launch counter and the count for the next launch on the stream. Acquire-release: every
/// CTA's claims come before its count, so the last sees them all before it resets.
#[inline(always)]
pub unsafe fn retire(p: &FwdParams) {
    if p.tile_counter == 0 {
        return;
    }
    let ctr = p.tile_counter as *mut u32;
    unsafe {
        if atom_acq_rel_gpu_add_u32(ctr.add(1), 1) == grid_dim_x() - 1 {
            core::ptr::write_volatile(ctr, 0);
            core::ptr::write_volatile(ctr.add(1), 0);
        }
    }
}

/// The work of tile `tile` (< [`tile_count`]; query blocks of `BM` rows, key tiles of `BN`), in
/// the mma.sync kernels' grid order ([`tile_for_block`]: heaviest causal blocks first, CTAs
/// running together on a few heads); `VARLEN`: of a variable-length launch.
#[inline(always)]
pub fn work_for_tile<const BM: usize, const BN: usize, const VARLEN: bool>(p: &FwdParams, tile: u32) -> Work {
    let Tile { batch, head, m_block } = tile_for_block(p, tile);
    let m0 = m_block * BM as u32;
    let head_kv = div_rem(head, p.group).0;
    // SAFETY: `batch` is below the launch's batch, so its offsets exist.
    let extent = if VARLEN { unsafe { Extent::varlen(p, batch) } } else { Extent::fixed(p) };
    let Extent { seqlen_q, seqlen_k, .. } = extent;
    // Keys at or past the last real row's diagonal are never seen by this block.
    let keys = if p.causal != 0 {
        let last_row = (m0 + BM as u32).min(seqlen_q) as i64;
        (last_row + seqlen_k as i64 - seqlen_q as i64).clamp(0, seqlen_k as i64) as u32
    } else {
        seqlen_k
    };
    Work { batch, head, head_kv, m0, n_tiles: keys.div_ceil(BN as u32), extent, map_batch: if VARLEN { 0 } else { batch } }
}
