//! 16-bit element types the tensor cores take, as marker types: kernels are generic over them.
use crate::arch::cvt::{cvt_f32x2_f16x2, cvt_rn_bf16x2_f32, cvt_rn_f16x2_f32};
use crate::arch::mma::{FragA, FragB, FragC, mma_m16n8k16_f32_bf16, mma_m16n8k16_f32_f16};

/// A 16-bit floating-point element: how to multiply it on the tensor cores and how to round
/// f32 results back into it.
pub trait Element: Copy {
    /// Its identity in the ABI (entry names, kernel markers).
    const DTYPE: flashrs_abi::DType;
    /// `mma.sync` m16n8k16 with f32 accumulation on this element type.
    fn mma_m16n8k16(c: &mut FragC, a: &FragA, b: &FragB);
    /// Packs two f32 into one register of two elements (`lo` first in memory).
    fn pack2(lo: f32, hi: f32) -> u32;
    /// The two elements of a packed pair, as f32 (exact).
    fn unpack2(v: u32) -> [f32; 2];
}

/// IEEE binary16.
#[derive(Clone, Copy)]
pub struct F16;
/// bfloat16.
#[derive(Clone, Copy)]
pub struct Bf16;

impl Element for F16 {
    const DTYPE: flashrs_abi::DType = flashrs_abi::DType::F16;
    #[inline(always)]
    fn mma_m16n8k16(c: &mut FragC, a: &FragA, b: &FragB) {
        mma_m16n8k16_f32_f16(c, a, b)
    }
    #[inline(always)]
    fn pack2(lo: f32, hi: f32) -> u32 {
        cvt_rn_f16x2_f32(lo, hi)
    }
    #[inline(always)]
    fn unpack2(v: u32) -> [f32; 2] {
        cvt_f32x2_f16x2(v)
    }
}

impl Element for Bf16 {
    const DTYPE: flashrs_abi::DType = flashrs_abi::DType::Bf16;
    #[inline(always)]
    fn mma_m16n8k16(c: &mut FragC, a: &FragA, b: &FragB) {
        mma_m16n8k16_f32_bf16(c, a, b)
    }
    #[inline(always)]
    fn pack2(lo: f32, hi: f32) -> u32 {
        cvt_rn_bf16x2_f32(lo, hi)
    }
    #[inline(always)]
    fn unpack2(v: u32) -> [f32; 2] {
        // A bf16 is the high half of the f32 it widens to.
        [f32::from_bits(v << 16), f32::from_bits(v & 0xffff_0000)]
    }
}
