//! One warpgroup computes `D = A * B` with `wgmma.mma_async.m64nNk16` in the form the Hopper
//! attention kernel's `O += P V` uses: A from registers, B *N-major* (`imm-trans-b = 1`). A is
//! 64x64 row-major (K contiguous) in global memory, loaded straight into the register fragment
//! layout; B is 64xN row-major (N contiguous: V's `[keys, head_dim]`), staged into shared
//! memory as `N / 64` slabs of 64 rows x 128 bytes with the 128-byte swizzle (what TMA writes
//! for 64-column boxes). The descriptor of k-step `k` starts `2048 * k` bytes in (16 rows),
//! with LBO = one slab (the next 64 columns) and SBO = 1024 (the next 8 rows). D is 64xN f32
//! row-major, poisoned with NaN before the first step's `scale_d = false`.
//!
//! `mode`: 0 = f16, 1 = bf16; 2 = f16, 3 = bf16 with A from shared memory instead (K-major,
//! one slab staged after B's: the head-dim-256 backward's `dV += P^T dO`). One CTA of 128
//! threads; dynamic shared memory 1024 (alignment slack) + N * 128 + 8192 bytes.
//! [`probe_wgmma_tt_m64n64k16`] takes A MN-major too.
use super::wgmma::load_frag_a;
use super::{dsmem_base_1024, sw128_offset};
use crate::arch::barrier::bar_sync;
use crate::arch::fence::fence_proxy_async_shared_cta;
use crate::arch::ids::thread_idx_x;
use crate::arch::smem::st_shared_v4;
use crate::arch::wgmma::*;

/// K of the probe (4 k-steps of 16).
const K: u32 = 64;

/// Copies the 64xN row-major B into `N / 64` swizzled slabs of 64 rows at `dst`.
#[inline(always)]
unsafe fn stage_slabs(dst: u32, b: *const [u32; 4], n: u32) {
    let tid = thread_idx_x();
    let chunks = n / 8;
    for i in 0..K * chunks / 128 {
        let idx = tid + 128 * i;
        let (row, chunk) = (idx / chunks, idx % chunks);
        let slab = dst + (chunk / 8) * K * 128;
        unsafe { st_shared_v4(slab + sw128_offset(row, chunk % 8), b.add(idx as usize).read()) };
    }
}

