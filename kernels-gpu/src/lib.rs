//! Device code: attention kernels written in Rust, compiled to PTX by rustc's NVPTX backend.
//! What the host must agree on (parameters, tile configurations, kernel identities, grid
//! order) is the `flashrs-abi` crate's.
//!
//! * [`arch`]: one tiny `#[inline(always)]` wrapper per PTX instruction family.
//! * [`layout`]: shared-memory layouts (swizzles) and tile copies built on the wrappers.
//! * [`fwd`]: the FlashAttention-2-style forward kernel (mma.sync path, sm_80+).
//! * [`bwd`]: the FlashAttention-2-style backward kernels (mma.sync path, sm_80+).
//! * `hopper`: the FlashAttention-3-style forward and backward kernels (TMA, wgmma; sm_90a
//!   builds only).
//! * [`lse`] and [`mask`]: the softmax, log-sum-exp and masking arithmetic both share.
//! * [`mods`]: attention modifications as trait parameters of the forward kernels (which keys a
//!   row sees, what its scores become, sinks): plain attention, and the built-in sliding
//!   window, softcap, ALiBi and sinks. Another crate instantiates the forward bodies with its
//!   own through [`mma_forward_kernel`], `sm90_forward_kernel` and [`mma_backward_kernel`] (and
//!   [`dynamic_shared_memory`]), depending on this one without the default feature `entries`,
//!   which holds every shipped entry point.
//! * [`sparse`]: block sparsity, the key blocks a query block visits from a block mask;
//!   [`block_mask`]: block masks built from a dense boolean mask on the GPU.
//! * [`merge`]: folds partial attention results (over parts of the keys) into one, for ring
//!   attention across GPUs.
//! * [`probes`]: minimal kernels that prove each instruction family against a CPU check.
//! * [`bench`]: a spin kernel the benchmark's queued timing holds the stream with.
//! * [`vector`]: register groups moved by one vector load or store.
//! * [`upload`]: a kernel that stores small host arrays passed in its parameters.
#![no_std]
#![feature(abi_ptx, asm_experimental_arch, stdarch_nvptx, stmt_expr_attributes)]
#![allow(clippy::missing_safety_doc)]
// Without the shipped entry points, what only they use is left unused.
#![cfg_attr(not(feature = "entries"), allow(unused))]

/// The ABI crate, for entry points declared with [`mma_forward_kernel`],
/// [`mma_backward_kernel`] or
/// `sm90_forward_kernel` outside this crate.
pub use flashrs_abi as abi;

pub mod arch;
pub mod bench;
pub mod block_mask;
pub mod bwd;
pub mod dtype;
pub mod fwd;
#[cfg(target_feature = "sm_90a")]
pub mod hopper;
pub mod layout;
pub mod lse;
pub mod mask;
pub mod merge;
pub mod mods;
#[cfg(feature = "entries")]
pub mod probes;
pub mod sparse;
pub mod upload;
pub mod vector;

// Device code never unwinds; a reachable panic must not pull in core's formatting machinery
// (which would leave unresolved `.extern .func` symbols in the PTX).
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    unsafe { core::arch::nvptx::trap() }
}
