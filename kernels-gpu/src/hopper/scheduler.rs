//! Which (batch, head, query block) a CTA computes, and the key tiles that block needs.
use crate::arch::ids::block_idx_x;
use crate::fwd::params::FwdParams;
use crate::fwd::scheduler::{Tile, div_rem, tile_for_block};

/// The work of one CTA.
#[derive(Clone, Copy)]
pub struct Work {
    /// Batch index.
    pub batch: u32,
    /// Query head.
    pub head: u32,
    /// Key/value head (`head / group`).
    pub head_kv: u32,
    /// First query row (`m_block * BM`).
    pub m0: u32,
    /// Key tiles of `BN` rows the block sees: tiles `0..n_tiles`, walked from the last down.
    pub n_tiles: u32,
}

/// Work tiles of a launch: `batch * heads_q * m_blocks` query blocks.
#[inline(always)]
pub fn tile_count(p: &FwdParams) -> u32 {
    p.batch * p.heads_q * p.m_blocks
}

/// The tiles this CTA computes: its block index, then every grid size further. The host
/// launches one CTA per tile (each computes one) or, persistent, one per SM (each walks
/// several, reusing its barriers and prefetching the next tile's K/V during the epilogue).
#[derive(Clone, Copy)]
pub struct CtaTiles {
    next: u32,
    step: u32,
    total: u32,
}

impl CtaTiles {
    /// This CTA's tiles.
    #[inline(always)]
    pub fn new(p: &FwdParams) -> Self {
        CtaTiles { next: block_idx_x(), step: unsafe { core::arch::nvptx::_grid_dim_x() }, total: tile_count(p) }
    }
}

impl Iterator for CtaTiles {
    type Item = u32;
    #[inline(always)]
    fn next(&mut self) -> Option<u32> {
        let t = self.next;
        if t >= self.total {
            return None;
        }
        self.next += self.step;
        Some(t)
    }
}

/// The work of tile `tile` (query blocks of `BM` rows, key tiles of `BN`), in the mma.sync
/// kernels' grid order ([`tile_for_block`]: heaviest causal blocks first, CTAs running together
/// on a few heads).
#[inline(always)]
pub fn work_for_tile<const BM: usize, const BN: usize>(p: &FwdParams, tile: u32) -> Work {
    let Tile { batch, head, m_block } = tile_for_block(p, tile);
    let m0 = m_block * BM as u32;
    let head_kv = div_rem(head, p.group).0;
    // Keys at or past the last real row's diagonal are never seen by this block.
    let keys = if p.causal != 0 {
        let last_row = (m0 + BM as u32).min(p.seqlen_q) as i64;
        (last_row + p.seqlen_k as i64 - p.seqlen_q as i64).clamp(0, p.seqlen_k as i64) as u32
    } else {
        p.seqlen_k
    };
    Work { batch, head, head_kv, m0, n_tiles: keys.div_ceil(BN as u32) }
}
