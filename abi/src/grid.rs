//! Grid order and sequence extents: which (batch, head, query block) a CTA computes, and where
//! a sequence's rows lie in the (packed) tensors. Both kernel families use these, and the host
//! plans by them (the interleave groups) and relies on them (the clamps that keep unchecked
//! device offsets inside the tensors), so they are part of the contract.
use core::num::NonZeroU32;

use crate::params::FwdParams;

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

    /// Sequence `batch` of a variable-length launch, from the offset arrays (two loads each).
    /// The offsets may be the caller's, unchecked (device-side `cu_seqlens`): each sequence is
    /// clamped into the packed rows (`start <= end <= total`) and to the launch's maxima (the
    /// grid covers `seqlen_q` rows per sequence), so wrong offsets give wrong rows, never an
    /// access outside the tensors. Valid offsets pass unchanged. Without key offsets (a paged
    /// launch whose key counts come from elsewhere) every sequence has `seqlen_k` keys.
    #[inline(always)]
    pub unsafe fn varlen(p: &FwdParams, batch: u32) -> Self {
        let b = batch as usize;
        let rows = |cu: u64, total: u32, most: u32| {
            let cu = cu as *const i32;
            let (first, next) = unsafe { (*cu.add(b), *cu.add(b + 1)) };
            let start = (first.max(0) as u32).min(total);
            let end = (next.max(0) as u32).max(start).min(total);
            (start, (end - start).min(most))
        };
        let (q_start, seqlen_q) = rows(p.cu_seqlens_q, p.total_q, p.seqlen_q);
        let (k_start, seqlen_k) = if p.cu_seqlens_k != 0 { rows(p.cu_seqlens_k, p.total_k, p.seqlen_k) } else { (0, p.seqlen_k) };
        Extent { seqlen_q, seqlen_k, q_start, k_start }
    }

    /// A paged sequence's own key count: `seqused_k[batch]` when the launch has one, clamped
    /// to `0..=seqlen_k` (the host checked that `seqlen_k` keys fit a block-table row), so no
    /// count reaches past the sequence's pages.
    #[inline(always)]
    pub unsafe fn with_seqused_k(self, p: &FwdParams, batch: u32) -> Self {
        if p.seqused_k == 0 {
            return self;
        }
        let used = unsafe { *(p.seqused_k as *const i32).add(batch as usize) };
        Extent { seqlen_k: (used.max(0) as u32).min(p.seqlen_k), ..self }
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
