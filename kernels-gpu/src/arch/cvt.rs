//! f32 pairs to packed 16-bit pairs, and f32 quads to packed FP8 bytes (round to nearest even).
//! The first argument lands in the low half (byte), matching element order in memory.

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

/// Four f32 as four FP8 E4M3 bytes (`a` in the low byte), each rounded to nearest even and
/// saturated to ±448 (`cvt.rn.satfinite.e4m3x2.f32`, sm_89+: the first source lands in the
/// upper byte of each pair).
#[inline(always)]
pub fn cvt_rn_satfinite_e4m3x4_f32(a: f32, b: f32, c: f32, d: f32) -> u32 {
    let r: u32;
    unsafe {
        core::arch::asm!("{{ .reg .b16 l, h; cvt.rn.satfinite.e4m3x2.f32 l, {b}, {a}; cvt.rn.satfinite.e4m3x2.f32 h, {d}, {c}; mov.b32 {r}, {{l, h}}; }}",
            r = out(reg32) r, a = in(reg32) a, b = in(reg32) b, c = in(reg32) c, d = in(reg32) d, options(pure, nomem, nostack))
    }
    r
}
