//! Block masks built on the GPU from a dense boolean mask ([`DenseBlockMask`]): the lists
//! [`crate::sparse`] reads, for masks too large to build on the host or that a model computes
//! on the GPU.
//!
//! One CTA per (batch entry, head, query block) walks the key blocks in ascending order. Per
//! block, warp `w` reads rows `w, w + 8, ...` of the block, lane `l` keys `4l..4l + 4` of each
//! (a warp reads a row's 128 bytes together; one 4-byte load where rows start 4-byte aligned,
//! else four byte loads), and two barrier reductions (thread counts) tell every thread
//! whether any and whether all of those bytes are set. Every thread then keeps the same two
//! counts, and thread 0 appends the block to the partial or the full list: the lists come out
//! ascending without atomics or a second pass, as the host's `HostBlockMask::from_dense`
//! builds them, and the threads fill the entries past each count with 0 afterwards.
use crate::arch::barrier::bar_red_popc;
use crate::arch::ids::{block_idx_x, thread_idx_x};
use flashrs_abi::DenseBlockMask;
use flashrs_abi::grid::div_rem;
use flashrs_abi::params::{DENSE_BLOCK_MASK_THREADS, SPARSE_BLOCK};

/// Builds the lists of one query block (see the module docs); a grid of one CTA of
/// [`DENSE_BLOCK_MASK_THREADS`] threads per (batch entry, head, query block).
#[cfg(feature = "entries")]
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn block_mask_from_dense(p: DenseBlockMask) {
    const WARPS: u32 = DENSE_BLOCK_MASK_THREADS / 32;
    let row = block_idx_x();
    let (bh, qb) = div_rem(row, p.q_blocks);
    let (tid, warp, lane) = (thread_idx_x(), thread_idx_x() / 32, thread_idx_x() % 32);
    let r0 = qb * SPARSE_BLOCK;
    let rows = p.seqlen_q.saturating_sub(r0).min(SPARSE_BLOCK);
    let (sq, sk) = (p.seqlen_q as usize, p.seqlen_k as usize);
    let dense = (p.dense as *const u8).wrapping_add(bh as usize * sq * sk + r0 as usize * sk);
    let at = row as usize * p.kv_blocks as usize;
    let (indices, full_indices) = ((p.indices as *mut i32).wrapping_add(at), (p.full_indices as *mut i32).wrapping_add(at));
    // Uniform: the word loads when every row starts on a 4-byte boundary.
    let words = sk % 4 == 0 && p.dense % 4 == 0;
    let (mut partial, mut full) = (0u32, 0u32);
    for kb in 0..p.kv_blocks {
        let k0 = kb * SPARSE_BLOCK;
        let keys = p.seqlen_k.saturating_sub(k0).min(SPARSE_BLOCK);
        let (mut any, mut all) = (false, true);
        let mut r = warp;
        if words {
            // Rows start 4-byte aligned, and a block's keys are whole words: a word a lane.
            while r < rows {
                if 4 * lane < keys {
                    let w = unsafe { *(dense.wrapping_add(r as usize * sk + (k0 + 4 * lane) as usize) as *const u32) };
                    any |= w != 0;
                    // No zero byte (the classic test: a byte borrows only if it was zero).
                    all &= w.wrapping_sub(0x0101_0101) & !w & 0x8080_8080 == 0;
                }
                r += WARPS;
            }
        } else {
            while r < rows {
                let line = dense.wrapping_add(r as usize * sk + k0 as usize);
                for j in 0..4 {
                    let k = 4 * lane + j;
                    if k < keys {
                        let set = unsafe { *line.add(k as usize) } != 0;
                        any |= set;
                        all &= set;
                    }
                }
                r += WARPS;
            }
        }
        // A block with no element (past a short sequence) has no set byte: skipped.
        let (any, all) = (bar_red_popc(any) > 0, bar_red_popc(all) == DENSE_BLOCK_MASK_THREADS);
        if any {
            let (list, count) = if all { (full_indices, &mut full) } else { (indices, &mut partial) };
            if tid == 0 {
                unsafe { *list.add(*count as usize) = kb as i32 };
            }
            *count += 1;
        }
    }
    let mut i = tid;
    while i < p.kv_blocks {
        unsafe {
            if i >= partial {
                *indices.add(i as usize) = 0;
            }
            if i >= full {
                *full_indices.add(i as usize) = 0;
            }
        }
        i += DENSE_BLOCK_MASK_THREADS;
    }
    if tid == 0 {
        unsafe {
            *(p.counts as *mut i32).add(row as usize) = partial as i32;
            *(p.full_counts as *mut i32).add(row as usize) = full as i32;
        }
    }
}
