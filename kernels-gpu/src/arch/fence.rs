//! Proxy and barrier-initialisation fences (sm_90). Ordinary loads and stores go through the
//! *generic proxy*; TMA and wgmma read and write shared memory through the *async proxy*, which
//! does not see generic-proxy writes (or mbarrier initialisation) until one of these fences.

/// `fence.proxy.async.shared::cta`: makes this thread's earlier generic-proxy writes to shared
/// memory visible to later async-proxy operations (wgmma operand reads, TMA stores), and the
/// other way round. Every writing thread fences, then a CTA barrier hands over to the issuer.
#[inline(always)]
pub fn fence_proxy_async_shared_cta() {
    unsafe { core::arch::asm!("fence.proxy.async.shared::cta;", options(nostack)) }
}

/// `fence.proxy.async`: like [`fence_proxy_async_shared_cta`] for all state spaces (e.g. before
/// a TMA store reads global memory written by plain stores).
#[inline(always)]
pub fn fence_proxy_async() {
    unsafe { core::arch::asm!("fence.proxy.async;", options(nostack)) }
}

/// `fence.mbarrier_init.release.cluster`: orders the thread's earlier `mbarrier.init`s before
/// later cluster-scope accesses, including `complete_tx` from TMA units. The lightweight form
/// of `fence.proxy.async` for the one thing TMA needs after initialisation.
#[inline(always)]
pub fn fence_mbarrier_init_release_cluster() {
    unsafe { core::arch::asm!("fence.mbarrier_init.release.cluster;", options(nostack)) }
}
