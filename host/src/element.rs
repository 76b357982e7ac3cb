//! The element types of Q, K, V and the output, on the host: 16-bit ones ([`Element`]), and
//! 8-bit floats for K/V caches ([`E4m3`], [`E5m2`], through [`KvElement`]).
pub use flashrs_abi::{DType, Fp8};

/// A 16-bit element type the kernels take: `f16` and `bf16` of the `half` crate, version 1 (the
/// one cust 0.3 implements `DeviceCopy` for) with the `cust` feature and version 2 (cudarc's)
/// with the `cudarc` feature.
///
/// Sealed: the kernels exist for these types only.
pub trait Element: Copy + Default + Send + Sync + 'static + sealed::Sealed {
    /// Its [`DType`].
    const DTYPE: DType;
    /// Rounds an f32 to this type.
    fn from_f32(v: f32) -> Self;
    /// Widens to f32.
    fn to_f32(self) -> f32;
}

mod sealed {
    pub trait Sealed {}
}

/// `Element` for the `f16` and `bf16` of one version of the `half` crate.
macro_rules! elements {
    ($half:ident) => {
        impl sealed::Sealed for $half::f16 {}
        impl Element for $half::f16 {
            const DTYPE: DType = DType::F16;
            fn from_f32(v: f32) -> Self {
                $half::f16::from_f32(v)
            }
            fn to_f32(self) -> f32 {
                $half::f16::to_f32(self)
            }
        }
        impl sealed::Sealed for $half::bf16 {}
        impl Element for $half::bf16 {
            const DTYPE: DType = DType::Bf16;
            fn from_f32(v: f32) -> Self {
                $half::bf16::from_f32(v)
            }
            fn to_f32(self) -> f32 {
                $half::bf16::to_f32(self)
            }
        }
    };
}

#[cfg(feature = "cust")]
elements!(half);
#[cfg(feature = "cudarc")]
elements!(half2);

/// The element type of K and V for queries of type `T`: `T` itself, or an 8-bit float
/// ([`E4m3`], [`E5m2`]) whose dequantization factors come with the call
/// ([`crate::AttentionParamsBuilder::kv_descale`]).
///
/// Sealed: the kernels exist for these types only.
pub trait KvElement<T: Element>: Copy + Send + Sync + 'static + sealed::Sealed {
    /// The 8-bit format, or `None` for `T`'s.
    const FP8: Option<Fp8>;
}

impl<T: Element> KvElement<T> for T {
    const FP8: Option<Fp8> = None;
}

/// The element type of Q for output type `T` and K/V type `C`: `T` itself, or [`E4m3`] with
/// K and V of [`E4m3`] too: FP8 attention on sm_90a's FP8 tensor cores, dequantized by the
/// call's [`crate::AttentionParamsBuilder::q_descale`] and
/// [`crate::AttentionParamsBuilder::kv_descale`], its output of type `T`.
///
/// Sealed: the kernels exist for these combinations only.
pub trait QueryElement<T: Element, C: KvElement<T>>: Copy + Send + Sync + 'static + sealed::Sealed {
    /// The 8-bit format, or `None` for `T`'s.
    const FP8: Option<Fp8>;
}

impl<T: Element, C: KvElement<T>> QueryElement<T, C> for T {
    const FP8: Option<Fp8> = None;
}

impl<T: Element> QueryElement<T, E4m3> for E4m3 {
    const FP8: Option<Fp8> = Some(Fp8::E4m3);
}

