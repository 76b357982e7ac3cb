//! Backward attention, FlashAttention-2 style, on `mma.sync` (sm_80 and newer): dQ, dK and dV
//! from Q, K, V, O, the forward's log-sum-exp and dO. [`flashrs_abi::bwd`] describes the three
//! launches; this is the main one.
//!
//! A CTA owns `BN` keys of one (batch, K/V head): their K and V tiles stay in shared memory and
//! their dK and dV accumulate in registers (f32) while the CTA walks every query block of every
//! query head of the GQA group that visible to them (under causal masking, the blocks from the
//! first row that sees the first key on). Per query block of `BM` rows, whose Q, dO,
//! log-sum-exp and dsum tiles stream through a `STAGES`-deep cp.async ring:
//!
//! ```text
//! S  = Q K^T              P  = exp(scale S - lse)     (recomputed; masked scores give 0)
//! dP = dO V^T             dS = P * (dP - dsum)        (dsum = rowsum(dO * O), the prep's)
//! dV += P^T dO            dK += dS^T Q                dQ += dS K   (dK, dQ times scale at the end)
//! ```
//!
//! The modification kernels (`flash_bwd_mods_*`) take a [`ScoreMod`] and a [`MaskMod`]: S is
//! modified and masked as in the forward, and dS scaled by the modification's derivative
//! ([`ScoreMod::grad`], a softcap's `1 - tanh^2`), at the modified score that P gives back.
//! The block-sparse ones (`flash_bwd_sparse_*`, a mask with [`MaskMod::BLOCKS`]) walk, instead
//! of every query block their mask lets see the keys, the steps of their key block's list
//! ([`flashrs_abi::bwd::QueryLists`], built from the block mask by [`lists`]), and in
//! deterministic mode take the turns listed beside them.
//!
//! P and dS round to the element type into shared memory between the GEMMs: each is the A
//! operand of the next GEMMs in another warp layout (transposed, for `P^T dO` and `dS^T Q`), as
//! in FlashAttention-2. The eight warps take 32 x (BN / (8 / (BM/32))) tiles of S and dP, 32-key
//! x (D / (8 / (BN/32))) tiles of dK and dV, and 32-row tiles of dQ ([`flashrs_abi::BwdConfig`]);
//! the fragment layouts are [`crate::arch::mma`]'s and the operand storages [`gemm`]'s.
//!
//! dQ leaves into an f32 accumulator, added from registers: every key block adds to every
//! query block it sees. Its layout is the kernel's `FRAG` choice ([`flashrs_abi::AccumLayout`]).
//! In rows (sm_80 and newer), a thread's fragment values lie in two rows, added by per-element
//! atomics ([`epilogue::add_dq`]). On sm_90a the kernels add in fragment order
//! ([`epilogue::add_dq_fragments`]), the Hopper kernel's, where a thread's four values of an
//! MMA tile are 16 contiguous bytes: one `red.global.add.v4.f32` each, at offsets from one base
//! known at compile time, where per-element atomics cost four and a row address each, and
//! staging the part in shared memory for bulk reductions cost two barriers a step, 8-way bank
//! conflicts and (one stage) a wait for the bulk read before the next step's loads. The row
//! statistics follow the layout: the log-sum-exp and dsum per row, or per 64-row block the
//! prep kernel's bases and dsums. Deterministic launches take turns per query block in
//! key-block order ([`epilogue::wait_turn`]): the grid puts a (batch, head)'s key blocks at
//! consecutive CTA indices, so a key block waits only for CTAs started before it.
pub mod epilogue;
pub mod gemm;
pub mod lists;
pub mod rows;

use crate::arch::barrier::bar_sync;
use crate::arch::cp_async::{cp_async_ca_4, cp_async_commit_group, cp_async_wait_group};
use crate::arch::ids::{block_idx_x, thread_idx_x, warp_id};
use crate::arch::mma::FragC;
use crate::arch::smem::{dsmem_base, ld_shared_b32};
#[cfg(target_feature = "sm_90a")]
use crate::arch::cp_async::cp_async_cg_16;
use crate::dtype::{Bf16, Element, F16};
use crate::fwd::mainloop::TileCursor;
use crate::layout::SmemTile;
use crate::lse;
use crate::mask::Mask;
use crate::arch::ex2::lg2_approx_f32;
use crate::mods::{At, Builtin, MaskMod, Plain, ScoreMod, Sparse, Window};
use epilogue::{add_dq, end_turn, store_rows, wait_turn};
use flashrs_abi::grid::{Extent, div_rem};
use flashrs_abi::params::SPARSE_BLOCK;
use flashrs_abi::{AccumLayout, BwdParams, BwdStep, FragmentBlocks, QueryLists};
use gemm::{Operand, load_packed, mma_tiles, pack_tile, store_packed, store_tile};

