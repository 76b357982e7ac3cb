//! Device code: attention kernels written in Rust, compiled to PTX by rustc's NVPTX backend.
//!
//! * [`arch`]: one tiny `#[inline(always)]` wrapper per PTX instruction family.
//! * [`layout`]: shared-memory layouts (swizzles) and tile copies built on the wrappers.
//! * [`fwd`]: the FlashAttention-2-style forward kernel (mma.sync path, sm_80+).
//! * [`probes`]: minimal kernels that prove each instruction family against a CPU check.
//! * [`bench`]: a spin kernel the benchmark's queued timing holds the stream with.
//! * [`upload`]: a kernel that stores small host arrays passed in its parameters.
#![no_std]
#![feature(abi_ptx, asm_experimental_arch, stdarch_nvptx)]
#![allow(clippy::missing_safety_doc)]

pub mod arch;
pub mod bench;
pub mod dtype;
pub mod fwd;
#[cfg(target_feature = "sm_90a")]
pub mod hopper;
pub mod layout;
pub mod probes;
pub mod upload;

// Device code never unwinds; a reachable panic must not pull in core's formatting machinery
// (which would leave unresolved `.extern .func` symbols in the PTX).
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    unsafe { core::arch::nvptx::trap() }
}
