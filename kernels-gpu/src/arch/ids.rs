//! Thread, warp, lane and block indices.
use core::arch::nvptx;

/// `%tid.x`
#[inline(always)]
pub fn thread_idx_x() -> u32 {
    unsafe { nvptx::_thread_idx_x() as u32 }
}

/// `%ctaid.x`
#[inline(always)]
pub fn block_idx_x() -> u32 {
    unsafe { nvptx::_block_idx_x() as u32 }
}

/// `%ctaid.y`
#[inline(always)]
pub fn block_idx_y() -> u32 {
    unsafe { nvptx::_block_idx_y() as u32 }
}

/// `%nctaid.x`
#[inline(always)]
pub fn grid_dim_x() -> u32 {
    unsafe { nvptx::_grid_dim_x() as u32 }
}

/// `%ntid.x`
#[inline(always)]
pub fn block_dim_x() -> u32 {
    unsafe { nvptx::_block_dim_x() as u32 }
}

/// Lane within the warp (`%laneid` equals `tid.x % 32` for 1-D blocks; this form lets the
/// compiler fold it with other uses of `tid.x`).
#[inline(always)]
pub fn lane_id() -> u32 {
    thread_idx_x() % 32
}

/// Warp index within a 1-D block, made warp-uniform so branches on it do not diverge.
#[inline(always)]
pub fn warp_id() -> u32 {
    shfl_sync_idx0(thread_idx_x() / 32)
}

#[inline(always)]
fn shfl_sync_idx0(v: u32) -> u32 {
    crate::arch::shfl::shfl_sync_idx_u32(v, 0)
}