/// The main kernel body. Const generics: element type, padded head dim `D`, query rows per step
/// `BM`, keys `BN`, `STAGES` of the query-side tiles, the warps' 8-column tile counts `N1`
/// (S, dP), `N2` (dK, dV), `N3` (dQ, per pass of `DQ_PASSES`), which stable Rust cannot
/// compute in array types, and `FRAG`: the accumulator in fragment order (sm_90a), else rows.
/// Entry points instantiate it through [`crate::mma_backward_kernel`].
#[inline(always)]
pub unsafe fn flash_bwd<
    T: Element,
    S: ScoreMod,
    M: MaskMod,
    const D: usize,
    const BM: usize,
    const BN: usize,
    const STAGES: usize,
    const N1: usize,
    const N2: usize,
    const N3: usize,
    const DQ_PASSES: usize,
    const FRAG: bool,
>(
    p: &BwdParams,
) {
    const THREADS: usize = 256;
    // Warps along the rows of each GEMM: S/dP rows (query), dK/dV rows (keys), dQ rows.
    let (w1, w2, w3) = (BM / 32, BN / 32, BM / 32);
    const {
        assert!(N1 == BN / (8 / (BM / 32)) / 8 && N2 == D / (8 / (BN / 32)) / 8 && N3 * DQ_PASSES == D / (8 / (BM / 32)) / 8);
        assert!(STAGES >= 1 && STAGES <= 3);
        // Fragment order: whole 64-row blocks a step, whole 32-row halves of them a warp.
        assert!(!FRAG || BM % 64 == 0);
        // Lists: whole steps and key blocks per block of the mask.
        assert!(!M::BLOCKS || (SPARSE_BLOCK as usize % BM == 0 && SPARSE_BLOCK as usize % BN == 0));
    }
    let f = &p.fwd;
    let tid = thread_idx_x();
    let lane = (tid % 32) as usize;
    let warp = warp_id() as usize;
    let varlen = f.cu_seqlens_q != 0;
    let block = unsafe { Block::of(p, block_idx_x()) };
    let Block { batch, h_kv, bh, nb, extent } = block;
    let (seqlen_q, seqlen_k) = (extent.seqlen_q, extent.seqlen_k);
    let n0 = nb * BN as u32;
    // Uniform across the CTA: key blocks past a short sequence's end have no rows to write.
    if n0 >= seqlen_k {
        return;
    }
    // The mask takes no head (a window is every head's); the scores' modification does.
    let mask = M::new(f, batch, h_kv * f.group, &extent);
    // The query blocks with a row that sees a key of this block.
    let (m_first, m_end) = mask.query_blocks::<BM>(n0 as i32, (n0 + BN as u32).min(seqlen_k) as i32, seqlen_q);
    let m_count = m_end - m_first;
    // Block-sparse: the key block's list of steps.
    let lists = &p.lists;
    let at = lists.list(bh, n0);
    let list = if M::BLOCKS { at * lists.per_list } else { 0 };
    let steps = if M::BLOCKS { unsafe { *(lists.counts as *const u32).add(at as usize) } } else { m_count * f.group };

    let (k, v) = (block.kv_at(f.k, f.k_strides), block.kv_at(f.v, f.v_strides));

    let smem = dsmem_base();
    let k_tile = SmemTile::<BN, D> { base: smem };
    let v_tile = SmemTile::<BN, D> { base: smem + (BN * D * 2) as u32 };
    let q_side = smem + (2 * BN * D * 2) as u32;
    let q_tile = |s: usize| SmemTile::<BM, D> { base: q_side + (s * BM * D * 2) as u32 };
    let do_tile = |s: usize| SmemTile::<BM, D> { base: q_side + ((STAGES + s) * BM * D * 2) as u32 };
    let p_tile = SmemTile::<BM, BN> { base: q_side + (2 * STAGES * BM * D * 2) as u32 };
    let ds_tile = SmemTile::<BM, BN> { base: p_tile.base + (BM * BN * 2) as u32 };
    // Each stage's row statistics: BM log-sum-exps (or, fragment order, their bases) and BM
    // dsums.
    let rows_base = ds_tile.base + (BM * BN * 2) as u32;
    let lse_row = |s: usize| rows_base + (s * BM * 4) as u32;
    let dsum_row = |s: usize| rows_base + ((STAGES + s) * BM * 4) as u32;

    // What the walk's addresses derive from, handed to each step through `Walk::hidden`.
    let blocks = if varlen { FragmentBlocks::varlen(f, batch, extent.q_start) } else { FragmentBlocks::fixed(f, batch) };
    // Fragment order: the padding block, read by a 128-row step's second half past the sequence.
    let pad = if BM > 64 { FragmentBlocks::count(f, varlen) as u32 } else { 0 };
    let walk = Walk { batch, h_kv, q_start: extent.q_start, seqlen_q, m_first, m_count, list, blocks, pad };
    // Step i is query block m_first + i % m_count of the group's head i / m_count, or the list's
    // entry i.
    let step = |w: &Walk, i: u32| {
        let (g, m) = if M::BLOCKS {
            QueryLists::step(unsafe { *(lists.entries as *const u32).add((w.list + i) as usize) })
        } else {
            let (g, m) = div_rem(i, w.m_count);
            (g, w.m_first + m)
        };
        (w.h_kv * f.group + g, m)
    };
    let lse_first = |w: &Walk, h: u32| Extent { q_start: w.q_start, ..extent }.lse_first(f, w.batch, h, varlen);
    let q_rows = |w: &Walk, base: u64, [sb, sr, sh]: [i64; 3], h: u32| {
        (base as *const u16).wrapping_offset((w.batch as i64 * sb + h as i64 * sh + w.q_start as i64 * sr) as isize)
    };
    let load_q_side = |w: &Walk, i: u32| unsafe {
        let seqlen_q = w.seqlen_q;
        let (h, m) = step(w, i);
        let s = i as usize % STAGES;
        let m0 = m * BM as u32;
        TileCursor::<BM, D, THREADS>::new(tid, q_rows(w, f.q, f.q_strides, h), f.q_strides[1], seqlen_q, m0, f.head_dim).issue(q_tile(s), tid, f.q_strides[1]);
        // dO's columns are V's: its own limit, hidden so that LLVM derives the chunk's test
        // afresh each step rather than holding a second one beside Q's across the walk (the
        // head_dim 256 kernels on sm_80 spilled).
        let dims_v = crate::layout::opaque_i64(f.head_dim_v as i64) as u32;
        TileCursor::<BM, D, THREADS>::new(tid, q_rows(w, p.dout, p.dout_strides, h), p.dout_strides[1], seqlen_q, m0, dims_v).issue(do_tile(s), tid, p.dout_strides[1]);
        if FRAG {
            // Threads 0..BM / 2 copy 16 bytes each of the step's statistics blocks; a block past
            // the sequence (the second half of a 128-row step) is the padding block, -inf and 0.
            #[cfg(target_feature = "sm_90a")]
            if (tid as usize) < BM / 2 {
                let (half, chunk) = (tid / 32, tid % 32);
                let row = m0 + 64 * half;
                let block = if half == 0 || row < seqlen_q { w.blocks.block(h, row) } else { w.pad };
                let src = (p.dsum as *const f32).wrapping_add(AccumLayout::fragment_stats(block, 0) + 4 * chunk as usize);
                // A block's first 16 chunks are bases, the next 16 dsums.
                let dst = if chunk < 16 { lse_row(s) } else { dsum_row(s) } + 256 * half + 16 * (chunk % 16);
                cp_async_cg_16(dst, src as *const u8, true);
            }
        } else {
            // Threads 0..BM copy a log-sum-exp each, BM..2 BM a dsum (rows past the end: 0).
            let r = tid as usize % BM;
            let valid = m0 + (r as u32) < seqlen_q;
            let at = lse_first(w, h) + if valid { m0 as usize + r } else { 0 };
            if (tid as usize) < BM {
                cp_async_ca_4(lse_row(s) + 4 * r as u32, (f.lse as *const f32).add(at) as *const u8, valid);
            } else if (tid as usize) < 2 * BM {
                cp_async_ca_4(dsum_row(s) + 4 * r as u32, (p.dsum as *const f32).add(at) as *const u8, valid);
            }
        }
    };

    unsafe {
        TileCursor::<BN, D, THREADS>::new(tid, k, f.k_strides[1], seqlen_k, n0, f.head_dim).issue(k_tile, tid, f.k_strides[1]);
        TileCursor::<BN, D, THREADS>::new(tid, v, f.v_strides[1], seqlen_k, n0, f.head_dim_v).issue(v_tile, tid, f.v_strides[1]);
    }
    // Steps 0 .. STAGES - 1 in flight, a commit group each (the first also holds K and V).
    if steps > 0 {
        load_q_side(&walk, 0);
    }
    cp_async_commit_group();
    if STAGES == 3 {
        if steps > 1 {
            load_q_side(&walk, 1);
        }
        cp_async_commit_group();
    }

    // Warp tiles: S and dP rows (w1 warps) x keys; dK, dV keys (w2 warps) x head dims; dQ rows
    // (w3 warps) x head dims.
    let (r1, c1) = (warp % w1 * 32, warp / w1 * N1 * 8);
    let (r2, c2) = (warp % w2 * 32, warp / w2 * N2 * 8);
    let (r3, c3) = (warp % w3 * 32, warp / w3 * N3 * DQ_PASSES * 8);
    let mut dk = [[[0.0f32; 4]; N2]; 2];
    let mut dv = [[[0.0f32; 4]; N2]; 2];
    for i in 0..steps {
        let s = i as usize % STAGES;
        let w = walk.hidden::<FRAG>(M::BLOCKS);
        if STAGES == 1 {
            // Everyone is done with the previous step's tiles before they are overwritten.
            if i > 0 {
                bar_sync();
                load_q_side(&w, i);
                cp_async_commit_group();
            }
            cp_async_wait_group::<0>();
            bar_sync();
        } else {
            // Step i's group is done (the later one in flight with three stages, step i + 1's).
            if STAGES == 2 { cp_async_wait_group::<0>() } else { cp_async_wait_group::<1>() }
            // Step i's tiles landed everywhere, and everyone finished step i - 1 (P, dS).
            bar_sync();
        }
        let (h, m) = step(&w, i);
        let m0 = m * BM as u32;

        // S = Q K^T, then P in place.
        let mut sp = [[[0.0f32; 4]; N1]; 2];
        unsafe { mma_tiles::<T, 2, N1, D, false, D, false>(&mut sp, Operand::a(q_tile(s), r1, 0, lane).opaque(), Operand::b(k_tile, c1, 0, lane).opaque(), D / 16) };
        let (row, col) = ((m0 as usize + r1 + lane / 4) as i32, (n0 as usize + c1) as i32);
        // The modification kernels build their mask and scores' modification afresh each step,
        // from the block located again (hidden, as at the end): held across the walk, they
        // would take registers the dK and dV accumulators need (sm_90a spilled). The score's
        // head (ALiBi's slope) is the step's.
        let relocated = || unsafe { Block::of(p, crate::layout::opaque_i64(block_idx_x() as i64) as u32) };
        let step_mask = if S::ACTIVE {
            let b = relocated();
            let score = S::new(f, b.batch, h, &b.extent);
            crate::mask::modify(&mut sp, &score, row, col + 2 * (lane % 4) as i32);
            M::new(f, b.batch, h, &b.extent)
        } else {
            mask
        };
        if step_mask.touches(m0 as i32 + r1 as i32, (m0 as usize + r1 + 32) as i32, col, (N1 * 8) as i32) {
            crate::mask::apply(&mut sp, &step_mask, row, col + 2 * (lane % 4) as i32);
        }
        let row_in = |mt: usize, h: usize| (r1 + mt * 16 + lane / 4 + 8 * h) as u32 * 4;
        for mt in 0..2 {
            for hh in 0..2 {
                let stored = f32::from_bits(unsafe { ld_shared_b32(lse_row(s) + row_in(mt, hh)) });
                let base = if FRAG { stored } else { lse::neg_lse_base(stored) };
                for nt in 0..N1 {
                    for e in 0..2 {
                        sp[mt][nt][2 * hh + e] = lse::exp_scaled(sp[mt][nt][2 * hh + e], f.scale_log2, base);
                    }
                }
            }
        }
        // P rounded to T: stored for dV's GEMM, and read back for dS (which thus uses the P
        // the GEMMs see) after dP's GEMM, so that it holds no registers during it.
        unsafe { store_packed::<N1, BM, BN>(&pack_tile::<T, N1>(&sp), p_tile, r1, c1, lane) };

        // dP = dO V^T, then dS = P (dP - dsum) in place.
        let mut ds = [[[0.0f32; 4]; N1]; 2];
        unsafe { mma_tiles::<T, 2, N1, D, false, D, false>(&mut ds, Operand::a(do_tile(s), r1, 0, lane).opaque(), Operand::b(v_tile, c1, 0, lane).opaque(), D / 16) };
        let packed = unsafe { load_packed::<N1, BM, BN>(p_tile, r1, c1, lane) };
        for mt in 0..2 {
            for hh in 0..2 {
                let dsum = f32::from_bits(unsafe { ld_shared_b32(dsum_row(s) + row_in(mt, hh)) });
                for nt in 0..N1 {
                    for e in 0..2 {
                        let x = 2 * hh + e;
                        ds[mt][nt][x] = T::unpack2(packed[mt][nt][hh])[e] * (ds[mt][nt][x] - dsum);
                    }
                }
            }
        }
        // The score modification's own derivative (a softcap's `1 - tanh^2`) at each score's
        // modified value, which P gives back (`scale_log2 * s' = log2 P - base`; P rounded to
        // T moves it by a unit of T's rounding over the cap, far below dS's own rounding).
        if S::GRAD {
            let b = relocated();
            let score = S::new(f, b.batch, h, &b.extent);
            if score.grad_on() {
                let inv_scale_log2 = 1.0 / f.scale_log2;
                for mt in 0..2 {
                    for hh in 0..2 {
                        let stored = f32::from_bits(unsafe { ld_shared_b32(lse_row(s) + row_in(mt, hh)) });
                        let base = if FRAG { stored } else { lse::neg_lse_base(stored) };
                        let r = row + (mt * 16 + 8 * hh) as i32;
                        for nt in 0..N1 {
                            for e in 0..2 {
                                let x = 2 * hh + e;
                                let prob = T::unpack2(packed[mt][nt][hh])[e];
                                let key = col + (2 * (lane % 4) + nt * 8 + e) as i32;
                                let at = At { row: r, key, rowf: r as f32, keyf: key as f32 };
                                let g = score.grad((lg2_approx_f32(prob) - base) * inv_scale_log2, at);
                                // P = 0 (masked, or a row that saw nothing): dS is 0, the log NaN.
                                ds[mt][nt][x] = if prob > 0.0 { ds[mt][nt][x] * g } else { 0.0 };
                            }
                        }
                    }
                }
            }
        }
        unsafe { store_tile::<T, N1, BM, BN>(&ds, ds_tile, r1, c1, lane) };
        bar_sync();
        if STAGES > 1 {
            // Step i + STAGES - 1's tiles into step i - 1's stage, which every warp is done
            // with (the barrier): they land during this step's dV, dK and dQ GEMMs (and, with
            // three stages, during all of step i + 1).
            let next = i + STAGES as u32 - 1;
            if next < steps {
                load_q_side(&w, next);
            }
            cp_async_commit_group();
        }

        // dV += P^T dO and dK += dS^T Q: the A operands across k (P, dS are [query][key]).
        unsafe {
            mma_tiles::<T, 2, N2, BN, true, D, true>(&mut dv, Operand::a(p_tile, 0, r2 / 8, lane).opaque(), Operand::b(do_tile(s), 0, c2 / 8, lane).opaque(), BM / 16);
            mma_tiles::<T, 2, N2, BN, true, D, true>(&mut dk, Operand::a(ds_tile, 0, r2 / 8, lane).opaque(), Operand::b(q_tile(s), 0, c2 / 8, lane).opaque(), BM / 16);
        }

        // dQ part = dS K, added to the accumulator; in passes of N3 8-column tiles (the whole
        // part of head_dim 256 would not fit in registers beside dK and dV).
        let accum = unsafe { (p.dq_accum as *mut f32).add(lse_first(&w, h) * p.accum_dim as usize) };
        let sem = if FRAG {
            (p.dq_semaphore as *mut u32).wrapping_add(w.blocks.block(h, m0) as usize)
        } else {
            (p.dq_semaphore as *mut u32).wrapping_add(((w.batch * f.heads_q + h) * f.m_blocks + m) as usize)
        };
        if p.dq_semaphore != 0 {
            // Key blocks add to a query block in order from the first its rows see (0 but under
            // a window's left side); the mask built again, as above. Block-sparse: the listed
            // turn of the key block, whose CTAs take turns in order within it.
            let turn = if M::BLOCKS {
                QueryLists::turn(unsafe { *(lists.turns as *const u32).add((w.list + i) as usize) }, nb, BN as u32)
            } else {
                let step_mask = if S::ACTIVE { M::new(f, w.batch, h, &relocated().extent) } else { mask };
                nb - step_mask.span(m0 as i32, (m0 + BM as u32).min(w.seqlen_q) as i32).0 as u32 / BN as u32
            };
            unsafe { wait_turn(sem, turn, tid) };
        }
        // Fragment order: this thread's first slot in the chunks of the 64-row block of the
        // warp's 32 rows; past the sequence (the second half of a 128-row step), whose block is
        // another's, in the padding block.
        for pass in 0..DQ_PASSES {
            let c = c3 + pass * N3 * 8;
            let mut dq: [[FragC; N3]; 2] = [[[0.0; 4]; N3]; 2];
            unsafe { mma_tiles::<T, 2, N3, BN, false, D, true>(&mut dq, Operand::a(ds_tile, r3, 0, lane).opaque(), Operand::b(k_tile, 0, c / 8, lane).opaque(), BN / 16) };
            if FRAG {
                let block = if r3 < 64 || m0 + (r3 as u32) < w.seqlen_q { w.blocks.block(h, m0 + r3 as u32) } else { w.pad };
                let chunk0 = (p.dq_accum as *mut f32).wrapping_add(AccumLayout::fragment_chunk(block, D, 0) * AccumLayout::CHUNK);
                unsafe { epilogue::add_dq_fragments::<N3>(&dq, chunk0, r3 % 64 / 16, c, lane) };
            } else {
                unsafe { add_dq::<N3>(&dq, accum, p.accum_dim as usize, m0 + r3 as u32, c, w.seqlen_q, lane) };
            }
        }
        if p.dq_semaphore != 0 {
            unsafe { end_turn(sem, tid) };
        }
    }

    // dV and scale * dK, for this block's keys. The block is located again (from the block
    // index, hidden so that LLVM does not reuse the first): what it kept across the walk would
    // need registers that the walk's accumulators fill.
    let block = unsafe { Block::of(p, crate::layout::opaque_i64(block_idx_x() as i64) as u32) };
    let (n0, seqlen_k) = (block.nb * BN as u32, block.extent.seqlen_k);
    unsafe {
        store_rows::<T, N2>(&dv, 1.0, block.kv_at(p.dv, p.dv_strides), p.dv_strides[1], n0 + r2 as u32, c2, seqlen_k, f.head_dim_v, lane);
        store_rows::<T, N2>(&dk, p.scale, block.kv_at(p.dk, p.dk_strides), p.dk_strides[1], n0 + r2 as u32, c2, seqlen_k, f.head_dim, lane);
    }
}

