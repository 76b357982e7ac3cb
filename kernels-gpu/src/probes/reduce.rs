//! The backward pass's smaller instruction families, one CTA of 64 threads (two warps), 256
//! bytes of dynamic shared memory:
//!
//! * `shfl.sync` group sums ([`group_sum_f32`]): `out[w]` = the sum of warp `w`'s `vals`;
//!   `out[131 + g]` = the sum of `vals[8g..8g + 8]` (groups of 8 lanes).
//! * `cvt.f32.f16` of packed pairs: `out[2 + 2i..]` = the two halves of `halves[i]` (i < 32).
//! * 4-byte `cp.async` with zero fill: thread `t` copies `vals[t]` into shared slot `t`, or
//!   zero-fills it where `t % 3 == 0`; `out[66 + t]` = slot `(t + 1) % 64`, which another
//!   thread copied (the wait_group + barrier hand-over).
//! * `red.add.f32`: every thread adds `vals[t]` to `accum[t % 4]`.
//! * `ld.acquire`: `out[130]` = the bits of `*counter`.
//!
//! [`probe_barrier_red`]: the CTA-wide count of `barrier.red.popc` (the block-mask builder's
//! vote). [`probe_ballot_or`]: `vote.ballot`, `red.or` and `redux.min`, which turn block
//! masks around for the backward and walk them.
//!
//! sm_90a: [`probe_red_vector`], reductions of f32 into global memory from registers 8 or 16
//! bytes at a time, and [`probe_bulk_copy`], a bulk copy into shared memory completing on an
//! mbarrier.
use crate::arch::atom::{ld_acquire_gpu_u32, red_relaxed_gpu_add_f32, red_relaxed_gpu_or_u32};
use crate::arch::barrier::{bar_red_popc, bar_sync};
use crate::arch::cp_async::{cp_async_ca_4, cp_async_commit_group, cp_async_wait_group};
use crate::arch::cvt::cvt_f32x2_f16x2;
use crate::arch::ids::thread_idx_x;
use crate::arch::shfl::{ballot_sync, group_sum_f32, redux_min_u32};
use crate::arch::smem::{dsmem_base, ld_shared_b32};

/// `vals`: 64 f32; `halves`: 32 packed f16 pairs; `out`: 139 f32; `accum`: 4 f32.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn probe_backward_atoms(vals: *const f32, halves: *const u32, counter: *const u32, out: *mut f32, accum: *mut f32) {
    let t = thread_idx_x() as usize;
    let v = unsafe { *vals.add(t) };
    let (sum, eighth) = (group_sum_f32(v, 32), group_sum_f32(v, 8));
    if t % 32 == 0 {
        unsafe { *out.add(t / 32) = sum };
    }
    if t % 8 == 0 {
        unsafe { *out.add(131 + t / 8) = eighth };
    }
    if t < 32 {
        let [lo, hi] = cvt_f32x2_f16x2(unsafe { *halves.add(t) });
        unsafe {
            *out.add(2 + 2 * t) = lo;
            *out.add(3 + 2 * t) = hi;
        }
    }
    let smem = dsmem_base();
    unsafe { cp_async_ca_4(smem + 4 * t as u32, vals.add(t) as *const u8, t % 3 != 0) };
    cp_async_commit_group();
    cp_async_wait_group::<0>();
    bar_sync();
    unsafe { *out.add(66 + t) = f32::from_bits(ld_shared_b32(smem + 4 * ((t + 1) % 64) as u32)) };
    unsafe { red_relaxed_gpu_add_f32(accum.add(t % 4), v) };
    if t == 0 {
        unsafe { *out.add(130) = f32::from_bits(ld_acquire_gpu_u32(counter)) };
    }
}

/// One CTA of 256 threads: thread `t` votes `flags[t] != 0`, then writes the count of true
/// votes as it received it to `out[t]`; threads `t % 3 == 0` vote after a detour of their own
/// (the non-aligned barrier counts them wherever they arrive).
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn probe_barrier_red(flags: *const u32, out: *mut u32) {
    let t = thread_idx_x() as usize;
    let mut vote = unsafe { *flags.add(t) } != 0;
    if t % 3 == 0 {
        vote = unsafe { core::ptr::read_volatile(flags.add(t)) } != 0;
    }
    unsafe { *out.add(t) = bar_red_popc(vote) };
}

/// One CTA of 64 threads: thread `t` sets bit `t % 32` of `bits[t / 32]` where `flags[t] != 0`
/// (`red.or`), then, after a barrier, writes its warp's ballot of the same votes to `out[t]`
/// and the least of its warp's `flags` (`redux.sync.min`) to `out[64 + t]`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn probe_ballot_or(flags: *const u32, bits: *mut u32, out: *mut u32) {
    let t = thread_idx_x() as usize;
    let flag = unsafe { *flags.add(t) };
    let vote = flag != 0;
    if vote {
        unsafe { red_relaxed_gpu_or_u32(bits.add(t / 32), 1 << (t % 32)) };
    }
    bar_sync();
    unsafe {
        *out.add(t) = ballot_sync(vote);
        *out.add(64 + t) = redux_min_u32(flag);
    }
}

/// sm_90a: adds `src[0..n]` (n a multiple of 4, at most 1024) to `dst[0..n]` with one vector
/// reduction per `width` values (2 or 4), thread `t` adding values `width t..` then
/// `width (t + 128)..`; one CTA of 128 threads, launched twice to show the adds accumulate.
#[cfg(target_feature = "sm_90a")]
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn probe_red_vector(src: *const f32, dst: *mut f32, n: u32, width: u32) {
    use crate::arch::atom::{red_relaxed_gpu_add_v2_f32, red_relaxed_gpu_add_v4_f32};
    let mut i = thread_idx_x();
    while width * i < n {
        let at = (width * i) as usize;
        unsafe {
            if width == 2 {
                red_relaxed_gpu_add_v2_f32(dst.add(at), *(src.add(at) as *const [f32; 2]));
            } else {
                red_relaxed_gpu_add_v4_f32(dst.add(at), *(src.add(at) as *const [f32; 4]));
            }
        }
        i += 128;
    }
}

/// sm_90a: copies `src[0..n]` (n a multiple of 4, at most 1024; `src` 16-byte aligned) into
/// shared memory with one bulk copy on an mbarrier, waits for it, and writes it back to
/// `dst[0..n]` in 8-byte shared loads; one CTA of 128 threads, 4096 + 16 bytes of dynamic shared
/// memory.
#[cfg(target_feature = "sm_90a")]
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn probe_bulk_copy(src: *const f32, dst: *mut [u32; 2], n: u32) {
    use crate::arch::bulk::cp_async_bulk_g2s;
    use crate::arch::mbarrier::{mbarrier_arrive_expect_tx, mbarrier_init, mbarrier_wait_parity};
    let (data, bar) = (dsmem_base(), dsmem_base() + 4096);
    crate::hopper::pipeline::init_barriers(thread_idx_x(), || unsafe { mbarrier_init(bar, 1) });
    if thread_idx_x() == 0 {
        unsafe {
            mbarrier_arrive_expect_tx(bar, 4 * n);
            cp_async_bulk_g2s(data, src as *const u8, 4 * n, bar);
        }
    }
    unsafe { mbarrier_wait_parity(bar, 0) };
    let mut i = thread_idx_x();
    while 2 * i < n {
        unsafe { *dst.add(i as usize) = crate::arch::smem::ld_shared_v2(data + 8 * i) };
        i += 128;
    }
}
