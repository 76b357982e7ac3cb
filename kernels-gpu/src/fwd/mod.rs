//! Forward attention, FlashAttention-2 style, on `mma.sync` (sm_80 and newer).
//!
//! A CTA owns `block_m` query rows of one (batch, head), split across warps (16 rows per MMA
//! tile, `m_tiles` tiles per warp; 16-row decode tiles split each K/V tile's keys across the
//! warps instead, see [`warp_merge`]). K/V tiles of `block_n` rows stream through a `stages`-deep
//! cp.async ring in shared memory; each warp computes its scores in registers, folds them
//! into an online softmax, and accumulates O in f32, normalising once at the end.
//!
//! Split as in FlashAttention-3: [`mainloop`] (copies and GEMMs), [`softmax`],
//! [`epilogue`], [`split_merge`] (split-KV's reduction), [`warp_merge`] (decode tiles' warps),
//! the masking of [`crate::mask`];
//! which tile a CTA computes, the tile configurations and the parameters are the ABI crate's
//! ([`flashrs_abi::grid`], [`flashrs_abi::tiles`], [`FwdParams`]), shared with the host.
pub mod epilogue;
pub mod mainloop;
pub mod softmax;
pub mod split_merge;
pub mod warp_merge;

use crate::arch::barrier::bar_sync;
use crate::arch::cp_async::{cp_async_commit_group, cp_async_wait_group};
use crate::arch::ids::{block_idx_x, thread_idx_x, warp_id};
use crate::arch::smem::dsmem_base;
use crate::dtype::{Bf16, E4m3, E5m2, Element, F16, KvElement, Same};
use crate::layout::SmemTile;
use epilogue::{store_lse, store_o};
use flashrs_abi::grid::{Extent, div_rem, tile_for_block};
use flashrs_abi::FwdParams;
use mainloop::{PagedCursor, TileCursor, WarpOperands, gemm_pv, gemm_pv_fp8, gemm_qk, gemm_qk_fp8, pack_p, permute_q_fp8};
use crate::mask::Mask;
use crate::mods::{Builtin, MaskMod, Plain, ScoreMod, Sparse, Window};
use crate::sparse::KeyBlocks;
use softmax::Softmax;

/// Waits until at most `STAGES - 2` copy groups are pending: the tile about to be used landed.
#[inline(always)]
fn wait_for_stage<const STAGES: usize>() {
    match STAGES {
        2 => cp_async_wait_group::<0>(),
        3 => cp_async_wait_group::<1>(),
        _ => cp_async_wait_group::<2>(),
    }
}

/// The forward kernel body. Const generics: element type, padded head dim `D`, CTA rows `BM`,
/// K/V rows per stage `BN`, `THREADS` per CTA, `MT` row tiles per warp, `STAGES`, `WN` warps
/// sharing rows (each taking `BN / WN` keys of a tile), and the derived fragment counts `SN =
/// BN/WN/8` (score tiles), `KP = BN/WN/16` (P's k-steps) and `ON = D/8` (output tiles), which
/// stable Rust cannot compute in array types; `VARLEN` compiles in the
/// per-CTA sequence lookup, `SPLIT` the key-range split with its f32 partial epilogue and
/// the last split's merge (taken when `num_splits > 1`), and `PAGED` the block-table K/V addressing with per-sequence key
/// counts. With all off every addition they make folds away: the plain kernels assemble to the
/// same registers as a body without them. `S` and `M` are the score modification and the mask
/// ([`crate::mods`]): [`Plain`] and [`Mask`] for plain attention. `C` is K's and V's element
/// type ([`KvElement`]) and `DC = D >> C::SHR` the width of their copied rows in 16-bit units:
/// FP8 tiles stream through a ring of twice the stages in the same shared memory, the GEMMs
/// widen them in registers ([`mainloop::gemm_qk_fp8`]), and the dequantization factors scale
/// the scores' exponent and the output. Entry points instantiate it through
/// [`crate::mma_forward_kernel`].
#[inline(always)]
pub unsafe fn flash_fwd<
    T: Element,
    C: KvElement,
    S: ScoreMod,
    M: MaskMod,
    const D: usize,
    const BM: usize,
    const BN: usize,
    const THREADS: usize,
    const MT: usize,
    const STAGES: usize,
    const WN: usize,
    const SN: usize,
    const KP: usize,
    const ON: usize,
    const DC: usize,
    const VARLEN: bool,
    const SPLIT: bool,
    const PAGED: bool,
