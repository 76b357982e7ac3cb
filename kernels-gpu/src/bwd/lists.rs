//! Block masks turned around for the backward's walk ([`QueryLists`]): a block mask lists, per
//! query block, the key blocks it visits; a backward CTA owns a key block and walks the query
//! steps that see it. Two small launches before the main kernel build those walks.
//!
//! [`bits`] gives each row of the mask's count arrays one CTA, which zeroes the row's bitmap
//! and sets a bit per listed key block (`red.or`; the lists may hold any order and repeats).
//! [`lists`] gives each (batch entry, K/V head, 32 key blocks) one warp, whose lane `c` owns key
//! block `32 chunk + c`'s list. The warp walks the group's query steps in `(g, m)` order, 32
//! at once, a lane each: the lane reads its step's bitmap word of the chunk, and for each of
//! the 32 key blocks a ballot of the lanes whose bit is set places them after the entries the
//! list already has (its owner's count, broadcast by a shuffle), so every list comes out in
//! walk order without atomics. In deterministic mode an entry's turn is the number of key
//! blocks before its own in its query block's bitmap: the key blocks that add to that step's
//! dQ before it.
use crate::arch::atom::red_relaxed_gpu_or_u32;
use crate::arch::barrier::bar_sync;
use crate::arch::ids::{block_idx_x, thread_idx_x};
use crate::arch::shfl::{ballot_sync, shfl_sync_idx_u32};
use crate::sparse::KeyBlocks;
use flashrs_abi::{BwdParams, QueryLists};
use flashrs_abi::bwd::BWD_ROW_THREADS;
use flashrs_abi::grid::{Extent, div_rem};
use flashrs_abi::params::SPARSE_BLOCK;

/// One row of the mask's count arrays (the CTA index) as a bitmap; [`BWD_ROW_THREADS`] threads.
#[inline(always)]
pub unsafe fn bits(p: &BwdParams) {
    let (b, l) = (&p.fwd.mods.blocks, &p.lists);
    let (row, tid) = (block_idx_x(), thread_idx_x());
    let words = (l.bits as *mut u32).wrapping_add(row as usize * l.words as usize);
    let mut w = tid;
    while w < l.words {
        unsafe { *words.add(w as usize) = 0 };
        w += BWD_ROW_THREADS as u32;
    }
    // The zeros land before any thread's bits.
    bar_sync();
    let lists = KeyBlocks::of_row(b, row);
    let mut j = tid;
    while j < lists.len() {
        // Clamped to `kv_blocks`: a block of no key, never visited.
        let kb = lists.block(b, j);
        if kb < b.kv_blocks {
            unsafe { red_relaxed_gpu_or_u32(words.add(kb as usize / 32), 1 << (kb % 32)) };
        }
        j += BWD_ROW_THREADS as u32;
    }
}

/// The lists of 32 key blocks of one (batch entry, K/V head) (see the module docs); one warp.
#[inline(always)]
pub unsafe fn lists(p: &BwdParams) {
    let (f, l) = (&p.fwd, &p.lists);
    let b = &f.mods.blocks;
    let lane = thread_idx_x();
    let (bh, chunk) = div_rem(block_idx_x(), l.kv_blocks.div_ceil(32));
    let (batch, h_kv) = div_rem(bh, div_rem(f.heads_q, f.group).0);
    let e = if f.cu_seqlens_q != 0 { unsafe { Extent::varlen(f, batch) } } else { Extent::fixed(f) };
    // (The host guarantees `block_m` > 0.)
    let steps = div_rem(e.seqlen_q + l.block_m - 1, l.block_m).0;
    let per_block = div_rem(SPARSE_BLOCK, l.block_m).0;
    let total = f.group * steps;
    // The chunk's key blocks that have lists (a mask may list blocks past the longest sequence).
    let kb0 = chunk * 32;
    let listed = if l.kv_blocks - kb0 >= 32 { u32::MAX } else { (1u32 << (l.kv_blocks - kb0)) - 1 };
    let list = |c: u32| l.list(bh, (kb0 + c) * SPARSE_BLOCK) as usize * l.per_list as usize;
    let below = (1u32 << lane) - 1;
    let mut count = 0u32;
    let mut t0 = 0;
    while t0 < total {
        let t = t0 + lane;
        let (g, m) = div_rem(t, steps.max(1));
        let row = batch * b.batch_stride + (h_kv * f.group + g) * b.head_stride + div_rem(m, per_block).0;
        let words = (l.bits as *const u32).wrapping_add(row as usize * l.words as usize);
        let word = if t < total { listed & unsafe { *words.add(chunk as usize) } } else { 0 };
        // The query block's listed key blocks before the chunk.
        let mut before = 0;
        if l.turns != 0 && t < total {
            for w in 0..chunk {
                before += unsafe { *words.add(w as usize) }.count_ones();
            }
        }
        for c in 0..32 {
            let set = word >> c & 1 != 0;
            let votes = ballot_sync(set);
            // The list's count so far; its owner counts the votes in. (Used outside `set`, so
            // that LLVM keeps the shuffle where every lane runs it.)
            let base = shfl_sync_idx_u32(count, c);
            if set {
                let i = list(c) + (base + (votes & below).count_ones()) as usize;
                unsafe { *(l.entries as *mut u32).add(i) = QueryLists::entry(g, m) };
                if l.turns != 0 {
                    unsafe { *(l.turns as *mut u32).add(i) = before + (word & ((1 << c) - 1)).count_ones() };
                }
            }
            if lane == c {
                count = base + votes.count_ones();
            }
        }
        t0 += 32;
    }
    if listed >> lane & 1 != 0 {
        unsafe { *(l.counts as *mut u32).add(l.list(bh, (kb0 + lane) * SPARSE_BLOCK) as usize) = count };
    }
}
