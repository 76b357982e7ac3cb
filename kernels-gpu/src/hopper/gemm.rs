//! The consumer warpgroup's two GEMMs on `wgmma`:
//!
//! * `S = Q K^T`: m64 x BN x D, A (Q, this warpgroup's 64 rows) and B (K) from shared memory,
//!   both K-major (head_dim contiguous), 128B-swizzled: `D / 16` wgmmas, descriptors stepping
//!   32 bytes along a slab row and jumping to the next slab every 4 steps.
//! * `O += P V`: m64 x D x BN, A (P) from registers, B (V) from shared memory MN-major
//!   (`imm-trans-b = 1`): `BN / 16` wgmmas, each reading 16 keys (two 8-row atoms, 2048 bytes)
//!   across all `D / 64` slabs (LBO = one slab).
//!
//! The backward adds `A B^T` with B some rows of a taller tile ([`gemm_abt`]), `A B` with both
//! MN-major ([`gemm_tt_n64`]), and `A B` with A K-major from shared memory ([`gemm_ss_tb_n128`]).
//!
//! Issue and wait are separate so that callers can overlap other work with the tensor cores:
//! each `gemm_*` commits one wgmma group; [`wait`] then waits. The forward kernel reaches its
//! two GEMMs through [`Operands`], implemented here for the 16-bit types and in [`super::fp8`]
//! for E4M3 inputs.
use crate::arch::wgmma::*;
use crate::arch::wgmma_mn::*;
use crate::dtype::{Bf16, Element, F16};

/// A 16-bit element type with wgmma forms for every N the kernels use.
pub trait WgElement: Element {
    /// SS, K-major A and B, N = 32.
    unsafe fn ss_n32(d: &mut AccN32, a: SmemDesc, b: SmemDesc, scale_d: bool);
    /// SS, K-major A and B, N = 64.
    unsafe fn ss_n64(d: &mut AccN64, a: SmemDesc, b: SmemDesc, scale_d: bool);
    /// SS, K-major A and B, N = 128.
    unsafe fn ss_n128(d: &mut AccN128, a: SmemDesc, b: SmemDesc, scale_d: bool);
    /// SS, K-major A and B, N = 256.
    unsafe fn ss_n256(d: &mut AccN256, a: SmemDesc, b: SmemDesc, scale_d: bool);
    /// RS, N-major B, N = 64.
    unsafe fn rs_tb_n64(d: &mut AccN64, a: &FragA, b: SmemDesc, scale_d: bool);
    /// RS, N-major B, N = 128.
    unsafe fn rs_tb_n128(d: &mut AccN128, a: &FragA, b: SmemDesc, scale_d: bool);
    /// RS, N-major B, N = 256.
    unsafe fn rs_tb_n256(d: &mut AccN256, a: &FragA, b: SmemDesc, scale_d: bool);
    /// SS, MN-major A and B, N = 64.
    unsafe fn ss_tt_n64(d: &mut AccN64, a: SmemDesc, b: SmemDesc, scale_d: bool);
    /// SS, K-major A, N-major B, N = 128.
    unsafe fn ss_tb_n128(d: &mut AccN128, a: SmemDesc, b: SmemDesc, scale_d: bool);
}

macro_rules! wg_element {
    ($t:ty, $ss32:ident, $ss64:ident, $ss128:ident, $ss256:ident, $rs64:ident, $rs128:ident, $rs256:ident, $tt64:ident,
     $stb128:ident) => {
        impl WgElement for $t {
            #[inline(always)]
            unsafe fn ss_n32(d: &mut AccN32, a: SmemDesc, b: SmemDesc, s: bool) {
                unsafe { $ss32(d, a, b, s) }
            }
            #[inline(always)]
            unsafe fn ss_n64(d: &mut AccN64, a: SmemDesc, b: SmemDesc, s: bool) {
                unsafe { $ss64(d, a, b, s) }
            }
            #[inline(always)]
            unsafe fn ss_n128(d: &mut AccN128, a: SmemDesc, b: SmemDesc, s: bool) {
                unsafe { $ss128(d, a, b, s) }
            }
            #[inline(always)]
            unsafe fn ss_n256(d: &mut AccN256, a: SmemDesc, b: SmemDesc, s: bool) {
                unsafe { $ss256(d, a, b, s) }
            }
            #[inline(always)]
            unsafe fn rs_tb_n64(d: &mut AccN64, a: &FragA, b: SmemDesc, s: bool) {
                unsafe { $rs64(d, a, b, s) }
            }
            #[inline(always)]
            unsafe fn rs_tb_n128(d: &mut AccN128, a: &FragA, b: SmemDesc, s: bool) {
                unsafe { $rs128(d, a, b, s) }
            }
            #[inline(always)]
            unsafe fn rs_tb_n256(d: &mut AccN256, a: &FragA, b: SmemDesc, s: bool) {
                unsafe { $rs256(d, a, b, s) }
            }
            #[inline(always)]
            unsafe fn ss_tt_n64(d: &mut AccN64, a: SmemDesc, b: SmemDesc, s: bool) {
                unsafe { $tt64(d, a, b, s) }
            }
            #[inline(always)]
            unsafe fn ss_tb_n128(d: &mut AccN128, a: SmemDesc, b: SmemDesc, s: bool) {
                unsafe { $stb128(d, a, b, s) }
            }
        }
    };
}

