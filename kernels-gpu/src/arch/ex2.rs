//! Fast exponentials and logarithms on the special function unit.

/// `ex2.approx.ftz.f32`: 2^x (-inf gives +0).
#[inline(always)]
pub fn ex2_approx_f32(x: f32) -> f32 {
    let r: f32;
    unsafe { core::arch::asm!("ex2.approx.ftz.f32 {r}, {x};", r = out(reg32) r, x = in(reg32) x, options(pure, nomem, nostack)) }
    r
}

/// `lg2.approx.ftz.f32`: log2(x).
#[inline(always)]
pub fn lg2_approx_f32(x: f32) -> f32 {
    let r: f32;
    unsafe { core::arch::asm!("lg2.approx.ftz.f32 {r}, {x};", r = out(reg32) r, x = in(reg32) x, options(pure, nomem, nostack)) }
    r
}

/// `rcp.approx.ftz.f32`: 1/x.
#[inline(always)]
pub fn rcp_approx_f32(x: f32) -> f32 {
    let r: f32;
    unsafe { core::arch::asm!("rcp.approx.ftz.f32 {r}, {x};", r = out(reg32) r, x = in(reg32) x, options(pure, nomem, nostack)) }
    r
}