>(
    p: &FwdParams,
) {
    const {
        assert!(BM == THREADS / 32 / WN * MT * 16 && SN == BN / WN / 8 && KP == BN / WN / 16 && ON == D / 8);
        assert!(STAGES >= 2 && STAGES <= 4 && (WN == 1 || MT == 1));
        // Key-splitting warps share one 16-row group: the merge keeps one scratch slot per
        // warp index of the group, not per group.
        assert!(WN == 1 || BM == 16);
        assert!(WN == 1 || warp_merge::scratch_bytes(WN, MT, ON) <= 2 * STAGES * BN * D * 2);
        // A sink joins a row's denominator once: not once per warp or split that merges.
        assert!(!S::SINK || (WN == 1 && !SPLIT));
        // A block mask's query blocks are the CTA's rows.
        assert!(!M::BLOCKS || BM == flashrs_abi::params::SPARSE_BLOCK as usize);
        // FP8 caches: a ring of 2 * STAGES tiles (4: the deepest wait) in the 16-bit stages'
        // memory; their K factor scales the exponent, which only unmodified scores allow.
        assert!(DC == D >> C::SHR && (C::KV.is_none() || (STAGES == 2 && !S::ACTIVE && !M::BLOCKS)));
    }
    let tid = thread_idx_x();
    let lane = (tid % 32) as usize;
    // Warp (wm, wn): rows of row group wm, keys wn * BN / WN.. of every tile.
    let (wm, wn) = (warp_id() as usize / WN, warp_id() as usize % WN);
    let warp_row0 = wm * MT * 16;
    let warp_key0 = wn * (BN / WN);
    // Split-KV: the split is the fastest-varying index, so a query block's splits run together.
    let (block, split) = if SPLIT { div_rem(block_idx_x(), p.num_splits) } else { (block_idx_x(), 0) };
    let tile = tile_for_block(p, block);
    let m0 = tile.m_block * BM as u32;
    // Per-CTA sequence extent: variable-length launches read their sequence's first rows and
    // lengths (two loads per offsets array) and move the base pointers there once; paged ones
    // take the sequence's key count from `seqused_k` when given.
    let extent = if VARLEN { unsafe { Extent::varlen(p, tile.batch) } } else { Extent::fixed(p) };
    let extent = if PAGED { unsafe { extent.with_seqused_k(p, tile.batch) } } else { extent };
    let (seqlen_q, seqlen_k, q_start, k_start) = (extent.seqlen_q, extent.seqlen_k, extent.q_start as i64, extent.k_start as i64);
    // Uniform across the CTA, before any barrier: blocks past a short sequence's end exit.
    if VARLEN && m0 >= seqlen_q {
        return;
    }
    let (b, h, h_kv) = (tile.batch as i64, tile.head as i64, div_rem(tile.head, p.group).0 as i64);
    let [qb, qr, qh] = p.q_strides;
    let [kb, kr, kh] = p.k_strides;
    let [vb, vr, vh] = p.v_strides;
    let [ob, or, oh] = p.o_strides;
    let q = unsafe { (p.q as *const u16).offset((b * qb + h * qh + q_start * qr) as isize) };
    // Paged caches are addressed per row through the block table ([`PagedCursor`]).
    // FP8 caches are addressed in 16-bit units of two elements (strides are multiples of 16).
    let sh = C::SHR;
    let (k, v) = if PAGED {
        (p.k as *const u16, p.v as *const u16)
    } else {
        unsafe {
            let k = (p.k as *const u16).offset(((b * kb + h_kv * kh + k_start * kr) >> sh) as isize);
            (k, (p.v as *const u16).offset(((b * vb + h_kv * vh + k_start * vr) >> sh) as isize))
        }
    };
    // FP8 caches: K's factor scales the exponent, V's the output (read at the end, so that no
    // register holds it through the main loop).
    let scale_log2 = if C::KV.is_some() { p.scale_log2 * unsafe { p.descale.factors(tile.batch, h_kv as u32)[0] } } else { p.scale_log2 };
    let o_ptr = unsafe { (p.o as *mut u16).offset((b * ob + h * oh + q_start * or) as isize) };

    let smem = dsmem_base();
    let q_tile = SmemTile::<BM, D> { base: smem };
    let k_tile = |s: usize| SmemTile::<BN, D> { base: smem + ((BM + s * BN) * D * 2) as u32 };
    let v_tile = |s: usize| SmemTile::<BN, D> { base: smem + ((BM + (STAGES + s) * BN) * D * 2) as u32 };
    // FP8 caches: tiles of half the bytes, twice as many stages (`STAGES << C::SHR`) in the
    // same memory. (Written as associated constants at each use, not as locals the closures
    // capture: so the 16-bit kernels compile as they did before FP8 caches.)
    let k_dst = |s: usize| SmemTile::<BN, DC> { base: if C::SHR != 0 { k_tile(0).base + (s * BN * DC * 2) as u32 } else { k_tile(s).base } };
    let v_dst = |s: usize| SmemTile::<BN, DC> { base: if C::SHR != 0 { v_tile(0).base + (s * BN * DC * 2) as u32 } else { v_tile(s).base } };

    let mask = M::new(p, tile.batch, tile.head, &extent);
    let score = S::new(p, tile.batch, tile.head, &extent);
    // Keys no row of this CTA sees (past the last row's diagonal, before the first row's
    // window) are never loaded.
    let (first_key, keys) = mask.span(m0 as i32, (m0 + BM as u32) as i32);
    let (first_key, keys) = (first_key as usize, keys as usize);
    // Block-sparse launches visit the key tiles of their block mask's lists instead, each
    // loaded from where its block starts ([`crate::sparse`]); launched without a mask (counts
    // 0), they walk the window's tiles.
    let blocks = if M::BLOCKS && !SPLIT && !PAGED && p.mods.blocks.counts != 0 {
        Some(KeyBlocks::new(&p.mods.blocks, tile.batch, tile.head, tile.m_block))
    } else {
        None
    };
    // This CTA's tiles are [t0, t0 + n_tiles) (possibly none); split-KV: of its split's.
    let (t0, n_tiles) = if SPLIT {
        let t0 = split * p.split_tiles;
        (t0, (keys.div_ceil(BN) as u32).min(t0 + p.split_tiles).saturating_sub(t0) as usize)
    } else if let Some(b) = blocks {
        (0, b.tiles::<BN>() as usize)
    } else {
        let first = first_key / BN;
        (first as u32, keys.div_ceil(BN) - first)
    };

    // K and V are read as wide as the wider of them ([`TileCursor::new_within`]).
    let (hd, hdv) = (p.head_dim >> sh, p.head_dim_v >> sh);
    let dims = [hd, hdv];
    let mut k_cursor = TileCursor::<BN, DC, THREADS>::new_within(tid, k, kr >> sh, seqlen_k, t0 * BN as u32, dims, hd);
    let mut v_cursor = TileCursor::<BN, DC, THREADS>::new_within(tid, v, vr >> sh, seqlen_k, t0 * BN as u32, dims, hdv);
    let mut paged = PagedCursor::<BN, DC, THREADS, C>::new(tid, p, tile.batch, h_kv as u32, seqlen_k, t0 * BN as u32);
    // Tiles are issued in order, each cursor stepping to the next; `t` only picks the stage.
    let mut load_kv = |t: usize| unsafe {
        if PAGED {
            paged.issue(k_dst(t % (STAGES << C::SHR)), v_dst(t % (STAGES << C::SHR)), tid, p);
        } else {
            if let Some(b) = blocks {
                let key0 = b.key0::<BN>(&p.mods.blocks, t as u32);
                k_cursor = TileCursor::new_within(tid, k, kr, seqlen_k, key0, dims, p.head_dim);
                v_cursor = TileCursor::new_within(tid, v, vr, seqlen_k, key0, dims, p.head_dim_v);
            }
            k_cursor.issue(k_dst(t % (STAGES << C::SHR)), tid, p.k_strides[1] >> sh);
            v_cursor.issue(v_dst(t % (STAGES << C::SHR)), tid, p.v_strides[1] >> sh);
        }
    };
    unsafe { TileCursor::<BM, D, THREADS>::new(tid, q, qr, seqlen_q, m0, p.head_dim).issue(q_tile, tid, qr) };
    // Groups are committed even when empty, so "group t" always means tile t's copies.
    let fp8 = C::SHR != 0;
    let ring = STAGES << C::SHR;
    for t in 0..ring - 1 {
        if t < n_tiles {
            load_kv(t);
        }
        cp_async_commit_group();
    }

    if fp8 {
        // Q's copies are group 0's (with tile 0's): at most the other two pending.
        cp_async_wait_group::<2>();
        bar_sync();
        unsafe { permute_q_fp8::<BM, D, THREADS>(q_tile, tid) };
        bar_sync();
    }
    let mut o = [[[0.0f32; 4]; ON]; MT];
    let mut softmax = Softmax::<MT>::new();
    let row = (m0 as usize + warp_row0 + lane / 4) as i32;
    let ops = WarpOperands::new(q_tile, k_tile(0), v_tile(0), warp_row0, warp_key0, lane);
    // FP8: the same lanes' addresses in the ring's tile of tile t.
    // K's keys addressed as V's are ([`mainloop::gemm_qk_fp8`]).
    let k8 = k_dst(0).lane_addr(warp_key0 + lane % 8 + 8 * ((lane / 8) % 2), lane / 16);
    let ops8_0 = WarpOperands { k: k8, ..WarpOperands::new(q_tile, k_dst(0), v_dst(0), warp_row0, warp_key0, lane) };
    let ops8 = |t: usize| ops8_0.kv_shifted(((t % (STAGES << C::SHR)) * BN * DC * 2) as u32);
    for t in 0..n_tiles {
        if fp8 {
            wait_for_stage::<4>();
        } else {
            wait_for_stage::<STAGES>();
        }
        // Everyone's tile t landed, and everyone finished tile t-1, whose stage is refilled next.
        bar_sync();
        if t + ring - 1 < n_tiles {
            load_kv(t + ring - 1);
        }
        cp_async_commit_group();

        let ops = ops.kv_shifted(((t % STAGES) * BN * D * 2) as u32);
        let mut s = unsafe { if fp8 { gemm_qk_fp8::<T, C, MT, SN, D, DC>(ops8(t).q, ops8(t).k) } else { gemm_qk::<T, MT, SN, D>(ops) } };
        let col0 = match blocks {
            Some(b) => b.key0::<BN>(&p.mods.blocks, t as u32) as usize + warp_key0,
            None => (t0 as usize + t) * BN + warp_key0,
        } as i32;
        let col = col0 + 2 * (lane % 4) as i32;
        if S::ACTIVE {
            crate::mask::modify(&mut s, &score, row, col);
        }
        if mask.touches(m0 as i32, (m0 + BM as u32) as i32, col0, (BN / WN) as i32) {
            crate::mask::apply(&mut s, &mask, row, col);
        }
        softmax.update(&mut s, &mut o, scale_log2);
        let p_frags = pack_p::<T, MT, SN, KP>(&s);
        unsafe {
            if fp8 {
                gemm_pv_fp8::<T, C, MT, KP, ON, D, DC>(&p_frags, ops8(t).v, &mut o);
            } else {
                gemm_pv::<T, MT, KP, ON, D>(&p_frags, ops, &mut o);
            }
        }
    }
    let mut lse = if S::SINK { softmax.finish_with_sink(&mut o, scale_log2, score.sink_log2()) } else { softmax.finish(&mut o, scale_log2) };
    if C::KV.is_some() {
        let v_descale = unsafe { p.descale.factors(tile.batch, h_kv as u32)[1] };
        // Index loops, which unroll: the accumulator stays in registers.
        for mt in 0..MT {
            for j in 0..ON {
                for e in 0..4 {
                    o[mt][j][e] *= v_descale;
                }
            }
        }
    }
    if WN > 1 {
        // Nothing may still land in the K/V stages the merge overlays (Q's copies included).
        cp_async_wait_group::<0>();
        unsafe { warp_merge::merge_warps::<MT, ON, WN>(&mut o, &mut lse, k_tile(0).base, wn, lane) };
    }
    // Each warp of a key-splitting group stores the columns it merged; the first also stores
    // the log-sum-exps. Opaque, so that LLVM cannot move this warp-dependent test across the
    // barriers that follow (duplicating a barrier into warp-dependent branches, see
    // `warp_merge`).
    let stores_lse = crate::layout::opaque_i64(wn as i64) == 0;

    if SPLIT && p.num_splits > 1 {
        let bh = tile.batch * p.heads_q + tile.head;
        // Normalised partial output (f32, straight from the fragments) and its log-sum-exp.
        // Only the first warp stores log-sum-exps (a row limit, not a branch: a barrier
        // follows).
        // The workspace holds the launch's `seqlen_q` rows per (batch, head) (variable-length
        // launches: the longest sequence's); a sequence uses its own first rows.
        let part = (split as usize * (p.batch * p.heads_q) as usize + bh as usize) * p.seqlen_q as usize;
        let limit = if stores_lse { seqlen_q } else { 0 };
        unsafe {
            epilogue::store_o_f32::<MT, ON, D, WN, C>(&o, wn, (p.o_accum as *mut f32).add(part * D), m0 + warp_row0 as u32, seqlen_q, lane);
            store_lse(&lse, (p.lse_accum as *mut f32).add(part), m0 + warp_row0 as u32, limit, lane);
        }
        // Q's copies are complete before Q's tile holds the arrival flag (a CTA with no key
        // never waited).
        cp_async_wait_group::<0>();
        let counter = unsafe { (p.split_counters as *mut u32).add(block as usize) };
        if unsafe { split_merge::arrive_last(p, counter, tid, smem) } {
            let end = (m0 + BM as u32).min(seqlen_q);
            let out = split_merge::RowsOut { o: o_ptr, row_stride: or, lse: extent.lse_first(p, tile.batch, tile.head, VARLEN) };
            unsafe { split_merge::merge_rows::<T, D>(p, bh, m0, end, out, tid, (THREADS / 32) as u32) };
        }
        return;
    }

    // The epilogue stages O where Q was. Q's copies were issued by every thread, and a CTA
    // with no visible key never passed the loop's barrier: wait for all of them.
    cp_async_wait_group::<0>();
    bar_sync();
    unsafe {
        store_o::<T, MT, ON, BM, D, WN, C>(&o, wn, q_tile, warp_row0, lane, o_ptr, or, m0, seqlen_q, p.head_dim_v);
        if p.lse != 0 && stores_lse {
            let dst = (p.lse as *mut f32).add(extent.lse_first(p, tile.batch, tile.head, VARLEN));
            store_lse(&lse, dst, m0 + warp_row0 as u32, seqlen_q, lane);
        }
    }
}