wg_element!(F16,
    wgmma_mma_async_m64n32k16_f32_f16, wgmma_mma_async_m64n64k16_f32_f16, wgmma_mma_async_m64n128k16_f32_f16, wgmma_mma_async_m64n256k16_f32_f16,
    wgmma_mma_async_m64n64k16_f32_f16_rs_tb, wgmma_mma_async_m64n128k16_f32_f16_rs_tb,
    wgmma_mma_async_m64n256k16_f32_f16_rs_tb, wgmma_mma_async_m64n64k16_f32_f16_ss_tt,
    wgmma_mma_async_m64n128k16_f32_f16_ss_tb);
wg_element!(Bf16,
    wgmma_mma_async_m64n32k16_f32_bf16, wgmma_mma_async_m64n64k16_f32_bf16, wgmma_mma_async_m64n128k16_f32_bf16, wgmma_mma_async_m64n256k16_f32_bf16,
    wgmma_mma_async_m64n64k16_f32_bf16_rs_tb, wgmma_mma_async_m64n128k16_f32_bf16_rs_tb,
    wgmma_mma_async_m64n256k16_f32_bf16_rs_tb, wgmma_mma_async_m64n64k16_f32_bf16_ss_tt,
    wgmma_mma_async_m64n128k16_f32_bf16_ss_tb);

/// The forward's two GEMMs and P's rounding for one input element type: the 16-bit ones
/// (below, on [`WgElement`]) or FP8 ([`super::fp8`]). `q`, `k` and `v` are the Q rows, K stage
/// and P V operand in shared memory ([`super::smem::Smem::q_rows`], [`super::smem::Smem::pv`]).
pub trait Operands {
    /// Bytes per element.
    const BYTES: usize;
    /// `log2` of the factor probabilities are computed at before they are rounded for `P V`
    /// (see [`super::softmax::OnlineSoftmax`]): 0 for 16-bit inputs.
    const P_LOG2: u32 = 0;
    /// Issues `S = Q K^T` (one committed group; `s`'s previous contents are ignored).
    unsafe fn qk<const D: usize, const BM: usize, const BN: usize, const SN: usize>(s: &mut [f32; SN], q: u32, k: u32);
    /// Rounds probabilities to the A fragments of `O += P V`.
    fn pack_p<const SN: usize, const KP: usize>(s: &[f32; SN]) -> [FragA; KP];
    /// Issues `O += P V` (one committed group); `p` must stay unchanged until it has been
    /// waited for.
    unsafe fn pv<const DV: usize, const BN: usize, const ON: usize, const KP: usize>(o: &mut [f32; ON], p: &mut [FragA; KP], v: u32);
}

impl<T: WgElement> Operands for T {
    const BYTES: usize = 2;
    #[inline(always)]
    unsafe fn qk<const D: usize, const BM: usize, const BN: usize, const SN: usize>(s: &mut [f32; SN], q: u32, k: u32) {
        unsafe { gemm_qk::<T, D, BM, BN, SN>(s, q, k) }
    }
    #[inline(always)]
    fn pack_p<const SN: usize, const KP: usize>(s: &[f32; SN]) -> [FragA; KP] {
        pack_p::<T, SN, KP>(s)
    }
    #[inline(always)]
    unsafe fn pv<const DV: usize, const BN: usize, const ON: usize, const KP: usize>(o: &mut [f32; ON], p: &mut [FragA; KP], v: u32) {
        unsafe { gemm_pv::<T, DV, BN, ON, KP>(o, p, v) }
    }
}

