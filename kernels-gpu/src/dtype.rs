//! 16-bit element types the tensor cores take, as marker types: kernels are generic over them;
//! and the element types of K/V caches, which may be 8-bit ([`KvElement`]).
use crate::arch::cvt::{cvt_f32x2_f16x2, cvt_rn_bf16x2_f32, cvt_rn_f16x2_f32};
use crate::arch::fma::{fma_rn_bf16x2, mul_rn_f16x2};
use crate::arch::prmt::prmt;
use crate::arch::set::set_ge_u32_f16x2;
use flashrs_abi::Fp8;
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
    /// Mantissa bits.
    const MANTISSA: u32;
    /// Exponent bias.
    const BIAS: i32;
    /// Both halves of a packed pair times `2^POW`, for products it holds exactly (the FP8
    /// widening's rescale).
    fn scale_pow2<const POW: i32>(v: u32) -> u32;
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
    const MANTISSA: u32 = 10;
    const BIAS: i32 = 15;
    #[inline(always)]
    fn scale_pow2<const POW: i32>(v: u32) -> u32 {
        let two = ((Self::BIAS + POW) as u32) << Self::MANTISSA;
        mul_rn_f16x2(v, two | two << 16)
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
    const MANTISSA: u32 = 7;
    const BIAS: i32 = 127;
    #[inline(always)]
    fn scale_pow2<const POW: i32>(v: u32) -> u32 {
        let two = ((Self::BIAS + POW) as u32) << Self::MANTISSA;
        // Plus -0: a zero keeps its sign.
        fma_rn_bf16x2(v, two | two << 16, 0x8000_8000)
    }
}

/// Two FP8 values of `MANTISSA` mantissa bits and exponent bias `BIAS`, the bytes of `x` that
/// `sel` places in the high bytes of a packed pair's halves ([`prmt`], the low bytes zero), as a
/// packed pair of `T`: sign, exponent and mantissa moved into `T`'s places give the value times
/// `2^(BIAS - T::BIAS)` (subnormals included), which one exact multiply brings back; the
/// patterns at or past `SPECIAL` in exponent and mantissa (E5M2's infinities and NaNs, whose
/// exponent field is all ones, and E4M3's `S.1111.111` NaN) get `T`'s all-ones exponent instead.
/// Seven instructions a pair: the GEMMs widen every K and V element they read, so this is most
/// of what an FP8 cache adds to the 16-bit kernels' work.
#[inline(always)]
fn widen_fp8x2<T: Element, const MANTISSA: u32, const BIAS: i32, const SPECIAL: u32>(x: u32, sel: u32) -> u32 {
    let w = prmt(x, 0, sel);
    // Exponent and mantissa in `T`'s places; the shift leaves a copy of the sign above them,
    // which the mask drops (and brings in the other half's zero low byte from above).
    let up = T::MANTISSA - MANTISSA;
    let em = (w >> (8 - up)) & (0x7f << up) * 0x1_0001;
    let bits = (w & 0x8000_8000) | em;
    let v = match T::BIAS - BIAS {
        8 => T::scale_pow2::<8>(bits),
        112 => T::scale_pow2::<112>(bits),
        120 => T::scale_pow2::<120>(bits),
        _ => unreachable!(),
    };
    // `em` holds no sign and lies far below f16's infinities in either type's places, so as f16
    // patterns it compares in the order of its integers.
    let special = set_ge_u32_f16x2(em, (SPECIAL << up) * 0x1_0001);
    let exponent = ((1u32 << (15 - T::MANTISSA)) - 1) << T::MANTISSA;
    v | (special & exponent * 0x1_0001)
}

/// The element type of K and V: the queries' own ([`Same`]), or an 8-bit float ([`E4m3`],
/// [`E5m2`]) that the kernels copy into shared memory as it is stored and widen in registers,
/// as the GEMMs read it, to the queries' type (see [`crate::fwd::mainloop::gemm_qk_fp8`]).
/// Every value of either FP8 format is an f16 and a bf16, so widening is exact, and the
/// dequantization factors apply to scores and outputs instead ([`flashrs_abi::Descales`]).
pub trait KvElement: Copy {
    /// Its identity in the ABI (entry names, kernel markers).
    const KV: Option<Fp8>;
    /// log2 of its elements per 16-bit unit: cursors address FP8 rows as rows of half as many
    /// 16-bit units, with strides and widths shifted right by this.
    const SHR: u32;
    /// Two elements of `x`, the bytes that the [`prmt`] selector `sel` places in the high bytes
    /// of a packed pair's halves (the low bytes zero), as a packed pair of `T`.
    fn widen2<T: Element>(x: u32, sel: u32) -> u32;

    /// The four elements of `x` (first in the low byte) as two pairs of `T`: bytes 0 and 1,
    /// then bytes 2 and 3.
    #[inline(always)]
    fn widen_halves<T: Element>(x: u32) -> [u32; 2] {
        [Self::widen2::<T>(x, 0x1404), Self::widen2::<T>(x, 0x3424)]
    }

    /// The four elements of `x` as two pairs of `T`: bytes 0 and 2, then bytes 1 and 3.
    #[inline(always)]
    fn widen_interleaved<T: Element>(x: u32) -> [u32; 2] {
        [Self::widen2::<T>(x, 0x2404), Self::widen2::<T>(x, 0x3414)]
    }
}

/// K and V of the queries' type.
#[derive(Clone, Copy)]
pub struct Same;
/// FP8 E4M3 (4 exponent bits, bias 7; no infinities, `S.1111.111` is NaN).
#[derive(Clone, Copy)]
pub struct E4m3;
/// FP8 E5M2 (an f16's upper byte).
#[derive(Clone, Copy)]
pub struct E5m2;

impl KvElement for Same {
    const KV: Option<Fp8> = None;
    const SHR: u32 = 0;
    #[inline(always)]
    fn widen2<T: Element>(_: u32, _: u32) -> u32 {
        unreachable!()
    }
}

impl KvElement for E4m3 {
    const KV: Option<Fp8> = Some(Fp8::E4m3);
    const SHR: u32 = 1;
    #[inline(always)]
    fn widen2<T: Element>(x: u32, sel: u32) -> u32 {
        widen_fp8x2::<T, 3, 7, 0x7f>(x, sel)
    }
}

impl KvElement for E5m2 {
    const KV: Option<Fp8> = Some(Fp8::E5m2);
    const SHR: u32 = 1;
    #[inline(always)]
    fn widen2<T: Element>(x: u32, sel: u32) -> u32 {
        // An f16's upper byte: f16 queries take it as it is.
        if T::MANTISSA == 10 { prmt(x, 0, sel) } else { widen_fp8x2::<T, 2, 15, 0x7c>(x, sel) }
    }
}