/// Declares one `mma.sync` forward entry point, `$name`: the kernel body [`flash_fwd`] for
/// element type `$t` ([`crate::dtype`]), configuration `$idx` of the [`flashrs_abi::Variant`]
/// `$variant`'s table for the [`flashrs_abi::Flavor`] `$flavor`
/// ([`flashrs_abi::Variant::configs_of`]), the score modification `$score` and the mask `$mask`
/// ([`crate::mods`]), with the per-CTA sequence lookup, the key-range split and the block-table
/// addressing compiled in as the variant needs.
///
/// The entry carries the marker of the [`flashrs_abi::Kernel`] it instantiates
/// ([`flashrs_abi::kernel`]): this crate's build checks its own entries' names against it, and
/// the host reads it from a caller's module to launch that caller's entry wherever it would
/// launch the shipped kernel of the same identity. A crate with its own [`crate::mods::ScoreMod`]
/// or [`crate::mods::MaskMod`] declares its kernels with this macro (it needs the features
/// `abi_ptx` and `asm_experimental_arch`, `kernels-gpu` without its default `entries`, and
/// [`crate::dynamic_shared_memory`] once).
#[macro_export]
macro_rules! mma_forward_kernel {
    // K and V of element type `$kv` ([`crate::dtype::KvElement`]): the shipped FP8 cache kernels.
    (@kv $kv:ty, $name:ident, $t:ty, $variant:ident, $flavor:ident, $idx:expr, $score:ty, $mask:ty) => {
        /// Forward attention entry point (see the device crate's `fwd` module and
        /// `FwdParams`); launch with the geometry of its tile configuration.
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(p: $crate::abi::FwdParams) {
            const V: $crate::abi::Variant = $crate::abi::Variant::$variant;
            const F: $crate::abi::Flavor = $crate::abi::Flavor::$flavor;
            const SHR: u32 = <$kv as $crate::dtype::KvElement>::SHR;
            const C: $crate::abi::TileConfig = V.configs_for(F.mods(), SHR != 0)[$idx];
            unsafe {
                core::arch::asm!("// flashrs-kernel: mma {v} {t} {d} {bm} {bn} {w} {s} {m} {kv}", v = const V.code(),
                    t = const <$t as $crate::dtype::Element>::DTYPE.code(), d = const C.head_dim, bm = const C.block_m,
                    bn = const C.block_n, w = const C.warps, s = const C.stages, m = const F.code(),
                    kv = const $crate::abi::Fp8::code(<$kv as $crate::dtype::KvElement>::KV),
                    options(nomem, nostack, preserves_flags));
                $crate::fwd::flash_fwd::<$t, $kv, $score, $mask, { C.head_dim }, { C.block_m }, { C.block_n }, { C.threads() },
                    { C.m_tiles() }, { C.stages }, { C.warps_n() }, { C.block_n / C.warps_n() / 8 },
                    { C.block_n / C.warps_n() / 16 }, { C.head_dim / 8 }, { C.head_dim >> SHR }, { V.varlen() }, { V.split() },
                    { V.paged() }>(&p)
            }
        }
    };
    ($name:ident, $t:ty, $variant:ident, $flavor:ident, $idx:expr, $score:ty, $mask:ty) => {
        $crate::mma_forward_kernel!(@kv $crate::dtype::Same, $name, $t, $variant, $flavor, $idx, $score, $mask);
    };
}

