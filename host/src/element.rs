//! The element types of Q, K, V and the output, on the host.
pub use flashrs_abi::DType;

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
