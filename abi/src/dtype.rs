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