/// The shipped entry points of one [`flashrs_abi::Variant`] ([`crate::mma_forward_kernel`]), one per
/// (configuration of its table, element type): plain, or after `mods` with the attention
/// modifications of [`flashrs_abi::ModParams`] ([`Builtin`] scores, [`Window`] mask; the table
/// is then [`flashrs_abi::Variant::mods_configs`]), or after `sparse` those over a block mask
/// ([`Sparse`]), or after `fp8` plain ones over FP8 caches ([`E4m3`], [`E5m2`]; f16 and bf16
/// queries for each).
macro_rules! mma_kernels {
    ($variant:ident: $($idx:literal => $f16:ident, $bf16:ident;)*) => {$(
        mma_kernels!(@one $variant, Plain, Plain, Mask, $f16, F16, $idx);
        mma_kernels!(@one $variant, Plain, Plain, Mask, $bf16, Bf16, $idx);
    )*};
    ($variant:ident mods: $($idx:literal => $f16:ident, $bf16:ident;)*) => {$(
        mma_kernels!(@one $variant, Mods, Builtin, Window, $f16, F16, $idx);
        mma_kernels!(@one $variant, Mods, Builtin, Window, $bf16, Bf16, $idx);
    )*};
    ($variant:ident sparse: $($idx:literal => $f16:ident, $bf16:ident;)*) => {$(
        mma_kernels!(@one $variant, Sparse, Builtin, Sparse<Window>, $f16, F16, $idx);
        mma_kernels!(@one $variant, Sparse, Builtin, Sparse<Window>, $bf16, Bf16, $idx);
    )*};
    ($variant:ident fp8: $($idx:literal => $f16_e4m3:ident, $bf16_e4m3:ident, $f16_e5m2:ident, $bf16_e5m2:ident;)*) => {$(
        mma_kernels!(@fp8 E4m3, $variant, $f16_e4m3, F16, $idx);
        mma_kernels!(@fp8 E4m3, $variant, $bf16_e4m3, Bf16, $idx);
        mma_kernels!(@fp8 E5m2, $variant, $f16_e5m2, F16, $idx);
        mma_kernels!(@fp8 E5m2, $variant, $bf16_e5m2, Bf16, $idx);
    )*};
    (@one $variant:ident, $flavor:ident, $score:ty, $mask:ty, $name:ident, $t:ty, $idx:literal) => {
        #[cfg(feature = "entries")]
        crate::mma_forward_kernel!($name, $t, $variant, $flavor, $idx, $score, $mask);
    };
    (@fp8 $kv:ty, $variant:ident, $name:ident, $t:ty, $idx:literal) => {
        #[cfg(feature = "entries")]
        crate::mma_forward_kernel!(@kv $kv, $name, $t, $variant, Plain, $idx, Plain, Mask);
    };
}

