//! f32 pairs to packed 16-bit pairs (round to nearest even). The first argument lands in the
//! low half, matching element order in memory.

/// `cvt.rn.f16x2.f32`
#[inline(always)]
pub fn cvt_rn_f16x2_f32(lo: f32, hi: f32) -> u32 {
    let r: u32;
    unsafe {
        core::arch::asm!("cvt.rn.f16x2.f32 {r}, {hi}, {lo};",
            r = out(reg32) r, hi = in(reg32) hi, lo = in(reg32) lo, options(pure, nomem, nostack))
    }
    r
}

/// `cvt.rn.bf16x2.f32`
#[inline(always)]
pub fn cvt_rn_bf16x2_f32(lo: f32, hi: f32) -> u32 {
    let r: u32;
    unsafe {
        core::arch::asm!("cvt.rn.bf16x2.f32 {r}, {hi}, {lo};",
            r = out(reg32) r, hi = in(reg32) hi, lo = in(reg32) lo, options(pure, nomem, nostack))
    }
    r
}
