//! FlashAttention-class scaled-dot-product attention for NVIDIA GPUs, with the kernels written
//! in Rust (the `kernels-gpu` crate), compiled to PTX and launched with `cust`.
#![warn(missing_docs)]

pub mod attention;
pub mod bench;
pub mod device;
pub mod error;
pub mod ptx;
pub mod reference;
pub mod tensor_map;

pub use attention::{AttentionParams, DType, Element, KernelPath, Strides};
pub use device::{Arch, Gpu};
pub use error::{Error, Result};
