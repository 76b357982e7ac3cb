//! The element types of Q, K, V and the output.

/// Element type of Q, K, V and the output (f32 accumulation and softmax either way).
/// Non-exhaustive: more types (FP8) are to come.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// IEEE binary16.
    F16,
    /// bfloat16.
    Bf16,
}

impl DType {
    /// Both types, in the order entry points are declared.
    pub const ALL: [DType; 2] = [DType::F16, DType::Bf16];

    /// Name used in kernel entry points and on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
        }
    }

    /// Number of this type in kernel markers ([`crate::kernel`]).
    pub const fn code(self) -> u32 {
        match self {
            DType::F16 => 0,
            DType::Bf16 => 1,
        }
    }

    /// The type of marker number `code`.
    pub const fn from_code(code: u32) -> Option<DType> {
        match code {
            0 => Some(DType::F16),
            1 => Some(DType::Bf16),
            _ => None,
        }
    }
}

/// An 8-bit floating-point element of a K/V cache read by 16-bit queries (the kernels widen it
/// to the queries' type on the way to the tensor cores, exactly: every value of either format
/// is one of f16's and bf16's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fp8 {
    /// 4 exponent bits (bias 7), 3 mantissa bits, no infinities: largest finite 448.
    E4m3,
    /// 5 exponent bits (bias 15), 2 mantissa bits: the upper byte of an IEEE binary16.
    E5m2,
}

impl Fp8 {
    /// Both formats, in the order entry points are declared.
    pub const ALL: [Fp8; 2] = [Fp8::E4m3, Fp8::E5m2];

    /// Name used in kernel entry points and on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Fp8::E4m3 => "e4m3",
            Fp8::E5m2 => "e5m2",
        }
    }

    /// Number of a K/V element type in kernel markers: 0 for the queries' own type.
    pub const fn code(kv: Option<Fp8>) -> u32 {
        match kv {
            None => 0,
            Some(Fp8::E4m3) => 1,
            Some(Fp8::E5m2) => 2,
        }
    }

    /// The K/V element type of marker number `code` (`Some(None)`: the queries' own).
    pub const fn from_code(code: u32) -> Option<Option<Fp8>> {
        match code {
            0 => Some(None),
            1 => Some(Some(Fp8::E4m3)),
            2 => Some(Some(Fp8::E5m2)),
            _ => None,
        }
    }
}
