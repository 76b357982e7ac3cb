//! `set.{cmp}.u32.f16x2`: comparisons of packed f16 pairs, as masks. `probe_fp8_widen` proves it
//! on both outcomes: the FP8 widening marks its special patterns with it.

/// `set.ge.u32.f16x2 d, a, b`: each 16-bit half of the result all ones where that half of `a` is
/// at least that of `b` (both read as f16, subnormals as they are), else zero.
#[inline(always)]
pub fn set_ge_u32_f16x2(a: u32, b: u32) -> u32 {
    let r: u32;
    unsafe {
        core::arch::asm!("set.ge.u32.f16x2 {r}, {a}, {b};", r = out(reg32) r, a = in(reg32) a, b = in(reg32) b,
            options(pure, nomem, nostack))
    }
    r
}
