//! The K/V ring's bookkeeping: which stage and which barrier phase an iteration uses.
//!
//! Producer and consumers walk the same sequence of tiles, so both derive (stage, phase) from
//! the tile's position in it. A "full" barrier completes once per fill of its stage (the
//! producer's `arrive.expect_tx` plus the TMA bytes); an "empty" barrier once per release
//! (one arrival per consumer warp, or per consumer thread where threads read the stage with
//! their own loads). Waits are by phase parity: consumers wait for "full" with the fill's
//! parity, the producer waits for "empty" with the opposite parity, which a fresh barrier
//! passes at once (the stage starts empty).
use crate::arch::barrier::bar_sync_divergent;
use crate::arch::fence::{fence_mbarrier_init_release_cluster, fence_proxy_async_shared_cta};
use crate::arch::mbarrier::{mbarrier_arrive, mbarrier_wait_parity};

/// Arrivals that release a stage (or the Q tile) with `consumers` consumer warpgroups: one per
/// consumer warp.
#[inline(always)]
pub const fn empty_arrivals(consumers: usize) -> u32 {
    4 * consumers as u32
}

/// Arrivals that release a stage with `consumers` consumer warpgroups whose every thread
/// arrives ([`release_own_reads`]).
#[inline(always)]
pub const fn thread_arrivals(consumers: usize) -> u32 {
    128 * consumers as u32
}

/// Position in the ring.
#[derive(Clone, Copy)]
pub struct PipeState<const STAGES: usize> {
    /// Stage index (0..STAGES).
    pub stage: u32,
    /// Parity of the fill of `stage` this iteration uses.
    pub phase: u32,
}

impl<const STAGES: usize> PipeState<STAGES> {
    /// The first iteration.
    #[inline(always)]
    pub fn new() -> Self {
        PipeState { stage: 0, phase: 0 }
    }

    /// The next iteration.
    #[inline(always)]
    pub fn advance(&mut self) {
        self.stage += 1;
        if self.stage == STAGES as u32 {
            self.stage = 0;
            self.phase ^= 1;
        }
    }
}

/// Consumer side: waits until the stage's fill for this iteration has landed.
#[inline(always)]
pub unsafe fn wait_full(full: u32, phase: u32) {
    unsafe { mbarrier_wait_parity(full, phase) }
}

/// Producer side: waits until the consumers released the stage's previous fill.
#[inline(always)]
pub unsafe fn wait_empty(empty: u32, phase: u32) {
    unsafe { mbarrier_wait_parity(empty, phase ^ 1) }
}

/// Consumer side: this warp is done with the stage (after its wgmma reading it completed).
/// Called by every lane of the warp, converged; lane 0 arrives.
#[inline(always)]
pub unsafe fn release(empty: u32, lane: u32) {
    if lane == 0 {
        unsafe { mbarrier_arrive(empty) };
    }
}

/// Consumer side, for stages read with the thread's own loads too (not only by wgmma): every
/// thread arrives, its arrive ordering its loads before the producer's refill, after a proxy
/// fence since that refill is the async proxy's. Barrier count: [`thread_arrivals`].
#[inline(always)]
pub unsafe fn release_own_reads(empty: u32) {
    fence_proxy_async_shared_cta();
    unsafe { mbarrier_arrive(empty) };
}

/// Thread `tid` 0 initialises the CTA's mbarriers (`init`) and publishes the inits to the async
/// proxy, through which the TMA unit signals them; then the whole CTA syncs, after which every
/// thread may use them.
#[inline(always)]
pub fn init_barriers(tid: u32, init: impl FnOnce()) {
    if tid == 0 {
        init();
        fence_mbarrier_init_release_cluster();
        fence_proxy_async_shared_cta();
    }
    bar_sync_divergent();
}