/// Bits of an FP8 value as stored, and its value (exact, in f32).
macro_rules! fp8 {
    ($name:ident, $fmt:expr, $doc:literal) => {
        #[doc = $doc]
        #[repr(transparent)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        pub struct $name(pub u8);

        impl sealed::Sealed for $name {}
        impl<T: Element> KvElement<T> for $name {
            const FP8: Option<Fp8> = Some($fmt);
        }

        impl $name {
            /// The value these bits hold (exact).
            pub fn to_f32(self) -> f32 {
                fp8_to_f32($fmt, self.0)
            }
            /// `v` rounded to the nearest value of this format (ties to even); see
            /// [`fp8_from_f32`] for values past its range.
            pub fn from_f32(v: f32) -> Self {
                $name(fp8_from_f32($fmt, v))
            }
        }

        impl From<u8> for $name {
            fn from(bits: u8) -> Self {
                $name(bits)
            }
        }

        impl From<$name> for u8 {
            fn from(x: $name) -> u8 {
                x.0
            }
        }

        #[cfg(feature = "cust")]
        // SAFETY: one plain byte.
        unsafe impl cust::memory::DeviceCopy for $name {}
        #[cfg(feature = "cudarc")]
        // SAFETY: one plain byte.
        unsafe impl cudarc::driver::DeviceRepr for $name {}
        #[cfg(feature = "cudarc")]
        // SAFETY: zero bits are the value +0.
        unsafe impl cudarc::driver::ValidAsZeroBits for $name {}
    };
}

fp8!(E4m3, Fp8::E4m3, "An FP8 E4M3 element (4 exponent bits with bias 7, 3 mantissa bits, no infinities; `S.1111.111` is NaN; largest finite 448), as `torch.float8_e4m3fn`.");
fp8!(E5m2, Fp8::E5m2, "An FP8 E5M2 element (5 exponent bits with bias 15, 2 mantissa bits: an IEEE binary16's upper byte), as `torch.float8_e5m2`.");

/// Exponent bias, mantissa bits and largest finite value of a format.
const fn format(f: Fp8) -> (i32, u32, f32) {
    match f {
        Fp8::E4m3 => (7, 3, 448.0),
        Fp8::E5m2 => (15, 2, 57344.0),
    }
}

/// The value of FP8 bits `b` in format `f` (exact in f32).
pub fn fp8_to_f32(f: Fp8, b: u8) -> f32 {
    let (bias, mbits, _) = format(f);
    let sign = if b & 0x80 != 0 { -1.0f32 } else { 1.0 };
    let e = ((b & 0x7f) >> mbits) as i32;
    let m = (b & ((1 << mbits) - 1)) as i32;
    let emax = (1 << (7 - mbits)) - 1;
    match f {
        Fp8::E4m3 if b & 0x7f == 0x7f => f32::NAN,
        Fp8::E5m2 if e == emax && m != 0 => f32::NAN,
        Fp8::E5m2 if e == emax => sign * f32::INFINITY,
        _ if e == 0 => sign * m as f32 * 2f32.powi(1 - bias - mbits as i32),
        _ => sign * (1.0 + m as f32 / (1 << mbits) as f32) * 2f32.powi(e - bias),
    }
}

