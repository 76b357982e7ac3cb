//! Forward attention, FlashAttention-2 style, on `mma.sync` (sm_80 and newer).
//!
//! A CTA owns `block_m` query rows of one (batch, head), split across warps (16 rows per MMA
//! tile, `m_tiles` tiles per warp). K/V tiles of `block_n` rows stream through a `stages`-deep
//! cp.async ring in shared memory; each warp computes its scores in registers, folds them
//! into an online softmax, and accumulates O in f32, normalising once at the end.
//!
//! Split as in FlashAttention-3: [`scheduler`] (which tile a CTA computes), [`mainloop`]
//! (copies and GEMMs), [`mask`], [`softmax`], [`epilogue`]; [`config`] and [`params`] are
//! shared with the host.
pub mod config;
pub mod epilogue;
pub mod mainloop;
pub mod mask;
pub mod params;
pub mod scheduler;
pub mod softmax;

use crate::arch::barrier::bar_sync;
use crate::arch::cp_async::{cp_async_commit_group, cp_async_wait_group};
use crate::arch::ids::{block_idx_x, thread_idx_x, warp_id};
use crate::arch::smem::dsmem_base;
use crate::dtype::{Bf16, Element, F16};
use crate::layout::SmemTile;
use config::{CONFIGS, TileConfig};
use epilogue::{store_lse, store_o};
use mainloop::{TileCursor, WarpOperands, gemm_pv, gemm_qk, pack_p};
use mask::Mask;
use params::FwdParams;
use scheduler::tile_for_block;
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
/// K/V rows per stage `BN`, `THREADS` per CTA, `MT` row tiles per warp, `STAGES`, and the
/// derived fragment counts `SN = BN/8` (score tiles), `KP = BN/16` (P's k-steps) and `ON = D/8` (output tiles), which
/// stable Rust cannot compute in array types.
#[inline(always)]
unsafe fn flash_fwd<
    T: Element,
    const D: usize,
    const BM: usize,
    const BN: usize,
    const THREADS: usize,
    const MT: usize,
    const STAGES: usize,
    const SN: usize,
    const KP: usize,
    const ON: usize,
>(
    p: &FwdParams,
) {
    const {
        assert!(BM == THREADS / 32 * MT * 16 && SN == BN / 8 && KP == BN / 16 && ON == D / 8 && STAGES >= 2 && STAGES <= 4);
    }
    let tid = thread_idx_x();
    let lane = (tid % 32) as usize;
    let warp_row0 = warp_id() as usize * MT * 16;
    let tile = tile_for_block(p, block_idx_x());
    let m0 = tile.m_block * BM as u32;
    let (b, h, h_kv) = (tile.batch as i64, tile.head as i64, scheduler::div_rem(tile.head, p.group).0 as i64);
    let [qb, qr, qh] = p.q_strides;
    let [kb, kr, kh] = p.k_strides;
    let [vb, vr, vh] = p.v_strides;
    let [ob, or, oh] = p.o_strides;
    let q = unsafe { (p.q as *const u16).offset((b * qb + h * qh) as isize) };
    let k = unsafe { (p.k as *const u16).offset((b * kb + h_kv * kh) as isize) };
    let v = unsafe { (p.v as *const u16).offset((b * vb + h_kv * vh) as isize) };
    let o_ptr = unsafe { (p.o as *mut u16).offset((b * ob + h * oh) as isize) };

    let smem = dsmem_base();
    let q_tile = SmemTile::<BM, D> { base: smem };
    let k_tile = |s: usize| SmemTile::<BN, D> { base: smem + ((BM + s * BN) * D * 2) as u32 };
    let v_tile = |s: usize| SmemTile::<BN, D> { base: smem + ((BM + (STAGES + s) * BN) * D * 2) as u32 };

    let mask = Mask {
        seqlen_k: p.seqlen_k as i32,
        causal_offset: (p.causal != 0).then_some(p.seqlen_k as i32 - p.seqlen_q as i32),
    };
    // Keys past the last row's diagonal are never seen by this CTA.
    let keys = match mask.causal_offset {
        Some(off) => (m0 as i32 + BM as i32 + off).max(0).min(mask.seqlen_k),
        None => mask.seqlen_k,
    } as usize;
    let n_tiles = keys.div_ceil(BN);

    let mut k_cursor = TileCursor::<BN, D, THREADS>::new(tid, k, kr, p.seqlen_k, 0, p.head_dim);
    let mut v_cursor = TileCursor::<BN, D, THREADS>::new(tid, v, vr, p.seqlen_k, 0, p.head_dim);
    // Tiles are issued in order, each cursor stepping to the next; `t` only picks the stage.
    let mut load_kv = |t: usize| unsafe {
        k_cursor.issue(k_tile(t % STAGES), tid, p.k_strides[1]);
        v_cursor.issue(v_tile(t % STAGES), tid, p.v_strides[1]);
    };
    unsafe { TileCursor::<BM, D, THREADS>::new(tid, q, qr, p.seqlen_q, m0, p.head_dim).issue(q_tile, tid, qr) };
    // Groups are committed even when empty, so "group t" always means tile t's copies.
    for t in 0..STAGES - 1 {
        if t < n_tiles {
            load_kv(t);
        }
        cp_async_commit_group();
    }

    let mut o = [[[0.0f32; 4]; ON]; MT];
    let mut softmax = Softmax::<MT>::new();
    let row = (m0 as usize + warp_row0 + lane / 4) as i32;
    let ops = WarpOperands::new(q_tile, k_tile(0), v_tile(0), warp_row0, lane);
    for t in 0..n_tiles {
        wait_for_stage::<STAGES>();
        // Everyone's tile t landed, and everyone finished tile t-1, whose stage is refilled next.
        bar_sync();
        if t + STAGES - 1 < n_tiles {
            load_kv(t + STAGES - 1);
        }
        cp_async_commit_group();

        let ops = ops.kv_shifted(((t % STAGES) * BN * D * 2) as u32);
        let mut s = unsafe { gemm_qk::<T, MT, SN, D>(ops) };
        let col0 = (t * BN) as i32;
        if mask.touches(m0 as i32, col0, BN as i32) {
            mask.apply(&mut s, row, col0 + 2 * (lane % 4) as i32);
        }
        softmax.update(&mut s, &mut o, p.scale_log2);
        unsafe { gemm_pv::<T, MT, KP, ON, D>(&pack_p::<T, MT, SN, KP>(&s), ops, &mut o) };
    }
    let lse = softmax.finish(&mut o, p.scale_log2);

    // The epilogue stages O where Q was. Q's copies were issued by every thread, and a CTA
    // with no visible key never passed the loop's barrier: wait for all of them.
    cp_async_wait_group::<0>();
    bar_sync();
    unsafe {
        store_o::<T, MT, ON, BM, D>(&o, q_tile, warp_row0, lane, o_ptr, or, m0, p.seqlen_q, p.head_dim);
        if p.lse != 0 {
            let bh = (tile.batch * p.heads_q + tile.head) as usize;
            let dst = (p.lse as *mut f32).add(bh * p.seqlen_q as usize);
            store_lse(&lse, dst, m0 + warp_row0 as u32, p.seqlen_q, lane);
        }
    }
}

