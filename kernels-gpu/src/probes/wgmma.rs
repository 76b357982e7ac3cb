//! One warpgroup computes `D = A * B^T` with `wgmma.mma_async.m64nNk16` over `k_steps` (1 or 4)
//! steps of 16 along K. A is 64x64 and B^T is Nx64, 16-bit, row-major (K contiguous) in global
//! memory; the probe stores both into shared memory in the 128-byte-swizzled K-major layout a
//! `SWIZZLE_128B` TMA load produces, and addresses them through descriptors whose start address
//! advances 32 bytes per k-step. D is 64xN f32 row-major, written from the accumulator
//! fragments; it starts as NaN so the first step's `scale_d = false` must overwrite it.
//!
//! `mode`: 0 = f16, 1 = bf16 (A and B from shared memory); 2 = f16, 3 = bf16 with A from
//! registers (loaded from global in the fragment layout of [`crate::arch::wgmma`]).
//! One CTA of 128 threads; dynamic shared memory 1024 (alignment slack) + 64*128 + N*128 bytes.
use super::{dsmem_base_1024, sw128_offset};
use crate::arch::barrier::bar_sync;
use crate::arch::fence::fence_proxy_async_shared_cta;
use crate::arch::ids::thread_idx_x;
use crate::arch::smem::st_shared_v4;
use crate::arch::wgmma::*;

/// Copies a `rows` x 64 16-bit row-major tile into 128B-swizzled shared memory at `dst`.
#[inline(always)]
unsafe fn stage_sw128(dst: u32, src: *const [u32; 4], rows: u32) {
    let tid = thread_idx_x();
    for i in 0..rows * 8 / 128 {
        let idx = tid + 128 * i;
        unsafe { st_shared_v4(dst + sw128_offset(idx / 8, idx % 8), src.add(idx as usize).read()) };
    }
}

/// The A fragment of k-step `k` for this thread, from a 64x64 16-bit row-major A.
#[inline(always)]
pub(super) unsafe fn load_frag_a(a: *const u32, k: u32) -> FragA {
    let tid = thread_idx_x();
    let (w, g, t) = (tid / 32, (tid % 32) / 4, tid % 4);
    let r0 = 16 * w + g;
    // Index of the pair (row, col..col+1) in u32 units: rows are 32 pairs.
    let pair = |row: u32, col: u32| unsafe { a.add((row * 32 + col / 2) as usize).read() };
    let c0 = 16 * k + 2 * t;
    [pair(r0, c0), pair(r0 + 8, c0), pair(r0, c0 + 8), pair(r0 + 8, c0 + 8)]
}

#[inline(always)]
unsafe fn mainloop_ss<const K: u32, const R: usize>(
    acc: &mut [f32; R], sa: u32, sb: u32, mma: impl Fn(&mut [f32; R], SmemDesc, SmemDesc, bool),
) {
    // Pins D's current values in registers before the fence, so the compiler cannot move
    // their definitions between the fence and the first wgmma.
    wgmma_fence_operands(acc);
    wgmma_fence();
    for k in 0..K {
        let da = SmemDesc::k_major_sw128(sa).add(32 * k);
        let db = SmemDesc::k_major_sw128(sb).add(32 * k);
        mma(acc, da, db, k != 0);
    }
    wgmma_commit_group();
    wgmma_wait_group::<0>();
    wgmma_fence_operands(acc);
}

#[inline(always)]
unsafe fn mainloop_rs<const K: usize, const R: usize>(
    acc: &mut [f32; R], a: *const u32, sb: u32, mma: impl Fn(&mut [f32; R], &FragA, SmemDesc, bool),
) {
    // All fragments before the fence: registers written after `wgmma.fence` and read by a
    // wgmma would need another fence.
    let mut frags = [[0u32; 4]; K];
    for k in 0..K {
        frags[k] = unsafe { load_frag_a(a, k as u32) };
    }
    wgmma_fence_operands(acc);
    wgmma_fence();
    for k in 0..K {
        let db = SmemDesc::k_major_sw128(sb).add(32 * k as u32);
        mma(acc, &frags[k], db, k != 0);
    }
    wgmma_commit_group();
    wgmma_wait_group::<0>();
    wgmma_fence_operands(acc);
}

