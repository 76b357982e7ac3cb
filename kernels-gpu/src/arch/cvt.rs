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

/// `cvt.f32.f16` of both halves of a packed pair (low half first).
#[inline(always)]
pub fn cvt_f32x2_f16x2(v: u32) -> [f32; 2] {
    let (lo, hi): (f32, f32);
    unsafe {
        core::arch::asm!("{{ .reg .b16 l, h; mov.b32 {{l, h}}, {v}; cvt.f32.f16 {lo}, l; cvt.f32.f16 {hi}, h; }}",
            v = in(reg32) v, lo = out(reg32) lo, hi = out(reg32) hi, options(pure, nomem, nostack))
    }
    [lo, hi]
}
