//! `mbarrier`: 64-bit barrier objects in shared memory that count arrivals (and, on sm_90,
//! pending transaction bytes) per phase. The phase flips when both counts reach zero; waiters
//! ask by phase *parity*, so a consumer of a ring of buffers waits on `round & 1`.
//!
//! Addresses are 32-bit `.shared` addresses of an 8-byte-aligned `u64` slot. `.shared` without
//! `::cta` keeps the sm_80 forms legal in the PTX 7.0 module rustc emits for sm_80.
//!
//! Default orderings apply: `arrive` releases and `try_wait` acquires at CTA scope, so plain
//! shared-memory stores before an arrive are visible to loads after a successful wait.

/// `mbarrier.init.shared.b64`: sets the expected arrival count of the first phase (phase 0).
/// One thread initialises; the others must not touch the barrier before a CTA barrier (and,
/// for the async proxy such as TMA, a `fence.proxy.async`/`fence.mbarrier_init`) follows.
#[inline(always)]
pub unsafe fn mbarrier_init(bar: u32, count: u32) {
    unsafe {
        core::arch::asm!("mbarrier.init.shared.b64 [{b}], {n};",
            b = in(reg32) bar, n = in(reg32) count, options(nostack))
    }
}

/// `mbarrier.arrive.shared.b64`: one arrival; returns the opaque state token of the phase the
/// arrival belonged to (only useful to `test_wait` forms; parity waits do not need it).
#[inline(always)]
pub unsafe fn mbarrier_arrive(bar: u32) -> u64 {
    let state: u64;
    unsafe {
        core::arch::asm!("mbarrier.arrive.shared.b64 {s}, [{b}];",
            s = out(reg64) state, b = in(reg32) bar, options(nostack))
    }
    state
}

/// `mbarrier.arrive.expect_tx.shared.b64`: one arrival that also raises the phase's pending
/// transaction count by `tx_bytes`, which `complete_tx` (e.g. a TMA load) pays back. Issue it
/// before or after the copies it covers: the phase cannot complete until both counts are zero.
#[cfg(target_feature = "sm_90a")]
#[inline(always)]
pub unsafe fn mbarrier_arrive_expect_tx(bar: u32, tx_bytes: u32) -> u64 {
    let state: u64;
    unsafe {
        core::arch::asm!("mbarrier.arrive.expect_tx.shared.b64 {s}, [{b}], {tx};",
            s = out(reg64) state, b = in(reg32) bar, tx = in(reg32) tx_bytes, options(nostack))
    }
    state
}

/// `mbarrier.try_wait.parity.shared.b64`: true once the phase with parity `parity` has
/// completed. The hardware may suspend the thread for a while before answering false, so a
/// spin on it is cheaper than on `test_wait`. A freshly initialised barrier is in phase 0, so
/// waiting on parity 1 succeeds at once: producers start on the "previous" phase that way.
#[cfg(target_feature = "sm_90a")]
#[inline(always)]
pub unsafe fn mbarrier_try_wait_parity(bar: u32, parity: u32) -> bool {
    let done: u32;
    unsafe {
        // Not `pure`/`readonly`: the acquire must keep later shared loads below it.
        core::arch::asm!(
            "{{ .reg .pred p; mbarrier.try_wait.parity.shared.b64 p, [{b}], {par}; selp.u32 {d}, 1, 0, p; }}",
            d = out(reg32) done, b = in(reg32) bar, par = in(reg32) parity, options(nostack))
    }
    done != 0
}

/// Spins on [`mbarrier_try_wait_parity`] until the phase with parity `parity` has completed.
#[cfg(target_feature = "sm_90a")]
#[inline(always)]
pub unsafe fn mbarrier_wait_parity(bar: u32, parity: u32) {
    while !unsafe { mbarrier_try_wait_parity(bar, parity) } {}
}
