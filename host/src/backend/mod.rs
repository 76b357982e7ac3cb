//! The CUDA crates the library works with. Each backend supplies the driver entry point
//! (its `cuGetProcAddress`), a way to open a [`crate::Gpu`], and the memory traits
//! ([`crate::memory`]) for its buffers and streams; everything else is shared.
#[cfg(feature = "cudarc")]
mod cudarc;
#[cfg(feature = "cudarc")]
pub(crate) use cudarc::Tracked;
#[cfg(feature = "cust")]
mod cust;
