//! Two warps hand `rounds` batches of 32 words through one shared buffer guarded by a
//! full/empty mbarrier pair: warp 0 (producer) waits for "empty", writes, arrives on "full";
//! warp 1 (consumer) waits for "full", reads a permutation, arrives on "empty". Waits are by
//! phase parity, the producer starting on parity 1 (already complete on a fresh barrier).
//! `out[(block * rounds + r) * 32 + l] = inp[(block * rounds + r) * 32 + (7 * l) % 32]`.
//! Any number of CTAs of 64 threads; 256 bytes of dynamic shared memory.
use super::ld_shared_b32;
use crate::arch::barrier::bar_sync_divergent;
use crate::arch::ids::{block_idx_x, lane_id, thread_idx_x, warp_id};
use crate::arch::mbarrier::{mbarrier_arrive, mbarrier_init, mbarrier_wait_parity};
use crate::arch::smem::{dsmem_base, st_shared_b32};

/// See the module docs.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn probe_mbarrier_handshake(inp: *const u32, out: *mut u32, rounds: u32) {
    let smem = dsmem_base();
    let (full, empty, data) = (smem, smem + 8, smem + 128);
    if thread_idx_x() == 0 {
        unsafe {
            mbarrier_init(full, 32);
            mbarrier_init(empty, 32);
        }
    }
    bar_sync_divergent();
    let lane = lane_id();
    let base = (block_idx_x() * rounds * 32) as usize;
    for r in 0..rounds {
        let row = base + (r * 32) as usize;
        unsafe {
            if warp_id() == 0 {
                mbarrier_wait_parity(empty, (r & 1) ^ 1);
                st_shared_b32(data + lane * 4, inp.add(row + lane as usize).read());
                mbarrier_arrive(full);
            } else {
                mbarrier_wait_parity(full, r & 1);
                let v = ld_shared_b32(data + ((7 * lane) % 32) * 4);
                out.add(row + lane as usize).write(v);
                mbarrier_arrive(empty);
            }
        }
    }
}
