//! Bulk (non-tensor) asynchronous copies between shared and global memory (sm_90): global to
//! shared completing on an mbarrier, shared to global (reductions) tracked in bulk groups.

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

/// `cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32`: adds the `bytes` (a multiple of
/// 16) of f32 at shared address `src` to those at `dst` (both 16-byte aligned), element by
/// element, in L2: one instruction for what would be `bytes / 4` atomics. Reads shared memory
/// through the async proxy (fence generic writes first).
#[inline(always)]
pub unsafe fn cp_reduce_async_bulk_add_f32(dst: *mut f32, src: u32, bytes: u32) {
    unsafe {
        core::arch::asm!("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [{d}], [{s}], {n};",
            d = in(reg64) dst, s = in(reg32) src, n = in(reg32) bytes, options(nostack))
    }
}

/// `cp.async.bulk.commit_group`: closes the group of bulk copies issued since the last commit.
#[inline(always)]
pub fn cp_async_bulk_commit_group() {
    unsafe { core::arch::asm!("cp.async.bulk.commit_group;", options(nostack)) }
}

/// `cp.async.bulk.wait_group 0`: waits until every committed bulk copy is complete.
#[inline(always)]
pub fn cp_async_bulk_wait_group_0() {
    unsafe { core::arch::asm!("cp.async.bulk.wait_group 0;", options(nostack)) }
}