/// Where a CTA's keys lie: its (batch, K/V head), key block and sequence extent.
#[derive(Clone, Copy)]
struct Block {
    batch: u32,
    h_kv: u32,
    /// `batch * heads_kv + h_kv`.
    bh: u32,
    nb: u32,
    extent: Extent,
}

impl Block {
    /// The block of CTA index `cta` (consecutive indices: a (batch, head)'s key blocks).
    #[inline(always)]
    unsafe fn of(p: &BwdParams, cta: u32) -> Self {
        let f = &p.fwd;
        let (bh, nb) = div_rem(cta, p.n_blocks);
        let (batch, h_kv) = div_rem(bh, div_rem(f.heads_q, f.group).0);
        let extent = if f.cu_seqlens_q != 0 { unsafe { Extent::varlen(f, batch) } } else { Extent::fixed(f) };
        Block { batch, h_kv, bh, nb, extent }
    }

    /// Row 0 of the sequence's K/V head in K, V, dK or dV (`base`, with its strides).
    #[inline(always)]
    fn kv_at(&self, base: u64, [sb, sr, sh]: [i64; 3]) -> *mut u16 {
        (base as *mut u16).wrapping_offset((self.batch as i64 * sb + self.h_kv as i64 * sh + self.extent.k_start as i64 * sr) as isize)
    }
}

