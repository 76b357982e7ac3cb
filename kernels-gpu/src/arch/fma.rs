//! Fused multiply-add. Rust's `a * b + c` becomes `mul.rn` + `add.rn`, whose explicit rounding
//! forbids ptxas to fuse them; this is the single-rounding form.

/// `fma.rn.f32`: `a * b + c`, rounded once.
#[inline(always)]
pub fn fma_rn_f32(a: f32, b: f32, c: f32) -> f32 {
    let r: f32;
    unsafe {
        core::arch::asm!("fma.rn.f32 {r}, {a}, {b}, {c};",
            r = out(reg32) r, a = in(reg32) a, b = in(reg32) b, c = in(reg32) c, options(pure, nomem, nostack))
    }
    r
}