macro_rules! probe_wgmma_tb {
    ($(#[$doc:meta])* $name:ident, $n:literal, $f16:ident, $bf16:ident, $ss_f16:ident, $ss_bf16:ident) => {
        $(#[$doc])*
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(a: *const u32, b: *const [u32; 4], d: *mut f32, mode: u32) {
            let sb = dsmem_base_1024();
            let sa = sb + $n * 128;
            unsafe {
                stage_slabs(sb, b, $n);
                stage_slabs(sa, a as *const [u32; 4], 64);
            }
            fence_proxy_async_shared_cta();
            bar_sync();
            let mut frags = [[0u32; 4]; (K / 16) as usize];
            for k in 0..(K / 16) as usize {
                frags[k] = unsafe { load_frag_a(a, k as u32) };
            }
            let mut acc = [f32::NAN; $n / 2];
            wgmma_fence_operands(&mut acc);
            wgmma_fence();
            for k in 0..(K / 16) as usize {
                let desc = SmemDesc::new(sb + 2048 * k as u32, K * 128, 1024, Swizzle::B128);
                let da = SmemDesc::k_major_sw128(sa).add(32 * k as u32);
                unsafe {
                    match mode {
                        0 => $f16(&mut acc, &frags[k], desc, k != 0),
                        1 => $bf16(&mut acc, &frags[k], desc, k != 0),
                        2 => $ss_f16(&mut acc, da, desc, k != 0),
                        _ => $ss_bf16(&mut acc, da, desc, k != 0),
                    }
                }
            }
            wgmma_commit_group();
            wgmma_wait_group::<0>();
            wgmma_fence_operands(&mut acc);
            let tid = thread_idx_x();
            let (w, g, t) = (tid / 32, (tid % 32) / 4, tid % 4);
            for i in 0..$n / 8 {
                for h in 0..2 {
                    let row = 16 * w + g + 8 * h as u32;
                    let p = unsafe { d.add((row * $n + 8 * i as u32 + 2 * t) as usize) };
                    unsafe {
                        p.write(acc[4 * i + 2 * h]);
                        p.add(1).write(acc[4 * i + 2 * h + 1]);
                    }
                }
            }
        }
    };
}

probe_wgmma_tb!(/// m64n64k16, B 64x64 (see the module docs).
    probe_wgmma_tb_m64n64k16, 64,
    wgmma_mma_async_m64n64k16_f32_f16_rs_tb, wgmma_mma_async_m64n64k16_f32_bf16_rs_tb,
    wgmma_mma_async_m64n64k16_f32_f16_ss_tb, wgmma_mma_async_m64n64k16_f32_bf16_ss_tb);
probe_wgmma_tb!(/// m64n128k16, B 64x128 (see the module docs).
    probe_wgmma_tb_m64n128k16, 128,
    wgmma_mma_async_m64n128k16_f32_f16_rs_tb, wgmma_mma_async_m64n128k16_f32_bf16_rs_tb,
    wgmma_mma_async_m64n128k16_f32_f16_ss_tb, wgmma_mma_async_m64n128k16_f32_bf16_ss_tb);
probe_wgmma_tb!(/// m64n256k16, B 64x256 (see the module docs).
    probe_wgmma_tb_m64n256k16, 256,
    wgmma_mma_async_m64n256k16_f32_f16_rs_tb, wgmma_mma_async_m64n256k16_f32_bf16_rs_tb,
    wgmma_mma_async_m64n256k16_f32_f16_ss_tb, wgmma_mma_async_m64n256k16_f32_bf16_ss_tb);

/// `wgmma` with both operands MN-major in shared memory (`imm-trans-a = imm-trans-b = 1`), as
/// the Hopper backward's `dQ = dS K` uses it: `a_t` is A^T (64 x 64 row-major: K rows of the 64
/// M values, dS^T's layout), `b` is B (64 x 64 row-major: K rows of the 64 N values, K's
/// layout); each staged as one 128B-swizzled slab of 64 rows, A^T at the aligned base and B
/// 8192 bytes on. D = A B is 64 x 64 f32 row-major. `mode`: 0 = f16, 1 = bf16. One CTA of 128
/// threads; dynamic shared memory 1024 + 16384 bytes.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn probe_wgmma_tt_m64n64k16(a_t: *const [u32; 4], b: *const [u32; 4], d: *mut f32, mode: u32) {
    let sa = dsmem_base_1024();
    let sb = sa + 8192;
    unsafe {
        stage_slabs(sa, a_t, 64);
        stage_slabs(sb, b, 64);
    }
    fence_proxy_async_shared_cta();
    bar_sync();
    let mut acc = [f32::NAN; 32];
    wgmma_fence_operands(&mut acc);
    wgmma_fence();
    for k in 0..(K / 16) {
        // 16 K rows (two 8-row atoms, SBO 1024) per step; M and N are one slab each.
        let da = SmemDesc::new(sa + 2048 * k, 8192, 1024, Swizzle::B128);
        let db = SmemDesc::new(sb + 2048 * k, 8192, 1024, Swizzle::B128);
        unsafe {
            if mode == 0 {
                wgmma_mma_async_m64n64k16_f32_f16_ss_tt(&mut acc, da, db, k != 0)
            } else {
                wgmma_mma_async_m64n64k16_f32_bf16_ss_tt(&mut acc, da, db, k != 0)
            }
        }
    }
    wgmma_commit_group();
    wgmma_wait_group::<0>();
    wgmma_fence_operands(&mut acc);
    let tid = thread_idx_x();
    let (w, g, t) = (tid / 32, (tid % 32) / 4, tid % 4);
    for i in 0..8 {
        for h in 0..2 {
            let row = 16 * w + g + 8 * h as u32;
            let p = unsafe { d.add((row * 64 + 8 * i as u32 + 2 * t) as usize) };
            unsafe {
                p.write(acc[4 * i + 2 * h]);
                p.add(1).write(acc[4 * i + 2 * h + 1]);
            }
        }
    }
}
