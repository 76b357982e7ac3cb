//! Maps a CTA to the (batch, head, query block) it computes.
use core::num::NonZeroU32;

use super::params::FwdParams;

/// `a / b` and `a % b` without the divide-by-zero panic path (which would leave unresolved
/// calls in the PTX). The host guarantees `b > 0`.
#[inline(always)]
pub fn div_rem(a: u32, b: u32) -> (u32, u32) {
    let b = unsafe { NonZeroU32::new_unchecked(b) };
    (a / b, a % b)
}

/// The work of one CTA.
#[derive(Clone, Copy)]
pub struct Tile {
    /// Batch index.
    pub batch: u32,
    /// Query head.
    pub head: u32,
    /// Query block index (rows `m_block * block_m ..`).
    pub m_block: u32,
}

/// A 1-D grid, query blocks fastest: CTAs running together belong to one or two heads and
/// walk the same K/V tiles in step, so K/V is read from HBM about once and then hit in L2.
/// Within a head the last query block comes first: under causal masking it is the heaviest,
/// which keeps the lightest blocks for the tail of the launch.
#[inline(always)]
pub fn tile_for_block(p: &FwdParams, block: u32) -> Tile {
    let (bh, m) = div_rem(block, p.m_blocks);
    let (batch, head) = div_rem(bh, p.heads_q);
    Tile { batch, head, m_block: p.m_blocks - 1 - m }
}
