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
    ///
    /// # Safety
    /// `p.cu_seqlens_q` (and `p.cu_seqlens_k` when non-null) hold at least `batch + 2` i32
    /// values readable from the calling thread.
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
    ///
    /// # Safety
    /// `p.seqused_k`, when non-null, holds at least `batch + 1` i32 values readable from the
    /// calling thread.
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Launch parameters of a variable-length launch over `cq` / `ck` (host arrays standing in
    /// for device memory): maxima `seqlen`, packed rows `total`.
    fn varlen_params(cq: &[i32], ck: &[i32], heads_q: u32, [seqlen_q, seqlen_k]: [u32; 2], [total_q, total_k]: [u32; 2]) -> FwdParams {
        FwdParams {
            batch: cq.len() as u32 - 1,
            heads_q,
            seqlen_q,
            seqlen_k,
            total_q,
            total_k,
            cu_seqlens_q: cq.as_ptr() as u64,
            cu_seqlens_k: ck.as_ptr() as u64,
            ..Default::default()
        }
    }

    /// A sequence's extent comes from the offsets in a variable-length launch (read here from
    /// host memory, as the kernels read device memory), and its log-sum-exp rows sit at
    /// `head * total_q + q_start`; fixed-length launches use their own lengths.
    #[test]
    fn sequence_extents_and_lse_rows_follow_the_offsets() {
        let (cq, ck) = ([0i32, 3, 3, 10], [0i32, 5, 7, 20]);
        let p = varlen_params(&cq, &ck, 4, [7, 13], [10, 20]);
        // SAFETY: both arrays hold batch + 1 offsets.
        let e = unsafe { Extent::varlen(&p, 2) };
        assert_eq!((e.seqlen_q, e.seqlen_k, e.q_start, e.k_start), (7, 13, 3, 7));
        assert_eq!(e.lse_first(&p, 2, 1, true), 10 + 3);
        let empty = unsafe { Extent::varlen(&p, 1) };
        assert_eq!((empty.seqlen_q, empty.seqlen_k), (0, 2));
        let f = Extent::fixed(&p);
        assert_eq!((f.seqlen_q, f.seqlen_k, f.q_start, f.k_start), (7, 13, 0, 0));
        assert_eq!(f.lse_first(&p, 2, 1, false), (2 * 4 + 1) * 7);
    }

    /// Offsets read from the caller's device memory are clamped into the packed rows and to
    /// the maxima, whatever they hold, so a kernel's rows (`q_start + row < q_start + seqlen_q
    /// <= total_q`, likewise for keys) stay inside the tensors; paged launches take their key
    /// counts from `seqused_k` (clamped) or, without key offsets, `seqlen_k`.
    #[test]
    fn device_offsets_are_clamped_into_the_packed_rows() {
        let (cq, ck) = ([5i32, -4, 9, 100, i32::MIN, i32::MAX, 3], [0i32, 30, 2, -1, 7, 7, 8]);
        let p = varlen_params(&cq, &ck, 1, [4, 13], [10, 20]);
        let extents: std::vec::Vec<_> = (0..6)
            .map(|b| {
                // SAFETY: both arrays hold batch + 1 offsets.
                let e = unsafe { Extent::varlen(&p, b) };
                assert!(e.q_start + e.seqlen_q <= p.total_q && e.k_start + e.seqlen_k <= p.total_k, "{b}");
                (e.q_start, e.seqlen_q, e.k_start, e.seqlen_k)
            })
            .collect();
        // Decreasing, negative, past the totals, longer than the maxima.
        let want = [(5, 0, 0, 13), (0, 4, 20, 0), (9, 1, 2, 0), (10, 0, 0, 7), (0, 4, 7, 0), (10, 0, 7, 1)];
        assert_eq!(extents, want);

        // Paged: no key offsets, then seqused_k overriding (clamped to 0..=seqlen_k).
        let used = [-3i32, 2, 1000, 13, 0, 7];
        let paged = FwdParams { cu_seqlens_k: 0, ..p };
        let counts: std::vec::Vec<u32> = (0..6).map(|b| unsafe { Extent::varlen(&paged, b) }.seqlen_k).collect();
        assert_eq!(counts, [13; 6]);
        let with_used = FwdParams { seqused_k: used.as_ptr() as u64, ..paged };
        // SAFETY: `used` holds a count per sequence.
        let counts: std::vec::Vec<u32> = (0..6).map(|b| unsafe { Extent::varlen(&with_used, b).with_seqused_k(&with_used, b) }.seqlen_k).collect();
        assert_eq!(counts, [0, 2, 13, 13, 0, 7]);
        let fixed = unsafe { Extent::fixed(&paged).with_seqused_k(&paged, 3) };
        assert_eq!(fixed.seqlen_k, 13, "no seqused_k: every sequence has seqlen_k keys");
    }

    /// The grid order of `interleave` groups visits every (batch, head, query block) once, and
    /// the launch ends on query block 0 (the lightest causal one) of a whole group.
    #[test]
    fn interleaved_grid_order_is_a_permutation_ending_on_light_blocks() {
        for (batch, heads, m_blocks) in [(1, 7, 60), (8, 32, 11), (2, 3, 5), (1, 1, 9), (3, 5, 1)] {
            let pairs = batch * heads;
            for g in [1, 2, 4, 5, pairs] {
                let p = FwdParams { batch, heads_q: heads, m_blocks, interleave: g, ..Default::default() };
                let grid = pairs * m_blocks;
                let mut seen = std::vec![false; grid as usize];
                for block in 0..grid {
                    let t = tile_for_block(&p, block);
                    assert!(t.batch < batch && t.head < heads && t.m_block < m_blocks, "{p:?} block {block}");
                    let i = ((t.batch * heads + t.head) * m_blocks + t.m_block) as usize;
                    assert!(!core::mem::replace(&mut seen[i], true), "{p:?}: block {block} repeats a tile");
                }
                // Every block of the last whole group's last round is a query block 0.
                let last_round = g.min(pairs);
                for block in grid - last_round..grid {
                    assert_eq!(tile_for_block(&p, block).m_block, 0, "{p:?} block {block}");
                }
            }
        }
    }
}