mma_kernels! { Plain:
    0 => flash_fwd_f16_d64_128x64w4s2, flash_fwd_bf16_d64_128x64w4s2;
    1 => flash_fwd_f16_d64_128x128w8s2, flash_fwd_bf16_d64_128x128w8s2;
    2 => flash_fwd_f16_d64_128x64w4s3, flash_fwd_bf16_d64_128x64w4s3;
    3 => flash_fwd_f16_d128_128x64w8s2, flash_fwd_bf16_d128_128x64w8s2;
    4 => flash_fwd_f16_d128_128x64w8s3, flash_fwd_bf16_d128_128x64w8s3;
    5 => flash_fwd_f16_d128_64x64w4s2, flash_fwd_bf16_d128_64x64w4s2;
    6 => flash_fwd_f16_d128_128x32w4s2, flash_fwd_bf16_d128_128x32w4s2;
    7 => flash_fwd_f16_d256_128x64w8s2, flash_fwd_bf16_d256_128x64w8s2;
    8 => flash_fwd_f16_d256_128x32w8s2, flash_fwd_bf16_d256_128x32w8s2;
    9 => flash_fwd_f16_d128_16x128w4s2, flash_fwd_bf16_d128_16x128w4s2;
    10 => flash_fwd_f16_d128_16x64w4s2, flash_fwd_bf16_d128_16x64w4s2;
    11 => flash_fwd_f16_d64_16x64w4s2, flash_fwd_bf16_d64_16x64w4s2;
    12 => flash_fwd_f16_d256_128x16w8s2, flash_fwd_bf16_d256_128x16w8s2;
}

