//! `cp.async`: asynchronous global -> shared copies (sm_80+), tracked in commit groups.

/// `cp.async.cg.shared.global` of 16 bytes, zero-filling the destination when `!valid`
/// (then `src` is not read, but must still be a mapped address).
#[inline(always)]
pub unsafe fn cp_async_cg_16(dst: u32, src: *const u8, valid: bool) {
    let src_bytes: u32 = if valid { 16 } else { 0 };
    unsafe {
        core::arch::asm!("cp.async.cg.shared.global [{d}], [{s}], 16, {n};",
            d = in(reg32) dst, s = in(reg64) src, n = in(reg32) src_bytes, options(nostack))
    }
}

/// `cp.async.commit_group`: closes the group of copies issued since the last commit.
#[inline(always)]
pub fn cp_async_commit_group() {
    unsafe { core::arch::asm!("cp.async.commit_group;", options(nostack)) }
}

/// `cp.async.wait_group N`: waits until at most `N` most recent groups are pending.
#[inline(always)]
pub fn cp_async_wait_group<const N: u32>() {
    unsafe { core::arch::asm!("cp.async.wait_group {n};", n = const N, options(nostack)) }
}

/// `cp.async.ca.shared.global` of 4 bytes (one f32 of a row vector), zero-filling the
/// destination when `!valid` (then `src` is not read, but must still be a mapped address).
#[inline(always)]
pub unsafe fn cp_async_ca_4(dst: u32, src: *const u8, valid: bool) {
    let src_bytes: u32 = if valid { 4 } else { 0 };
    unsafe {
        core::arch::asm!("cp.async.ca.shared.global [{d}], [{s}], 4, {n};",
            d = in(reg32) dst, s = in(reg64) src, n = in(reg32) src_bytes, options(nostack))
    }
}
