//! FP8 widening as the forward kernels' GEMMs take K and V ([`crate::dtype::KvElement`]): one
//! CTA of 64 threads, thread `t` widening the four bytes of `src[t]` (every byte value once)
//! in each format to each 16-bit type, as halves (bytes 0-1, 2-3) and interleaved (bytes 0
//! and 2, 1 and 3). `out` holds eight blocks of 128 u32 (two per thread): E4M3 to f16, to
//! bf16, E5M2 to f16, to bf16, halves then interleaved.
use crate::arch::ids::thread_idx_x;
use crate::dtype::{Bf16, E4m3, E5m2, Element, F16, KvElement};

/// Writes thread `t`'s pairs to blocks `block` (halves) and `block + 4` (interleaved).
unsafe fn store<T: Element, C: KvElement>(x: u32, out: *mut u32, block: usize, t: usize) {
    let [h0, h1] = C::widen_halves::<T>(x);
    let [i0, i1] = C::widen_interleaved::<T>(x);
    unsafe {
        *out.add(block * 128 + 2 * t) = h0;
        *out.add(block * 128 + 2 * t + 1) = h1;
        *out.add((block + 4) * 128 + 2 * t) = i0;
        *out.add((block + 4) * 128 + 2 * t + 1) = i1;
    }
}

/// `src`: 64 u32 (the bytes 0..=255 in order); `out`: 1024 u32.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn probe_fp8_widen(src: *const u32, out: *mut u32) {
    let t = thread_idx_x() as usize;
    let x = unsafe { *src.add(t) };
    unsafe {
        store::<F16, E4m3>(x, out, 0, t);
        store::<Bf16, E4m3>(x, out, 1, t);
        store::<F16, E5m2>(x, out, 2, t);
        store::<Bf16, E5m2>(x, out, 3, t);
    }
}