mma_kernels! { Varlen:
    0 => flash_fwd_varlen_f16_d64_128x64w4s2, flash_fwd_varlen_bf16_d64_128x64w4s2;
    1 => flash_fwd_varlen_f16_d128_128x64w8s2, flash_fwd_varlen_bf16_d128_128x64w8s2;
    2 => flash_fwd_varlen_f16_d256_128x64w8s2, flash_fwd_varlen_bf16_d256_128x64w8s2;
    3 => flash_fwd_varlen_f16_d256_128x16w8s2, flash_fwd_varlen_bf16_d256_128x16w8s2;
}

mma_kernels! { Split:
    0 => flash_fwd_split_f16_d64_128x64w4s2, flash_fwd_split_bf16_d64_128x64w4s2;
    1 => flash_fwd_split_f16_d128_64x64w4s2, flash_fwd_split_bf16_d128_64x64w4s2;
    2 => flash_fwd_split_f16_d256_128x64w8s2, flash_fwd_split_bf16_d256_128x64w8s2;
    3 => flash_fwd_split_f16_d128_16x128w4s2, flash_fwd_split_bf16_d128_16x128w4s2;
    4 => flash_fwd_split_f16_d128_16x64w4s2, flash_fwd_split_bf16_d128_16x64w4s2;
    5 => flash_fwd_split_f16_d64_16x64w4s2, flash_fwd_split_bf16_d64_16x64w4s2;
    6 => flash_fwd_split_f16_d256_128x16w8s2, flash_fwd_split_bf16_d256_128x16w8s2;
}

mma_kernels! { Paged:
    0 => flash_fwd_paged_f16_d64_128x64w4s2, flash_fwd_paged_bf16_d64_128x64w4s2;
    1 => flash_fwd_paged_f16_d128_64x64w4s2, flash_fwd_paged_bf16_d128_64x64w4s2;
    2 => flash_fwd_paged_f16_d256_128x64w8s2, flash_fwd_paged_bf16_d256_128x64w8s2;
    3 => flash_fwd_paged_f16_d128_16x128w4s2, flash_fwd_paged_bf16_d128_16x128w4s2;
    4 => flash_fwd_paged_f16_d128_16x64w4s2, flash_fwd_paged_bf16_d128_16x64w4s2;
    5 => flash_fwd_paged_f16_d64_16x64w4s2, flash_fwd_paged_bf16_d64_16x64w4s2;
    6 => flash_fwd_paged_f16_d256_128x16w8s2, flash_fwd_paged_bf16_d256_128x16w8s2;
}

mma_kernels! { VarlenSplit:
    0 => flash_fwd_varlen_split_f16_d64_128x64w4s2, flash_fwd_varlen_split_bf16_d64_128x64w4s2;
    1 => flash_fwd_varlen_split_f16_d128_64x64w4s2, flash_fwd_varlen_split_bf16_d128_64x64w4s2;
    2 => flash_fwd_varlen_split_f16_d256_128x64w8s2, flash_fwd_varlen_split_bf16_d256_128x64w8s2;
    3 => flash_fwd_varlen_split_f16_d128_16x128w4s2, flash_fwd_varlen_split_bf16_d128_16x128w4s2;
    4 => flash_fwd_varlen_split_f16_d128_16x64w4s2, flash_fwd_varlen_split_bf16_d128_16x64w4s2;
    5 => flash_fwd_varlen_split_f16_d64_16x64w4s2, flash_fwd_varlen_split_bf16_d64_16x64w4s2;
    6 => flash_fwd_varlen_split_f16_d256_128x16w8s2, flash_fwd_varlen_split_bf16_d256_128x16w8s2;
}

mma_kernels! { VarlenPaged:
    0 => flash_fwd_varlen_paged_f16_d64_128x64w4s2, flash_fwd_varlen_paged_bf16_d64_128x64w4s2;
    1 => flash_fwd_varlen_paged_f16_d128_64x64w4s2, flash_fwd_varlen_paged_bf16_d128_64x64w4s2;
    2 => flash_fwd_varlen_paged_f16_d256_128x64w8s2, flash_fwd_varlen_paged_bf16_d256_128x64w8s2;
    3 => flash_fwd_varlen_paged_f16_d128_16x128w4s2, flash_fwd_varlen_paged_bf16_d128_16x128w4s2;
    4 => flash_fwd_varlen_paged_f16_d128_16x64w4s2, flash_fwd_varlen_paged_bf16_d128_16x64w4s2;
    5 => flash_fwd_varlen_paged_f16_d64_16x64w4s2, flash_fwd_varlen_paged_bf16_d64_16x64w4s2;
    6 => flash_fwd_varlen_paged_f16_d256_128x16w8s2, flash_fwd_varlen_paged_bf16_d256_128x16w8s2;
}