/// The values every step's addresses derive from (see [`Walk::hidden`]).
#[derive(Clone, Copy)]
struct Walk {
    batch: u32,
    h_kv: u32,
    q_start: u32,
    seqlen_q: u32,
    m_first: u32,
    m_count: u32,
    /// Block-sparse: the key block's first entry in the lists.
    list: u32,
    /// Fragment order: the sequence's 64-row blocks, and the padding block.
    blocks: FragmentBlocks,
    pad: u32,
}

impl Walk {
    /// The same values, hidden from the optimiser: taken at each step, they keep LLVM from
    /// hoisting every 64-bit address derived from them out of the walk into registers of its
    /// own, which the dK and dV accumulators need (ptxas recomputes them in a few
    /// instructions per step instead). The fragment order's are hidden only where `FRAG`
    /// reads them, the list's only where `blocks` (a constant: the mask's
    /// [`MaskMod::BLOCKS`]) says the walk reads it (elsewhere they are never computed).
    #[inline(always)]
    fn hidden<const FRAG: bool>(self, blocks: bool) -> Self {
        let h = |x: u32| crate::layout::opaque_i64(x as i64) as u32;
        let frag_blocks = if FRAG { FragmentBlocks { first: h(self.blocks.first), per_head: h(self.blocks.per_head) } } else { self.blocks };
        let pad = if FRAG { h(self.pad) } else { self.pad };
        Walk { batch: h(self.batch), h_kv: h(self.h_kv), q_start: h(self.q_start), seqlen_q: h(self.seqlen_q), m_first: h(self.m_first), m_count: h(self.m_count), list: if blocks { h(self.list) } else { self.list }, blocks: frag_blocks, pad }
    }
}

