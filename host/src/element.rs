//! The element types of Q, K, V and the output, on the host.
use cust::memory::DeviceCopy;

pub use flashrs_abi::DType;

/// A 16-bit element type the kernels take (`half::f16`, `half::bf16`).
pub trait Element: DeviceCopy + Copy + Default + Send + Sync + 'static {
    /// Its [`DType`].
    const DTYPE: DType;
    /// Rounds an f32 to this type.
    fn from_f32(v: f32) -> Self;
    /// Widens to f32.
    fn to_f32(self) -> f32;
}

impl Element for half::f16 {
    const DTYPE: DType = DType::F16;
    fn from_f32(v: f32) -> Self {
        half::f16::from_f32(v)
    }
    fn to_f32(self) -> f32 {
        half::f16::to_f32(self)
    }
}

impl Element for half::bf16 {
    const DTYPE: DType = DType::Bf16;
    fn from_f32(v: f32) -> Self {
        half::bf16::from_f32(v)
    }
    fn to_f32(self) -> f32 {
        half::bf16::to_f32(self)
    }
}
