//! The GPU's global nanosecond timer.

/// `%globaltimer`: nanoseconds, the same clock on every SM.
#[inline(always)]
pub fn globaltimer() -> u64 {
    let t: u64;
    unsafe { core::arch::asm!("mov.u64 {t}, %globaltimer;", t = out(reg64) t, options(nomem, nostack)) };
    t
}