/// Declares one main backward entry point, `$name`: the kernel body [`flash_bwd`] for element
/// type `$t`, configuration `$idx` of [`flashrs_abi::bwd::BWD_CONFIGS`], the [`flashrs_abi::Flavor`] `$flavor` (`Plain`, or
/// `Mods`: one of [`flashrs_abi::bwd::BWD_MODS`]), the dQ accumulator in fragment order (`$frag` true: sm_90a,
/// configurations that take it, [`flashrs_abi::BwdConfig::fragments`]) or in rows, with the score
/// modification `$score` and the mask `$mask`. Like [`crate::mma_forward_kernel`], whose
/// documentation says how a caller's crate uses it, it carries the marker of its
/// [`flashrs_abi::Kernel`]; the host launches a caller's entry in place of the shipped main
/// kernel of the same identity (the prep and dQ kernels stay the shipped ones). The
/// modification's [`crate::mods::ScoreMod::grad`] gives the scores' derivative.
#[macro_export]
macro_rules! mma_backward_kernel {
    ($name:ident, $t:ty, $flavor:ident, $idx:expr, $frag:literal, $score:ty, $mask:ty) => {
        /// Backward attention's main entry point (see the device crate's `bwd` module and
        /// `BwdParams`).
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(p: $crate::abi::BwdParams) {
            const C: $crate::abi::BwdConfig = $crate::abi::bwd::BWD_CONFIGS[$idx];
            const F: $crate::abi::Flavor = $crate::abi::Flavor::$flavor;
            const { assert!(matches!(F, $crate::abi::Flavor::Plain) || $crate::abi::bwd::bwd_mods_has($idx)) };
            const { assert!(!$frag || C.fragments()) };
            unsafe {
                core::arch::asm!("// flashrs-kernel: bwd {s} {t} {d} {bm} {bn} {st} {a}",
                    s = const $crate::abi::BwdStep::Main { config: C, accum: $crate::abi::AccumLayout::Rows, flavor: F }.code(),
                    t = const <$t as $crate::dtype::Element>::DTYPE.code(), d = const C.head_dim, bm = const C.block_m,
                    bn = const C.block_n, st = const C.stages, a = const $frag as u32, options(nomem, nostack, preserves_flags));
                $crate::bwd::flash_bwd::<$t, $score, $mask, { C.head_dim }, { C.block_m }, { C.block_n }, { C.stages },
                    { C.block_n / (8 / C.warps_m_sdp()) / 8 }, { C.head_dim / (8 / C.warps_n_dkv()) / 8 },
                    { C.dq_tiles() }, { C.head_dim / (8 / C.warps_m_dq()) / 8 / C.dq_tiles() }, $frag>(&p)
            }
        }
    };
}