mma_kernels! { Plain mods:
    0 => flash_fwd_mods_f16_d64_128x64w4s2, flash_fwd_mods_bf16_d64_128x64w4s2;
    1 => flash_fwd_mods_f16_d128_128x64w8s2, flash_fwd_mods_bf16_d128_128x64w8s2;
    2 => flash_fwd_mods_f16_d256_128x32w8s2, flash_fwd_mods_bf16_d256_128x32w8s2;
    3 => flash_fwd_mods_f16_d256_128x16w8s2, flash_fwd_mods_bf16_d256_128x16w8s2;
}

mma_kernels! { Varlen mods:
    0 => flash_fwd_varlen_mods_f16_d64_128x64w4s2, flash_fwd_varlen_mods_bf16_d64_128x64w4s2;
    1 => flash_fwd_varlen_mods_f16_d128_128x64w8s2, flash_fwd_varlen_mods_bf16_d128_128x64w8s2;
    2 => flash_fwd_varlen_mods_f16_d256_128x32w8s2, flash_fwd_varlen_mods_bf16_d256_128x32w8s2;
    3 => flash_fwd_varlen_mods_f16_d256_128x16w8s2, flash_fwd_varlen_mods_bf16_d256_128x16w8s2;
}

mma_kernels! { Plain sparse:
    0 => flash_fwd_sparse_f16_d64_128x64w4s2, flash_fwd_sparse_bf16_d64_128x64w4s2;
    1 => flash_fwd_sparse_f16_d128_128x64w8s2, flash_fwd_sparse_bf16_d128_128x64w8s2;
    2 => flash_fwd_sparse_f16_d256_128x32w8s2, flash_fwd_sparse_bf16_d256_128x32w8s2;
    3 => flash_fwd_sparse_f16_d256_128x16w8s2, flash_fwd_sparse_bf16_d256_128x16w8s2;
}

mma_kernels! { Varlen sparse:
    0 => flash_fwd_varlen_sparse_f16_d64_128x64w4s2, flash_fwd_varlen_sparse_bf16_d64_128x64w4s2;
    1 => flash_fwd_varlen_sparse_f16_d128_128x64w8s2, flash_fwd_varlen_sparse_bf16_d128_128x64w8s2;
    2 => flash_fwd_varlen_sparse_f16_d256_128x32w8s2, flash_fwd_varlen_sparse_bf16_d256_128x32w8s2;
    3 => flash_fwd_varlen_sparse_f16_d256_128x16w8s2, flash_fwd_varlen_sparse_bf16_d256_128x16w8s2;
}

mma_kernels! { Split fp8:
    0 => flash_fwd_split_f16_e4m3_d64_128x64w4s2, flash_fwd_split_bf16_e4m3_d64_128x64w4s2, flash_fwd_split_f16_e5m2_d64_128x64w4s2, flash_fwd_split_bf16_e5m2_d64_128x64w4s2;
    1 => flash_fwd_split_f16_e4m3_d128_64x64w4s2, flash_fwd_split_bf16_e4m3_d128_64x64w4s2, flash_fwd_split_f16_e5m2_d128_64x64w4s2, flash_fwd_split_bf16_e5m2_d128_64x64w4s2;
    2 => flash_fwd_split_f16_e4m3_d128_16x64w4s2, flash_fwd_split_bf16_e4m3_d128_16x64w4s2, flash_fwd_split_f16_e5m2_d128_16x64w4s2, flash_fwd_split_bf16_e5m2_d128_16x64w4s2;
    3 => flash_fwd_split_f16_e4m3_d128_16x128w4s2, flash_fwd_split_bf16_e4m3_d128_16x128w4s2, flash_fwd_split_f16_e5m2_d128_16x128w4s2, flash_fwd_split_bf16_e5m2_d128_16x128w4s2;
    4 => flash_fwd_split_f16_e4m3_d64_16x64w4s2, flash_fwd_split_bf16_e4m3_d64_16x64w4s2, flash_fwd_split_f16_e5m2_d64_16x64w4s2, flash_fwd_split_bf16_e5m2_d64_16x64w4s2;
    5 => flash_fwd_split_f16_e4m3_d256_128x16w8s2, flash_fwd_split_bf16_e4m3_d256_128x16w8s2, flash_fwd_split_f16_e5m2_d256_128x16w8s2, flash_fwd_split_bf16_e5m2_d256_128x16w8s2;
}