/// Writes the accumulator of an m64nN tile to row-major `d` (`n` columns).
#[inline(always)]
unsafe fn store_acc<const R: usize>(acc: &[f32; R], d: *mut f32, n: u32) {
    let tid = thread_idx_x();
    let (w, g, t) = (tid / 32, (tid % 32) / 4, tid % 4);
    for i in 0..R / 4 {
        for h in 0..2 {
            let row = 16 * w + g + 8 * h as u32;
            let col = 8 * i as u32 + 2 * t;
            let p = unsafe { d.add((row * n + col) as usize) };
            unsafe {
                p.write(acc[4 * i + 2 * h]);
                p.add(1).write(acc[4 * i + 2 * h + 1]);
            }
        }
    }
}

macro_rules! probe_wgmma {
    ($(#[$doc:meta])* $name:ident, $n:literal, $ss_f16:ident, $ss_bf16:ident, $rs_f16:ident, $rs_bf16:ident) => {
        $(#[$doc])*
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(a: *const [u32; 4], bt: *const [u32; 4], d: *mut f32, k_steps: u32, mode: u32) {
            let sa = dsmem_base_1024();
            let sb = sa + 64 * 128;
            unsafe {
                stage_sw128(sa, a, 64);
                stage_sw128(sb, bt, $n);
            }
            // Generic-proxy stores -> async-proxy (wgmma) reads: every writer fences, then the barrier.
            fence_proxy_async_shared_cta();
            bar_sync();
            let mut acc = [f32::NAN; $n / 2];
            let a32 = a as *const u32;
            unsafe {
                match (mode, k_steps) {
                    (0, 1) => mainloop_ss::<1, _>(&mut acc, sa, sb, |c, x, y, s| $ss_f16(c, x, y, s)),
                    (0, _) => mainloop_ss::<4, _>(&mut acc, sa, sb, |c, x, y, s| $ss_f16(c, x, y, s)),
                    (1, 1) => mainloop_ss::<1, _>(&mut acc, sa, sb, |c, x, y, s| $ss_bf16(c, x, y, s)),
                    (1, _) => mainloop_ss::<4, _>(&mut acc, sa, sb, |c, x, y, s| $ss_bf16(c, x, y, s)),
                    (2, 1) => mainloop_rs::<1, _>(&mut acc, a32, sb, |c, x, y, s| $rs_f16(c, x, y, s)),
                    (2, _) => mainloop_rs::<4, _>(&mut acc, a32, sb, |c, x, y, s| $rs_f16(c, x, y, s)),
                    (_, 1) => mainloop_rs::<1, _>(&mut acc, a32, sb, |c, x, y, s| $rs_bf16(c, x, y, s)),
                    (_, _) => mainloop_rs::<4, _>(&mut acc, a32, sb, |c, x, y, s| $rs_bf16(c, x, y, s)),
                }
                store_acc(&acc, d, $n);
            }
        }
    };
}

probe_wgmma!(/// m64n32k16 (see the module docs): `bt` is 32x64, `d` 64x32.
    probe_wgmma_m64n32k16, 32,
    wgmma_mma_async_m64n32k16_f32_f16, wgmma_mma_async_m64n32k16_f32_bf16,
    wgmma_mma_async_m64n32k16_f32_f16_rs, wgmma_mma_async_m64n32k16_f32_bf16_rs);
probe_wgmma!(/// m64n64k16 (see the module docs): `bt` is 64x64, `d` 64x64.
    probe_wgmma_m64n64k16, 64,
    wgmma_mma_async_m64n64k16_f32_f16, wgmma_mma_async_m64n64k16_f32_bf16,
    wgmma_mma_async_m64n64k16_f32_f16_rs, wgmma_mma_async_m64n64k16_f32_bf16_rs);
probe_wgmma!(/// m64n128k16 (see the module docs): `bt` is 128x64, `d` 64x128.
    probe_wgmma_m64n128k16, 128,
    wgmma_mma_async_m64n128k16_f32_f16, wgmma_mma_async_m64n128k16_f32_bf16,
    wgmma_mma_async_m64n128k16_f32_f16_rs, wgmma_mma_async_m64n128k16_f32_bf16_rs);
probe_wgmma!(/// m64n256k16 (see the module docs): `bt` is 256x64, `d` 64x256.
    probe_wgmma_m64n256k16, 256,
    wgmma_mma_async_m64n256k16_f32_f16, wgmma_mma_async_m64n256k16_f32_bf16,
    wgmma_mma_async_m64n256k16_f32_f16_rs, wgmma_mma_async_m64n256k16_f32_bf16_rs);