/// The shipped main entry points of a flavor ([`crate::mma_backward_kernel`]), one per
/// (configuration, element type), and on sm_90a a twin in fragment order for the configurations
/// that take it: `Plain` ([`Plain`] scores, [`Mask`]) over [`flashrs_abi::bwd::BWD_CONFIGS`], and `Mods`
/// (`flash_bwd_[frag_]mods_*`: [`Builtin`] scores, [`Window`] masks) over the configurations of
/// [`flashrs_abi::bwd::BWD_MODS`].
macro_rules! bwd_kernels {
    ($flavor:ident, $score:ty, $mask:ty: $($idx:literal => $f16:ident, $bf16:ident $(, $frag_f16:ident, $frag_bf16:ident)?;)*) => {$(
        bwd_kernels!(@one $flavor, $score, $mask, $f16, F16, $idx, false);
        bwd_kernels!(@one $flavor, $score, $mask, $bf16, Bf16, $idx, false);
        $(
            #[cfg(target_feature = "sm_90a")]
            bwd_kernels!(@one $flavor, $score, $mask, $frag_f16, F16, $idx, true);
            #[cfg(target_feature = "sm_90a")]
            bwd_kernels!(@one $flavor, $score, $mask, $frag_bf16, Bf16, $idx, true);
        )?
    )*};
    (@one $flavor:ident, $score:ty, $mask:ty, $name:ident, $t:ty, $idx:literal, $frag:literal) => {
        #[cfg(feature = "entries")]
        crate::mma_backward_kernel!($name, $t, $flavor, $idx, $frag, $score, $mask);
    };
}