mma_kernels! { Paged fp8:
    0 => flash_fwd_paged_f16_e4m3_d64_128x64w4s2, flash_fwd_paged_bf16_e4m3_d64_128x64w4s2, flash_fwd_paged_f16_e5m2_d64_128x64w4s2, flash_fwd_paged_bf16_e5m2_d64_128x64w4s2;
    1 => flash_fwd_paged_f16_e4m3_d128_64x64w4s2, flash_fwd_paged_bf16_e4m3_d128_64x64w4s2, flash_fwd_paged_f16_e5m2_d128_64x64w4s2, flash_fwd_paged_bf16_e5m2_d128_64x64w4s2;
    2 => flash_fwd_paged_f16_e4m3_d128_16x64w4s2, flash_fwd_paged_bf16_e4m3_d128_16x64w4s2, flash_fwd_paged_f16_e5m2_d128_16x64w4s2, flash_fwd_paged_bf16_e5m2_d128_16x64w4s2;
    3 => flash_fwd_paged_f16_e4m3_d128_16x128w4s2, flash_fwd_paged_bf16_e4m3_d128_16x128w4s2, flash_fwd_paged_f16_e5m2_d128_16x128w4s2, flash_fwd_paged_bf16_e5m2_d128_16x128w4s2;
    4 => flash_fwd_paged_f16_e4m3_d64_16x64w4s2, flash_fwd_paged_bf16_e4m3_d64_16x64w4s2, flash_fwd_paged_f16_e5m2_d64_16x64w4s2, flash_fwd_paged_bf16_e5m2_d64_16x64w4s2;
    5 => flash_fwd_paged_f16_e4m3_d256_128x16w8s2, flash_fwd_paged_bf16_e4m3_d256_128x16w8s2, flash_fwd_paged_f16_e5m2_d256_128x16w8s2, flash_fwd_paged_bf16_e5m2_d256_128x16w8s2;
}

mma_kernels! { VarlenSplit fp8:
    0 => flash_fwd_varlen_split_f16_e4m3_d64_128x64w4s2, flash_fwd_varlen_split_bf16_e4m3_d64_128x64w4s2, flash_fwd_varlen_split_f16_e5m2_d64_128x64w4s2, flash_fwd_varlen_split_bf16_e5m2_d64_128x64w4s2;
    1 => flash_fwd_varlen_split_f16_e4m3_d128_64x64w4s2, flash_fwd_varlen_split_bf16_e4m3_d128_64x64w4s2, flash_fwd_varlen_split_f16_e5m2_d128_64x64w4s2, flash_fwd_varlen_split_bf16_e5m2_d128_64x64w4s2;
    2 => flash_fwd_varlen_split_f16_e4m3_d128_16x64w4s2, flash_fwd_varlen_split_bf16_e4m3_d128_16x64w4s2, flash_fwd_varlen_split_f16_e5m2_d128_16x64w4s2, flash_fwd_varlen_split_bf16_e5m2_d128_16x64w4s2;
    3 => flash_fwd_varlen_split_f16_e4m3_d128_16x128w4s2, flash_fwd_varlen_split_bf16_e4m3_d128_16x128w4s2, flash_fwd_varlen_split_f16_e5m2_d128_16x128w4s2, flash_fwd_varlen_split_bf16_e5m2_d128_16x128w4s2;
    4 => flash_fwd_varlen_split_f16_e4m3_d64_16x64w4s2, flash_fwd_varlen_split_bf16_e4m3_d64_16x64w4s2, flash_fwd_varlen_split_f16_e5m2_d64_16x64w4s2, flash_fwd_varlen_split_bf16_e5m2_d64_16x64w4s2;
    5 => flash_fwd_varlen_split_f16_e4m3_d256_128x16w8s2, flash_fwd_varlen_split_bf16_e4m3_d256_128x16w8s2, flash_fwd_varlen_split_f16_e5m2_d256_128x16w8s2, flash_fwd_varlen_split_bf16_e5m2_d256_128x16w8s2;
}

mma_kernels! { VarlenPaged fp8:
    0 => flash_fwd_varlen_paged_f16_e4m3_d64_128x64w4s2, flash_fwd_varlen_paged_bf16_e4m3_d64_128x64w4s2, flash_fwd_varlen_paged_f16_e5m2_d64_128x64w4s2, flash_fwd_varlen_paged_bf16_e5m2_d64_128x64w4s2;
    1 => flash_fwd_varlen_paged_f16_e4m3_d128_64x64w4s2, flash_fwd_varlen_paged_bf16_e4m3_d128_64x64w4s2, flash_fwd_varlen_paged_f16_e5m2_d128_64x64w4s2, flash_fwd_varlen_paged_bf16_e5m2_d128_64x64w4s2;
    2 => flash_fwd_varlen_paged_f16_e4m3_d128_16x64w4s2, flash_fwd_varlen_paged_bf16_e4m3_d128_16x64w4s2, flash_fwd_varlen_paged_f16_e5m2_d128_16x64w4s2, flash_fwd_varlen_paged_bf16_e5m2_d128_16x64w4s2;
    3 => flash_fwd_varlen_paged_f16_e4m3_d128_16x128w4s2, flash_fwd_varlen_paged_bf16_e4m3_d128_16x128w4s2, flash_fwd_varlen_paged_f16_e5m2_d128_16x128w4s2, flash_fwd_varlen_paged_bf16_e5m2_d128_16x128w4s2;
    4 => flash_fwd_varlen_paged_f16_e4m3_d64_16x64w4s2, flash_fwd_varlen_paged_bf16_e4m3_d64_16x64w4s2, flash_fwd_varlen_paged_f16_e5m2_d64_16x64w4s2, flash_fwd_varlen_paged_bf16_e5m2_d64_16x64w4s2;
    5 => flash_fwd_varlen_paged_f16_e4m3_d256_128x16w8s2, flash_fwd_varlen_paged_bf16_e4m3_d256_128x16w8s2, flash_fwd_varlen_paged_f16_e5m2_d256_128x16w8s2, flash_fwd_varlen_paged_bf16_e5m2_d256_128x16w8s2;
}
