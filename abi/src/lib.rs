//! The contract between the flashrs host library and its GPU kernels.
//!
//! Everything both sides must agree on, bit for bit, lives here once: the host library and the
//! `no_std` device crate (`kernels-gpu`, compiled to PTX) both depend on this crate, so a field
//! added to the launch parameters or a tile configuration added to a table changes both at
//! once.
//!
//! * [`params`]: [`FwdParams`], the forward kernels' one by-value parameter; [`bwd`]: the
//!   backward pass's ([`BwdParams`]) and its tile configurations.
//! * [`tiles`] and [`sm90`]: the tile configurations each kernel family is instantiated for,
//!   and from them the launch geometry (threads, shared memory).
//! * [`kernel`]: [`Kernel`], the identity of every kernel entry point (family, variant, element
//!   type, configuration), from which its entry name is derived in one place
//!   ([`core::fmt::Display`]), and the marker each entry carries in its PTX so that a build
//!   can check that an entry instantiates the configuration its name says.
//! * [`grid`]: which (batch, head, query block) a CTA computes, and where a sequence's rows lie
//!   (the clamps that keep unchecked device offsets inside the tensors).
//! * [`merge`]: the merge kernel's parameter ([`MergeParams`]), which folds partial attention
//!   results (from parts of the keys) into one.
//! * [`upload`] and [`tma`]: the layouts of the offset-upload kernel's parameter and of a tensor
//!   map passed by value.
//!
//! `no_std`, no dependencies, no allocation: the device crate compiles it for
//! `nvptx64-nvidia-cuda`. Functions the kernels call are `#[inline(always)]`.
#![cfg_attr(not(test), no_std)]

pub mod bwd;
pub mod dtype;
pub mod grid;
pub mod kernel;
pub mod merge;
pub mod params;
pub mod sm90;
pub mod tiles;
pub mod tma;
pub mod upload;

pub use bwd::{AccumLayout, BwdConfig, BwdParams, BwdSm90Config, BwdSm90Split, FragmentBlocks, QueryLists};
pub use dtype::{DType, Fp8};
pub use kernel::{BwdStep, Flavor, Kernel, Variant};
pub use merge::MergeParams;
pub use params::{BlockSparse, DenseBlockMask, Descales, FwdParams, ModParams};
pub use sm90::HopperConfig;
pub use tiles::TileConfig;