/// `v` in FP8 format `f`, rounded to nearest with ties to even. Past the largest finite value,
/// E4M3 saturates to ±448 (it has no infinity; the NaN pattern is not a number to round to),
/// E5M2 rounds to ±infinity as binary16 does; NaN stays NaN.
pub fn fp8_from_f32(f: Fp8, v: f32) -> u8 {
    let (bias, mbits, max) = format(f);
    let sign = if v.is_sign_negative() { 0x80u8 } else { 0 };
    if v.is_nan() {
        return sign | 0x7f;
    }
    let a = v.abs();
    let overflow = match f {
        Fp8::E4m3 => sign | 0x7e,
        Fp8::E5m2 => sign | 0x7c,
    };
    if a >= 2.0 * max {
        return overflow;
    }
    // The grid spacing at `a`: that of its binade, or the subnormals' below the normals.
    let min_normal = 2f32.powi(1 - bias);
    let e = if a < min_normal { 1 - bias } else { a.log2().floor() as i32 };
    // `a` is within a binade where the spacing is exact in f32; adjust a log2 off by one.
    let e = if a >= min_normal && 2f32.powi(e + 1) <= a { e + 1 } else if a >= min_normal && 2f32.powi(e) > a { e - 1 } else { e };
    let ulp = 2f32.powi(e - mbits as i32);
    let q = a / ulp; // exact: a power-of-two division
    let r = q.round_ties_even() * ulp;
    if r > max {
        return overflow;
    }
    // Encode the rounded value (a grid point of the format, maybe the next binade's first).
    if r < min_normal {
        return sign | (r / 2f32.powi(1 - bias - mbits as i32)) as u8;
    }
    let e = r.log2().floor() as i32;
    let m = (r / 2f32.powi(e) - 1.0) * (1 << mbits) as f32;
    sign | (((e + bias) as u8) << mbits) | m as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fp8_value_rounds_back_to_its_bits() {
        for f in Fp8::ALL {
            for b in 0..=255u8 {
                let v = fp8_to_f32(f, b);
                if v.is_nan() {
                    assert!(fp8_to_f32(f, fp8_from_f32(f, v)).is_nan());
                    continue;
                }
                // -0 and +0 both round-trip with their sign.
                assert_eq!(fp8_from_f32(f, v), b, "{f:?} {b:#x} = {v}");
            }
        }
    }

    #[test]
    fn fp8_values_are_the_formats() {
        assert_eq!(E4m3(0x38).to_f32(), 1.0);
        assert_eq!(E4m3(0x7e).to_f32(), 448.0);
        assert_eq!(E4m3(0x01).to_f32(), 2f32.powi(-9));
        assert!(E4m3(0xff).to_f32().is_nan());
        assert_eq!(E5m2(0x3c).to_f32(), 1.0);
        assert_eq!(E5m2(0x7b).to_f32(), 57344.0);
        assert_eq!(E5m2(0x7c).to_f32(), f32::INFINITY);
        assert_eq!(E5m2(0x01).to_f32(), 2f32.powi(-16));
        // E5M2 is binary16's upper byte.
        for b in 0..=255u8 {
            let h = half::f16::from_bits((b as u16) << 8).to_f32();
            let v = E5m2(b).to_f32();
            assert!(h == v || (h.is_nan() && v.is_nan()), "{b:#x}");
        }
    }

    #[test]
    fn fp8_rounding_is_to_nearest_even_and_saturates_e4m3() {
        // 1 + 1/16 lies halfway between 1 and 1.125: to the even mantissa, 1.
        assert_eq!(E4m3::from_f32(1.0625).to_f32(), 1.0);
        assert_eq!(E4m3::from_f32(1.1875).to_f32(), 1.25);
        assert_eq!(E4m3::from_f32(1.07).to_f32(), 1.125);
        assert_eq!(E4m3::from_f32(1e6).to_f32(), 448.0);
        assert_eq!(E4m3::from_f32(-1e6).to_f32(), -448.0);
        assert_eq!(E4m3::from_f32(f32::INFINITY).to_f32(), 448.0);
        assert_eq!(E4m3::from_f32(2f32.powi(-11)).to_f32(), 0.0);
        assert_eq!(E4m3::from_f32(3.0 * 2f32.powi(-11)).to_f32(), 2f32.powi(-9));
        assert_eq!(E5m2::from_f32(1e6).to_f32(), f32::INFINITY);
        assert_eq!(E5m2::from_f32(-0.0).0, 0x80);
        for x in [0.3f32, -2.7, 100.0, 1e-3, 5e-5] {
            let (e4, e5) = (E4m3::from_f32(x).to_f32(), E5m2::from_f32(x).to_f32());
            assert!(((e4 - x) / x).abs() <= 1.0 / 16.0 + 1e-6 || x.abs() < 2f32.powi(-6), "{x} {e4}");
            assert!(((e5 - x) / x).abs() <= 1.0 / 8.0 + 1e-6 || x.abs() < 2f32.powi(-14), "{x} {e5}");
        }
    }
}
