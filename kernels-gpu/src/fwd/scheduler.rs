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

/// A 1-D grid in groups of `interleave` (batch, head) pairs: within a group the query blocks
/// go from the last (under causal masking the heaviest) to the first, each block index once
/// for every pair of the group. When the pairs do not divide into whole groups, the short
/// group comes first: the launch ends on the lightest blocks of a whole group (a short last
/// group started its heaviest blocks at the very end, 2-4% slower on the H100). CTAs running
/// together belong to a few heads that walk the same K/V tiles, read from HBM about once and
/// then hit in L2. With `interleave` 1 a pair's blocks run together.
#[inline(always)]
pub fn tile_for_block(p: &FwdParams, block: u32) -> Tile {
    let g = if p.interleave > 1 { p.interleave } else { 1 };
    let short = div_rem(p.batch * p.heads_q, g).1;
    let short_tiles = short * p.m_blocks;
    let (first, size, r) = if block < short_tiles {
        (0, short, block)
    } else {
        let (group, r) = div_rem(block - short_tiles, g * p.m_blocks);
        (short + group * g, g, r)
    };
    let (m, i) = div_rem(r, size);
    let (batch, head) = div_rem(first + i, p.heads_q);
    Tile { batch, head, m_block: p.m_blocks - 1 - m }
}

/// Where batch entry `batch`'s rows lie: its query and key counts, and the rows its query and
/// key rows start at in their (packed) tensors.
#[derive(Clone, Copy)]
pub struct Extent {
    /// Query rows of the sequence.
    pub seqlen_q: u32,
    /// Key rows of the sequence.
    pub seqlen_k: u32,
    /// Its first query row in the packed Q (and O).
    pub q_start: u32,
    /// Its first key row in the packed K and V.
    pub k_start: u32,
}

impl Extent {
    /// The launch's own lengths, each batch entry's rows from 0 (fixed-length launches).
    #[inline(always)]
    pub fn fixed(p: &FwdParams) -> Self {
        Extent { seqlen_q: p.seqlen_q, seqlen_k: p.seqlen_k, q_start: 0, k_start: 0 }
    }

    /// Sequence `batch` of a variable-length launch, from the offset arrays (two loads each;
    /// the host validated them: non-decreasing from 0, within the packed totals).
    #[inline(always)]
    pub unsafe fn varlen(p: &FwdParams, batch: u32) -> Self {
        let (cq, ck) = (p.cu_seqlens_q as *const u32, p.cu_seqlens_k as *const u32);
        let b = batch as usize;
        let (q0, q1, k0, k1) = unsafe { (*cq.add(b), *cq.add(b + 1), *ck.add(b), *ck.add(b + 1)) };
        Extent { seqlen_q: q1.wrapping_sub(q0), seqlen_k: k1.wrapping_sub(k0), q_start: q0, k_start: k0 }
    }

    /// Offset of row 0 of (this sequence's) query head `head` of batch entry `batch` in the
    /// log-sum-exp: `[batch, heads_q, seqlen_q]`, or for variable-length launches
    /// `[heads_q, total_q]` (FlashAttention's varlen layout).
    #[inline(always)]
    pub fn lse_first(&self, p: &FwdParams, batch: u32, head: u32, varlen: bool) -> usize {
        if varlen {
            head as usize * p.total_q as usize + self.q_start as usize
        } else {
            (batch * p.heads_q + head) as usize * p.seqlen_q as usize
        }
    }
}