/// `acc` viewed as an array of `M` elements; only called where `N == M`.
#[inline(always)]
pub(crate) unsafe fn same<const N: usize, const M: usize>(acc: &mut [f32; N]) -> &mut [f32; M] {
    unsafe { &mut *(acc as *mut [f32; N] as *mut [f32; M]) }
}

/// One SS wgmma with an accumulator of `NH = N / 2` registers.
#[inline(always)]
unsafe fn ss<T: WgElement, const NH: usize>(d: &mut [f32; NH], a: SmemDesc, b: SmemDesc, scale_d: bool) {
    const { assert!(NH == 16 || NH == 32 || NH == 64 || NH == 128) };
    unsafe {
        match NH {
            16 => T::ss_n32(same(d), a, b, scale_d),
            32 => T::ss_n64(same(d), a, b, scale_d),
            64 => T::ss_n128(same(d), a, b, scale_d),
            _ => T::ss_n256(same(d), a, b, scale_d),
        }
    }
}

/// One RS wgmma (N-major B) with an accumulator of `NH = N / 2` registers.
#[inline(always)]
unsafe fn rs_tb<T: WgElement, const NH: usize>(d: &mut [f32; NH], a: &FragA, b: SmemDesc, scale_d: bool) {
    const { assert!(NH == 32 || NH == 64 || NH == 128) };
    unsafe {
        match NH {
            32 => T::rs_tb_n64(same(d), a, b, scale_d),
            64 => T::rs_tb_n128(same(d), a, b, scale_d),
            _ => T::rs_tb_n256(same(d), a, b, scale_d),
        }
    }
}

/// Issues `S = Q K^T` (one committed group). `q` is this warpgroup's first Q row in slab 0
/// (the Q tile plus `64 * warpgroup * 128` bytes; slabs are `BM * 128` bytes apart), `k` the
/// K stage. `s`'s previous contents are ignored.
#[inline(always)]
pub unsafe fn gemm_qk<T: WgElement, const D: usize, const BM: usize, const BN: usize, const SN: usize>(
    s: &mut [f32; SN],
    q: u32,
    k: u32,
) {
    const { assert!(SN == BN / 2) };
    unsafe { gemm_abt::<T, D, BM, BN, SN>(s, q, k) }
}

/// Issues `D = A B^T` (one committed group) for an m64 x `2 SN` f32 `d` with A and B K-major
/// along `D` columns in 128B-swizzled slabs: A's 64 rows from `a` (its slabs `A_ROWS * 128`
/// bytes apart), B's `2 SN` rows from `b` (slabs `B_ROWS * 128` bytes apart, so that B may be
/// some rows of a taller tile). `d`'s previous contents are ignored.
#[inline(always)]
pub unsafe fn gemm_abt<T: WgElement, const D: usize, const A_ROWS: usize, const B_ROWS: usize, const SN: usize>(
    d: &mut [f32; SN],
    a: u32,
    b: u32,
) {
    const { assert!(2 * SN <= B_ROWS && D % 64 == 0) };
    // Opaque, so LLVM builds A's descriptors here instead of hoisting all `D / 16` of them
    // (64-bit each) out of every loop into registers the consumers are short of.
    let a = opaque(a);
    // Pins `d` before the fence: nothing may write its registers between fence and wgmma.
    wgmma_fence_operands(d);
    wgmma_fence();
    for ks in 0..D / 16 {
        let step = ((ks % 4) * 32) as u32;
        let da = SmemDesc::k_major_sw128(a + ((ks / 4) * A_ROWS * 128) as u32 + step);
        let db = SmemDesc::k_major_sw128(b + ((ks / 4) * B_ROWS * 128) as u32 + step);
        unsafe { ss::<T, SN>(d, da, db, ks != 0) };
    }
    wgmma_commit_group();
}

/// `v`, hidden from the optimiser: what is computed from it cannot be hoisted above this point
/// (see [`gemm_abt`]), and a loop bound it hides is not unrolled.
#[inline(always)]
pub fn opaque(mut v: u32) -> u32 {
    unsafe { core::arch::asm!("// opaque {0}", inout(reg32) v, options(nomem, nostack)) };
    v
}

