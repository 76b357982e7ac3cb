//! Bulk (non-tensor) asynchronous copies (sm_90): global to shared, completing on an mbarrier.

/// `cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes`: copies `bytes` (a
/// multiple of 16) from global `src` to shared address `dst` (both 16-byte aligned), counting
/// them against mbarrier `bar`'s expected transaction bytes.
#[inline(always)]
pub unsafe fn cp_async_bulk_g2s(dst: u32, src: *const u8, bytes: u32, bar: u32) {
    unsafe {
        core::arch::asm!("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [{d}], [{s}], {n}, [{b}];",
            d = in(reg32) dst, s = in(reg64) src, n = in(reg32) bytes, b = in(reg32) bar, options(nostack))
    }
}
