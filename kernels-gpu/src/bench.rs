//! A kernel for the benchmark's timing, not for attention.

use crate::arch::timer::globaltimer;

/// Spins one thread for `ns` nanoseconds. Enqueued before a timed call, it holds the stream
/// while the host enqueues the call and its events, so that the events time the GPU's work
/// alone, not the host's launch overhead (`flashrs benchmark --timing queued`).
#[cfg(feature = "entries")]
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn bench_spin(ns: u64) {
    let start = globaltimer();
    while globaltimer().wrapping_sub(start) < ns {}
}
