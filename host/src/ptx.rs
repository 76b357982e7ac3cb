//! The embedded PTX modules and the names of the kernels in them, for projects that load the
//! kernels themselves.

/// PTX for sm_80 and newer (mma.sync path). Built from `kernels-gpu` by this crate's build script.
pub const PTX_SM80: &str = include_str!(concat!(env!("OUT_DIR"), "/sm_80.ptx"));

/// PTX for sm_90a (H100/H200): everything in [`PTX_SM80`] plus the Hopper-only kernels.
pub const PTX_SM90A: &str = include_str!(concat!(env!("OUT_DIR"), "/sm_90a.ptx"));
