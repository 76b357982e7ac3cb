//! `stmatrix.sync.aligned.m8n8.x4` (sm_90a): one warp stores `inp[4 * lane + i]` as its word of
//! matrix `i`, lane `l` giving row `l % 8` of matrix `l / 8` the 16-byte slot
//! `8 * (l / 8) + 7 - l % 8` (rows reversed, so that the addresses are seen to be each lane's),
//! then copies the 512 bytes out. Matrix `i`, row `r`, word `q` should hold lane `4r + q`'s
//! word `i`: `out[4 * (8i + 7 - r) + q] = inp[4 * (4r + q) + i]`. 512 bytes of shared memory.
use super::ld_shared_b32;
use crate::arch::barrier::bar_sync;
use crate::arch::ids::lane_id;
use crate::arch::smem::dsmem_base;
use crate::arch::stmatrix::stmatrix_x4;

/// See the module docs.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn probe_stmatrix(inp: *const u32, out: *mut u32) {
    let lane = lane_id();
    let smem = dsmem_base();
    let words = [0, 1, 2, 3].map(|i| unsafe { *inp.add((4 * lane + i) as usize) });
    unsafe { stmatrix_x4(smem + 16 * (8 * (lane / 8) + 7 - lane % 8), words) };
    bar_sync();
    for w in 0..4 {
        let at = 32 * w + lane;
        unsafe { *out.add(at as usize) = ld_shared_b32(smem + 4 * at) };
    }
}