/// Declares one kernel entry per (element type, configuration). Entry names are
/// `flash_fwd_<dtype>_d<D>_<BM>x<BN>w<warps>s<stages>`, which the host derives from [`CONFIGS`].
macro_rules! fwd_kernels {
    ($($cfg:literal => $f16:ident, $bf16:ident;)*) => {$(
        fwd_kernels!(@one $f16, F16, $cfg);
        fwd_kernels!(@one $bf16, Bf16, $cfg);
    )*};
    (@one $name:ident, $t:ty, $cfg:literal) => {
        /// Forward attention entry point (see the module docs); launch with the geometry of
        /// its [`TileConfig`].
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(p: FwdParams) {
            const C: TileConfig = CONFIGS[$cfg];
            unsafe {
                flash_fwd::<$t, { C.head_dim }, { C.block_m }, { C.block_n }, { C.threads() },
                    { C.m_tiles() }, { C.stages }, { C.block_n / 8 }, { C.block_n / 16 }, { C.head_dim / 8 }>(&p)
            }
        }
    };
}

fwd_kernels! {
    0 => flash_fwd_f16_d64_128x64w4s2, flash_fwd_bf16_d64_128x64w4s2;
    1 => flash_fwd_f16_d64_128x128w8s2, flash_fwd_bf16_d64_128x128w8s2;
    2 => flash_fwd_f16_d64_128x64w4s3, flash_fwd_bf16_d64_128x64w4s3;
    3 => flash_fwd_f16_d128_128x64w8s2, flash_fwd_bf16_d128_128x64w8s2;
    4 => flash_fwd_f16_d128_128x64w8s3, flash_fwd_bf16_d128_128x64w8s3;
    5 => flash_fwd_f16_d128_64x64w4s2, flash_fwd_bf16_d128_64x64w4s2;
    6 => flash_fwd_f16_d128_128x32w4s2, flash_fwd_bf16_d128_128x32w4s2;
    7 => flash_fwd_f16_d256_128x64w8s2, flash_fwd_bf16_d256_128x64w8s2;
    8 => flash_fwd_f16_d256_128x32w8s2, flash_fwd_bf16_d256_128x32w8s2;
}
