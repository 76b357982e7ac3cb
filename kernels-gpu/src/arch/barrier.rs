//! CTA barriers.
//!
//! `bar.sync` means `barrier.sync.aligned`: every thread of a warp must execute the same
//! barrier instruction. Inline assembly is not `convergent` to LLVM, which may copy a barrier
//! into both sides of a branch on the thread index (tail duplication after an `if tid == 0 {
//! .. }`); a warp's lanes then arrive at different copies, which is undefined for the aligned
//! form and was seen to hang. So [`bar_sync`] (aligned, cheapest) serves code with no
//! thread-dependent branch before the barrier in its block (the `mma.sync` kernels' tile loops,
//! which the sanitizer's synccheck covers), and [`bar_sync_divergent`] and the named barriers,
//! which follow one thread's work in the Hopper kernels, use the non-aligned forms, which count
//! threads wherever they arrive.

/// `bar.sync 0`: every thread of the CTA (`__syncthreads`), all reaching this same instruction
/// (see the module docs).
#[inline(always)]
pub fn bar_sync() {
    unsafe { core::arch::asm!("bar.sync 0;", options(nostack)) }
}

/// `barrier.sync 0`: every thread of the CTA, wherever each arrives (after work some threads
/// skip, such as one thread's mbarrier inits).
#[inline(always)]
pub fn bar_sync_divergent() {
    unsafe { core::arch::asm!("barrier.sync 0;", options(nostack)) }
}

/// `barrier.red.popc.u32 0`: every thread of the CTA, wherever each arrives (the non-aligned
/// form, as [`bar_sync_divergent`]); returns to each how many threads' `p` are true (a CTA-wide
/// "any" is `> 0`, "all" is the thread count).
#[inline(always)]
pub fn bar_red_popc(p: bool) -> u32 {
    let n: u32;
    unsafe {
        core::arch::asm!(
            "{{ .reg .pred p; setp.ne.u32 p, {x}, 0; barrier.red.popc.u32 {n}, 0, p; }}",
            x = in(reg32) p as u32, n = out(reg32) n, options(nostack)
        )
    }
    n
}

/// `barrier.sync id, count`: named barrier `id` (1..16) over `count` threads (a multiple of
/// 32).
#[inline(always)]
pub fn bar_sync_named(id: u32, count: u32) {
    unsafe { core::arch::asm!("barrier.sync {id}, {n};", id = in(reg32) id, n = in(reg32) count, options(nostack)) }
}

/// `barrier.arrive id, count`: signals named barrier `id` without waiting (producer side).
#[inline(always)]
pub fn bar_arrive_named(id: u32, count: u32) {
    unsafe { core::arch::asm!("barrier.arrive {id}, {n};", id = in(reg32) id, n = in(reg32) count, options(nostack)) }
}

/// `bar.warp.sync 0xffffffff` (`__syncwarp`).
#[inline(always)]
pub fn bar_warp_sync() {
    unsafe { core::arch::asm!("bar.warp.sync -1;", options(nostack)) }
}
