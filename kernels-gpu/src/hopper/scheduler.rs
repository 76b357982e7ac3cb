//! Which (batch, head, query block) a CTA computes, and the key tiles that block needs.
use crate::arch::atom::{atom_acq_rel_gpu_add_u32, atom_relaxed_gpu_add_u32};
use crate::arch::ids::{block_idx_x, grid_dim_x};
use crate::arch::shfl::shfl_sync_idx_u32;
use crate::mods::MaskMod;
use crate::sparse::KeyBlocks;
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
    /// The first key tile (of `BN` rows) some row of the block sees.
    pub first_tile: u32,
    /// Key tiles the block sees: tiles `first_tile..first_tile + n_tiles`, walked from the last
    /// down; under a block mask, the tiles of its visited blocks in the mask's order.
    pub n_tiles: u32,
    /// The visited key blocks of a block-sparse launch (see [`crate::sparse`]).
    pub blocks: Option<KeyBlocks>,
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
        let b = |x: u32| shfl_sync_idx_u32(x, 0);
        Work { first_tile: b(self.first_tile), n_tiles: b(self.n_tiles), extent: uniform_extent(self.extent), ..self }
    }

    /// First key (within the sequence) of the key tile of iteration `t` (tiles are walked from
    /// the last, `BN` keys each; under a block mask, in its order).
    #[inline(always)]
    pub fn key0<const BN: usize>(&self, p: &FwdParams, t: u32) -> u32 {
        match self.blocks {
            Some(b) => b.key0::<BN>(&p.mods.blocks, t),
            None => (self.first_tile + self.n_tiles - 1 - t) * BN as u32,
        }
    }

    /// Row of the K/V maps where the key tile of iteration `t` starts.
    #[inline(always)]
    pub fn key_row<const BN: usize>(&self, p: &FwdParams, t: u32) -> u32 {
        self.extent.k_start + self.key0::<BN>(p, t)
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
/// running together on a few heads); `VARLEN`: of a variable-length launch; `M`: the mask,
/// whose span over the block's rows bounds its key tiles, or, with [`MaskMod::BLOCKS`], whose
/// block mask lists them; `PAGED`: of a launch over paged caches, whose sequences' keys start
/// at row 0 of their block-table rows and number `seqused_k` where given.
#[inline(always)]
pub fn work_for_tile<const BM: usize, const BN: usize, const VARLEN: bool, const PAGED: bool, M: MaskMod>(p: &FwdParams, tile: u32) -> Work {
    const { assert!(!M::BLOCKS || BM == flashrs_abi::params::SPARSE_BLOCK as usize) };
    let Tile { batch, head, m_block } = tile_for_block(p, tile);
    let m0 = m_block * BM as u32;
    let head_kv = div_rem(head, p.group).0;
    // SAFETY: `batch` is below the launch's batch, so its offsets (and key count) exist.
    let extent = if VARLEN { unsafe { Extent::varlen(p, batch) } } else { Extent::fixed(p) };
    let extent = if PAGED { Extent { k_start: 0, ..unsafe { extent.with_seqused_k(p, batch) } } } else { extent };
    // Keys no real row of the block sees (past the last one's diagonal, before the first one's
    // window) are never loaded.
    let row_end = (m0 + BM as u32).min(extent.seqlen_q);
    let (first_key, keys) = M::new(p, batch, head, &extent).span(m0 as i32, row_end as i32);
    let first_tile = first_key as u32 / BN as u32;
    // A block-sparse kernel launched without a mask (counts 0) walks the window's tiles.
    let blocks = (M::BLOCKS && p.mods.blocks.counts != 0).then(|| KeyBlocks::new(&p.mods.blocks, batch, head, m_block));
    let n_tiles = match blocks {
        Some(b) => b.tiles::<BN>(),
        None => (keys as u32).div_ceil(BN as u32) - first_tile,
    };
    Work { batch, head, head_kv, m0, first_tile, n_tiles, blocks, extent, map_batch: if VARLEN { 0 } else { batch } }
}
