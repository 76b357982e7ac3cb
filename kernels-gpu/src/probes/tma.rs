//! One TMA 2D tile load: the 64x64 16-bit box at element coordinates `(c0, c1)` (c0 = column,
//! innermost) of the matrix `map` describes lands in shared memory, completing on an mbarrier
//! armed with the box's 8192 bytes; the CTA then copies it out row-major to `out` (64x64),
//! undoing the 128-byte swizzle when `swizzled` != 0 (map encoded with `SWIZZLE_128B`). Parts
//! of the box outside the matrix arrive as zeros. `status[0]` is 0 on success, or
//! `1 + (address % 64)` when the map parameter is not 64-byte aligned (then nothing is copied).
//! One CTA of 128 threads; dynamic shared memory 1024 (alignment slack) + 8192 + 64 bytes.
use super::{dsmem_base_1024, sw128_offset};
use crate::arch::barrier::bar_sync_divergent;
use crate::arch::fence::{fence_mbarrier_init_release_cluster, fence_proxy_async_shared_cta};
use crate::arch::ids::thread_idx_x;
use crate::arch::mbarrier::{mbarrier_arrive_expect_tx, mbarrier_init, mbarrier_wait_parity};
use crate::arch::smem::ld_shared_v4;
use crate::arch::tma::{TensorMapParam, cp_async_bulk_tensor_2d_g2s, prefetch_tensormap, tensor_map_aligned};

const BOX_BYTES: u32 = 64 * 64 * 2;

/// See the module docs. `map` must stay parameter 0: it is addressed by name in the PTX.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn probe_tma_2d(
    _map: TensorMapParam, out: *mut [u32; 4], status: *mut u32, c0: i32, c1: i32, swizzled: u32,
) {
    let tile = dsmem_base_1024();
    let bar = tile + BOX_BYTES;
    let map = crate::param_tensor_map!(probe_tma_2d, 0);
    let tid = thread_idx_x();
    let aligned = tensor_map_aligned(map);
    if tid == 0 {
        unsafe { status.write(if aligned { 0 } else { 1 + (map as u32 % 64) }) };
    }
    if !aligned {
        return;
    }
    if tid == 0 {
        unsafe {
            prefetch_tensormap(map);
            mbarrier_init(bar, 1);
        }
        // The TMA unit signals the barrier through the async proxy: publish the init to it.
        fence_mbarrier_init_release_cluster();
        fence_proxy_async_shared_cta();
    }
    bar_sync_divergent();
    if tid == 0 {
        unsafe {
            mbarrier_arrive_expect_tx(bar, BOX_BYTES);
            cp_async_bulk_tensor_2d_g2s(tile, map, c0, c1, bar);
        }
    }
    unsafe { mbarrier_wait_parity(bar, 0) };
    for i in 0..4 {
        let idx = tid + 128 * i;
        let (row, chunk) = (idx / 8, idx % 8);
        let off = if swizzled != 0 { sw128_offset(row, chunk) } else { idx * 16 };
        unsafe { out.add(idx as usize).write(ld_shared_v4(tile + off)) };
    }
}
