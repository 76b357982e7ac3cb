//! FP8 (e4m3) Q, K and V on `wgmma`: the [`Operands`] of the forward kernel for one-byte inputs.
//!
//! FP8 wgmma (m64nNk32) reads both operands K-major, 32 bytes (k) per instruction:
//!
//! * `S = Q K^T` is as for 16-bit inputs, in bytes: Q and K are stored in slabs of
//!   `min(D, 128)` one-byte columns, rows of 64 or 128 bytes with the swizzle of that span
//!   (what the TMA boxes write), and each k-step moves 32 bytes along a row.
//! * `O += P V` needs V with the keys contiguous: the producer warpgroup's transposing warps
//!   ([`super::transpose`]) write each V stage as `DV` rows of `BN` keys (rows of `BN` bytes,
//!   swizzled by that span) into a ring of its own.
//! * P comes from registers. An m64n8 accumulator gives a thread columns `2t, 2t + 1` (of
//!   each 8), while the 8-bit A fragment wants columns `4t .. 4t + 4` (of each 16): rather than
//!   exchanging values between threads, each thread packs its own scores in place
//!   (`[0, 1, 4, 5]`, `[2, 3, 6, 7]`, ...) and the transpose stores V's keys in the same order,
//!   so that the sum over keys pairs every P with its V row. Within each 32 keys, position
//!   `16 h + 4 t + m` holds key `16 h + 8 (m / 2) + 2 t + m % 2`.
//! * P (at most 1) is rounded as `P * 2^8` (`P_LOG2`): E4M3's normal range starts at 2^-6,
//!   below which values keep ever fewer bits, so unscaled probabilities under 1/64 would lose
//!   most of theirs. The factor is a term of the softmax's exponent, and the row sums carry it
//!   too, so that it cancels in `O / sum` ([`super::softmax::OnlineSoftmax`]).
use super::gemm::{Operands, fence_pv, opaque, same};
use crate::arch::cvt::cvt_rn_satfinite_e4m3x4_f32;
use crate::arch::wgmma::*;
use crate::dtype::E4m3;

pub use flashrs_abi::sm90::slab_row;

/// Swizzle of rows of `row` bytes (64 or 128).
#[inline(always)]
const fn swizzle(row: usize) -> Swizzle {
    if row == 128 { Swizzle::B128 } else { Swizzle::B64 }
}

/// K-major descriptor of a tile with rows of `row` bytes in its swizzle (8-row groups `8 row`
/// bytes apart); `addr` steps 32 bytes per k-step within a row.
#[inline(always)]
pub fn k_major(addr: u32, row: usize) -> SmemDesc {
    SmemDesc::new(addr, 16, (8 * row) as u32, swizzle(row))
}

/// Byte offset `off` of a tile with rows of `row` bytes (64 or 128), swizzled as TMA and the
/// descriptors place it: the 16-byte chunk index XORed with the row's phase (bits 7 and up).
#[inline(always)]
pub const fn swizzled(off: u32, row: usize) -> u32 {
    off ^ ((off >> 3) & (((row / 16) - 1) << 4) as u32)
}

impl Operands for E4m3 {
    const BYTES: usize = 1;
    const P_LOG2: u32 = 8;

    #[inline(always)]
    unsafe fn qk<const D: usize, const BM: usize, const BN: usize, const SN: usize>(s: &mut [f32; SN], q: u32, k: u32) {
        const { assert!(SN == BN / 2 && D % 64 == 0 && (SN == 32 || SN == 64)) };
        let row = slab_row(D);
        let q = opaque(q);
        wgmma_fence_operands(s);
        wgmma_fence();
        for ks in 0..D / 32 {
            let (slab, step) = ((32 * ks) / row, (32 * ks) % row);
            let da = k_major(q + (slab * BM * row + step) as u32, row);
            let db = k_major(k + (slab * BN * row + step) as u32, row);
            unsafe {
                if SN == 32 {
                    wgmma_mma_async_m64n64k32_f32_e4m3(same(s), da, db, ks != 0)
                } else {
                    wgmma_mma_async_m64n128k32_f32_e4m3(same(s), da, db, ks != 0)
                }
            }
        }
        wgmma_commit_group();
    }

    #[inline(always)]
    fn pack_p<const SN: usize, const KP: usize>(s: &[f32; SN]) -> [FragA; KP] {
        const { assert!(KP * 16 == SN) };
        let mut a = [[0u32; 4]; KP];
        for kk in 0..KP {
            let x = |i: usize| s[16 * kk + i];
            a[kk] = [
                cvt_rn_satfinite_e4m3x4_f32(x(0), x(1), x(4), x(5)),
                cvt_rn_satfinite_e4m3x4_f32(x(2), x(3), x(6), x(7)),
                cvt_rn_satfinite_e4m3x4_f32(x(8), x(9), x(12), x(13)),
                cvt_rn_satfinite_e4m3x4_f32(x(10), x(11), x(14), x(15)),
            ];
        }
        a
    }

    #[inline(always)]
    unsafe fn pv<const DV: usize, const BN: usize, const ON: usize, const KP: usize>(o: &mut [f32; ON], p: &mut [FragA; KP], v: u32) {
        const { assert!(ON == DV / 2 && KP == BN / 32 && (BN == 64 || BN == 128) && (ON == 32 || ON == 64 || ON == 128)) };
        let v = opaque(v);
        fence_pv(o, p);
        for kk in 0..KP {
            let b = k_major(v + (32 * kk) as u32, BN);
            unsafe {
                match ON {
                    32 => wgmma_mma_async_m64n64k32_f32_e4m3_rs(same(o), &p[kk], b, true),
                    64 => wgmma_mma_async_m64n128k32_f32_e4m3_rs(same(o), &p[kk], b, true),
                    _ => wgmma_mma_async_m64n256k32_f32_e4m3_rs(same(o), &p[kk], b, true),
                }
            }
        }
        wgmma_commit_group();
    }
}
