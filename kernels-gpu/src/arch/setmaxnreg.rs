//! `setmaxnreg` (sm_90a): moves registers between the warpgroups of a CTA at run time, so a
//! producer warpgroup (TMA issue) can give up registers that the consumer warpgroups (wgmma)
//! then claim. `N` is the new per-thread register count: 24..=256, a multiple of 8. Every warp
//! of the warpgroup must execute the same instruction, converged.
//!
//! ptxas drops the instruction (info C7508, "unable to determine register count at entry")
//! unless the kernel's PTX entry carries `.maxnreg` or `.maxntid` + `.minnctapersm`, which
//! rustc cannot emit: a kernel using these needs its entry directives added to the PTX.

/// `setmaxnreg.inc.sync.aligned.u32 N`: grows this warpgroup's per-thread registers to `N`,
/// blocking until the CTA's released pool has enough.
#[inline(always)]
pub fn setmaxnreg_inc<const N: u32>() {
    const { assert!(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg: N must be 24..=256, a multiple of 8") };
    unsafe { core::arch::asm!("setmaxnreg.inc.sync.aligned.u32 {n};", n = const N, options(nostack)) }
}

/// `setmaxnreg.dec.sync.aligned.u32 N`: shrinks this warpgroup's per-thread registers to `N`,
/// releasing the rest to the CTA's pool.
#[inline(always)]
pub fn setmaxnreg_dec<const N: u32>() {
    const { assert!(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg: N must be 24..=256, a multiple of 8") };
    unsafe { core::arch::asm!("setmaxnreg.dec.sync.aligned.u32 {n};", n = const N, options(nostack)) }
}