bwd_kernels! { Plain, Plain, Mask:
    0 => flash_bwd_f16_d64_128x128s3, flash_bwd_bf16_d64_128x128s3, flash_bwd_frag_f16_d64_128x128s3, flash_bwd_frag_bf16_d64_128x128s3;
    1 => flash_bwd_f16_d128_64x128s3, flash_bwd_bf16_d128_64x128s3, flash_bwd_frag_f16_d128_64x128s3, flash_bwd_frag_bf16_d128_64x128s3;
    2 => flash_bwd_f16_d256_64x64s2, flash_bwd_bf16_d256_64x64s2;
    3 => flash_bwd_f16_d256_64x64s1, flash_bwd_bf16_d256_64x64s1;
    4 => flash_bwd_f16_d64_128x128s2, flash_bwd_bf16_d64_128x128s2, flash_bwd_frag_f16_d64_128x128s2, flash_bwd_frag_bf16_d64_128x128s2;
    5 => flash_bwd_f16_d128_64x128s2, flash_bwd_bf16_d128_64x128s2, flash_bwd_frag_f16_d128_64x128s2, flash_bwd_frag_bf16_d128_64x128s2;
    6 => flash_bwd_f16_d64_64x128s2, flash_bwd_bf16_d64_64x128s2, flash_bwd_frag_f16_d64_64x128s2, flash_bwd_frag_bf16_d64_64x128s2;
    7 => flash_bwd_f16_d128_64x64s1, flash_bwd_bf16_d128_64x64s1, flash_bwd_frag_f16_d128_64x64s1, flash_bwd_frag_bf16_d128_64x64s1;
    8 => flash_bwd_f16_d128_64x64s2, flash_bwd_bf16_d128_64x64s2, flash_bwd_frag_f16_d128_64x64s2, flash_bwd_frag_bf16_d128_64x64s2;
}

