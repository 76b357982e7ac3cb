//! CTA barriers.

/// `bar.sync 0`: every thread of the CTA (`__syncthreads`).
#[inline(always)]
pub fn bar_sync() {
    unsafe { core::arch::asm!("bar.sync 0;", options(nostack)) }
}

/// `bar.sync id, count`: named barrier `id` (1..16) over `count` threads (a multiple of 32).
#[inline(always)]
pub fn bar_sync_named(id: u32, count: u32) {
    unsafe { core::arch::asm!("bar.sync {id}, {n};", id = in(reg32) id, n = in(reg32) count, options(nostack)) }
}

/// `bar.arrive id, count`: signals named barrier `id` without waiting (producer side).
#[inline(always)]
pub fn bar_arrive_named(id: u32, count: u32) {
    unsafe { core::arch::asm!("bar.arrive {id}, {n};", id = in(reg32) id, n = in(reg32) count, options(nostack)) }
}

/// `bar.warp.sync 0xffffffff` (`__syncwarp`).
#[inline(always)]
pub fn bar_warp_sync() {
    unsafe { core::arch::asm!("bar.warp.sync -1;", options(nostack)) }
}
