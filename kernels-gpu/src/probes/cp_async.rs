//! A `cp.async` ring: `n_tiles` tiles of 4 KiB flow global -> shared (3 stages in flight) ->
//! global. Chunks at or past `valid_chunks` (16-byte units) are zero-filled by the copy itself
//! (`src-size` 0) instead of read. Each thread stores chunks another thread copied, so the
//! check also covers the wait_group + CTA barrier hand-over.
//! One CTA of 128 threads; 12 KiB of dynamic shared memory.
use crate::arch::barrier::bar_sync;
use crate::arch::cp_async::{cp_async_cg_16, cp_async_commit_group, cp_async_wait_group};
use crate::arch::ids::thread_idx_x;
use crate::arch::smem::{dsmem_base, ld_shared_v4};

const STAGES: u32 = 3;
const THREADS: u32 = 128;
/// 16-byte chunks per tile: two per thread.
const TILE_CHUNKS: u32 = 2 * THREADS;

/// `src`: `valid_chunks` * 16 bytes; `dst`: `n_tiles` * 4 KiB.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn probe_cp_async_pipeline(src: *const u8, dst: *mut [u32; 4], n_tiles: u32, valid_chunks: u32) {
    let tid = thread_idx_x();
    let smem = dsmem_base();
    let slot = |t: u32| smem + (t % STAGES) * TILE_CHUNKS * 16;
    // Always commits, even past the end: the wait_group arithmetic counts one group per tile.
    let issue = |t: u32| {
        if t < n_tiles {
            for r in 0..2 {
                let j = tid + r * THREADS;
                let gi = t * TILE_CHUNKS + j;
                let valid = gi < valid_chunks;
                let p = if valid { unsafe { src.add(gi as usize * 16) } } else { src };
                unsafe { cp_async_cg_16(slot(t) + j * 16, p, valid) };
            }
        }
        cp_async_commit_group();
    };
    for t in 0..STAGES - 1 {
        issue(t);
    }
    for t in 0..n_tiles {
        // Groups committed so far: tiles 0..=t+STAGES-2; with at most STAGES-2 pending, tile t
        // has landed (for this thread's copies; the barrier covers everyone's).
        cp_async_wait_group::<{ STAGES - 2 }>();
        bar_sync();
        // Refills the slot everyone finished reading in iteration t-1 (all passed the barrier).
        issue(t + STAGES - 1);
        for r in 0..2 {
            let j = (tid + r * THREADS + 64) % TILE_CHUNKS;
            let v = unsafe { ld_shared_v4(slot(t) + j * 16) };
            unsafe { dst.add((t * TILE_CHUNKS + j) as usize).write(v) };
        }
    }
    cp_async_wait_group::<0>();
}