bwd_kernels! { Mods, Builtin, Window:
    6 => flash_bwd_mods_f16_d64_64x128s2, flash_bwd_mods_bf16_d64_64x128s2, flash_bwd_frag_mods_f16_d64_64x128s2, flash_bwd_frag_mods_bf16_d64_64x128s2;
    8 => flash_bwd_mods_f16_d128_64x64s2, flash_bwd_mods_bf16_d128_64x64s2, flash_bwd_frag_mods_f16_d128_64x64s2, flash_bwd_frag_mods_bf16_d128_64x64s2;
    7 => flash_bwd_mods_f16_d128_64x64s1, flash_bwd_mods_bf16_d128_64x64s1, flash_bwd_frag_mods_f16_d128_64x64s1, flash_bwd_frag_mods_bf16_d128_64x64s1;
    3 => flash_bwd_mods_f16_d256_64x64s1, flash_bwd_mods_bf16_d256_64x64s1;
}

bwd_kernels! { Sparse, Builtin, Sparse<Window>:
    6 => flash_bwd_sparse_f16_d64_64x128s2, flash_bwd_sparse_bf16_d64_64x128s2, flash_bwd_frag_sparse_f16_d64_64x128s2, flash_bwd_frag_sparse_bf16_d64_64x128s2;
    8 => flash_bwd_sparse_f16_d128_64x64s2, flash_bwd_sparse_bf16_d128_64x64s2, flash_bwd_frag_sparse_f16_d128_64x64s2, flash_bwd_frag_sparse_bf16_d128_64x64s2;
    7 => flash_bwd_sparse_f16_d128_64x64s1, flash_bwd_sparse_bf16_d128_64x64s1, flash_bwd_frag_sparse_f16_d128_64x64s1, flash_bwd_frag_sparse_bf16_d128_64x64s1;
    3 => flash_bwd_sparse_f16_d256_64x64s1, flash_bwd_sparse_bf16_d256_64x64s1;
}

/// Declares one entry point of a backward step that takes no tile configuration (the row and
/// list kernels), with its marker: `$name` for element type `$t`, running `$call` on its
/// parameters `$p`.
macro_rules! step_kernel {
    ($(#[$doc:meta])* $name:ident, $t:ty, $step:expr, |$p:ident| $call:expr) => {
        $(#[$doc])*
        #[cfg(feature = "entries")]
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name($p: BwdParams) {
            unsafe {
                core::arch::asm!("// flashrs-kernel: bwd {s} {t} 0 0 0 0 0", s = const $step.code(),
                    t = const <$t as Element>::DTYPE.code(), options(nomem, nostack, preserves_flags));
                $call
            }
        }
    };
}

/// Declares a row kernel's entry points (f16, bf16).
macro_rules! row_kernels {
    ($step:expr, $body:ident: $f16:ident, $bf16:ident) => {
        row_kernels!(@one $step, $body, $f16, F16);
        row_kernels!(@one $step, $body, $bf16, Bf16);
    };
    (@one $step:expr, $body:ident, $name:ident, $t:ty) => {
        step_kernel!(
            /// A backward row kernel (see [`rows`]); `BWD_ROW_THREADS` threads per CTA,
            /// `BwdParams::row_lanes()` per (row, head).
            $name, $t, $step, |p| rows::$body::<$t>(&p, $step.accum_layout()));
    };
}

row_kernels!(BwdStep::Prep(AccumLayout::Rows), prep: flash_bwd_prep_f16, flash_bwd_prep_bf16);
row_kernels!(BwdStep::Prep(AccumLayout::Fragments), prep: flash_bwd_prep_frag_f16, flash_bwd_prep_frag_bf16);
row_kernels!(BwdStep::Dq(AccumLayout::Rows), dq: flash_bwd_dq_f16, flash_bwd_dq_bf16);
row_kernels!(BwdStep::Dq(AccumLayout::Fragments), dq: flash_bwd_dq_frag_f16, flash_bwd_dq_frag_bf16);

/// Declares a list kernel's entry points (f16, bf16: the same body, one per element type as
/// every backward step).
macro_rules! list_kernels {
    ($step:expr, $body:ident: $($name:ident, $t:ty);*) => {$(
        step_kernel!(
            /// A block-sparse backward's list kernel (see [`lists`]).
            $name, $t, $step, |p| lists::$body(&p));
    )*};
}

list_kernels!(BwdStep::SparseBits, bits: flash_bwd_sparse_bits_f16, F16; flash_bwd_sparse_bits_bf16, Bf16);
list_kernels!(BwdStep::SparseLists, lists: flash_bwd_sparse_lists_f16, F16; flash_bwd_sparse_lists_bf16, Bf16);
