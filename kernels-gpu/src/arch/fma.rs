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

/// `mul.rn.f16x2`: both halves of a packed f16 pair times those of `b`, each rounded once.
#[inline(always)]
pub fn mul_rn_f16x2(a: u32, b: u32) -> u32 {
    let r: u32;
    unsafe {
        core::arch::asm!("mul.rn.f16x2 {r}, {a}, {b};",
            r = out(reg32) r, a = in(reg32) a, b = in(reg32) b, options(pure, nomem, nostack))
    }
    r
}

/// `fma.rn.bf16x2`: both halves of a packed bf16 pair, `a * b + c`, each rounded once (there is
/// no `mul.bf16x2` before sm_90).
#[inline(always)]
pub fn fma_rn_bf16x2(a: u32, b: u32, c: u32) -> u32 {
    let r: u32;
    unsafe {
        core::arch::asm!("fma.rn.bf16x2 {r}, {a}, {b}, {c};",
            r = out(reg32) r, a = in(reg32) a, b = in(reg32) b, c = in(reg32) c, options(pure, nomem, nostack))
    }
    r
}