/// Rounds probabilities to `T` as the A fragments of `O += P V`: the accumulator registers
/// `s[8kk .. 8kk + 8]` (columns `16kk .. 16kk + 16`) are exactly k-step `kk`'s fragment.
#[inline(always)]
pub fn pack_p<T: Element, const SN: usize, const KP: usize>(s: &[f32; SN]) -> [FragA; KP] {
    const { assert!(KP * 8 == SN) };
    let mut a = [[0u32; 4]; KP];
    for kk in 0..KP {
        for r in 0..4 {
            a[kk][r] = T::pack2(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
        }
    }
    a
}

/// Issues `O += P V` (one committed group). `v` is the V stage (`BN` rows per slab). `p` must
/// stay unchanged until the group has been waited for.
#[inline(always)]
pub unsafe fn gemm_pv<T: WgElement, const D: usize, const BN: usize, const ON: usize, const KP: usize>(
    o: &mut [f32; ON],
    p: &mut [FragA; KP],
    v: u32,
) {
    const { assert!(ON == D / 2 && KP == BN / 16) };
    let v = opaque(v);
    fence_pv(o, p);
    for kk in 0..KP {
        // 16 keys = two 8-row atoms (SBO 1024); the next 64 columns one slab further (LBO).
        let b = SmemDesc::new(v + (kk * 2048) as u32, (BN * 128) as u32, 1024, Swizzle::B128);
        unsafe { rs_tb::<T, ON>(o, &p[kk], b, true) };
    }
    wgmma_commit_group();
}

/// Pins P's fragments and O before the wgmmas of `O += P V` (see [`wgmma_fence`]).
#[inline(always)]
pub(crate) fn fence_pv<const ON: usize, const KP: usize>(o: &mut [f32; ON], p: &mut [FragA; KP]) {
    for f in p.iter_mut() {
        wgmma_fence_frag(f);
    }
    wgmma_fence_operands(o);
    wgmma_fence();
}

/// Issues `D += A B` (one committed group) for a 64 x 128 f32 `d` with A from shared memory
/// K-major (one 128B-swizzled slab of 64 rows at `a`, `K16` k-steps of 16 columns) and B
/// N-major like [`gemm_pv`]'s V (`B_ROWS` rows per 64-column slab from `b`). The head-dim-256
/// backward's `dV += P^T dO` and `dK += dS^T Q`, P^T and dS^T in shared memory.
#[inline(always)]
pub unsafe fn gemm_ss_tb_n128<T: WgElement, const B_ROWS: usize, const K16: usize>(d: &mut AccN128, a: u32, b: u32) {
    const { assert!(K16 <= 4) };
    let (a, b) = (opaque(a), opaque(b));
    wgmma_fence_operands(d);
    wgmma_fence();
    for kk in 0..K16 {
        let da = SmemDesc::k_major_sw128(a + (kk * 32) as u32);
        let db = SmemDesc::new(b + (kk * 2048) as u32, (B_ROWS * 128) as u32, 1024, Swizzle::B128);
        unsafe { T::ss_tb_n128(d, da, db, true) };
    }
    wgmma_commit_group();
}

/// Issues `D = A B` for a 64 x 64 f32 `d` (one committed group) with both operands MN-major in
/// 128B-swizzled shared memory, `K16` k-steps of 16: A's 64 rows (M) contiguous along each of
/// its K rows from `a` (one 64-column slab, 16 K rows = 2048 bytes per step), B's 64 columns
/// (N) likewise from `b` (its slab). The backward's `dQ = dS K`, with dS stored as `dS^T`
/// (keys x queries) and K as keys x head_dim.
#[inline(always)]
pub unsafe fn gemm_tt_n64<T: WgElement, const K16: usize>(d: &mut AccN64, a: u32, b: u32) {
    let (a, b) = (opaque(a), opaque(b));
    wgmma_fence_operands(d);
    wgmma_fence();
    for kk in 0..K16 {
        // One 8-row atom per 1024 bytes along K (SBO); M and N fit one slab (LBO unused).
        let step = (kk * 2048) as u32;
        let da = SmemDesc::new(a + step, 8192, 1024, Swizzle::B128);
        let db = SmemDesc::new(b + step, 8192, 1024, Swizzle::B128);
        unsafe { T::ss_tt_n64(d, da, db, kk != 0) };
    }
    wgmma_commit_group();
}

/// Waits until at most `N` committed wgmma groups are pending, then pins `acc` (so reads of it
/// stay below the wait).
#[inline(always)]
pub fn wait<const N: u32, const K: usize>(acc: &mut [f32; K]) {
    wgmma_wait_group::<N>();
    wgmma_fence_operands(acc);
}
