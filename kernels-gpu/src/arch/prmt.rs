//! `prmt.b32`: picks four bytes out of the eight of two registers.

/// `prmt.b32 d, a, b, sel`: byte `i` of the result is byte `(sel >> 4i) & 7` of `b:a` (bytes 0-3
/// from `a`, 4-7 from `b`). The selector is a register, so that lanes may select differently.
#[inline(always)]
pub fn prmt(a: u32, b: u32, sel: u32) -> u32 {
    let r: u32;
    unsafe {
        core::arch::asm!("prmt.b32 {r}, {a}, {b}, {sel};", r = out(reg32) r, a = in(reg32) a, b = in(reg32) b, sel = in(reg32) sel,
            options(pure, nomem, nostack))
    }
    r
}
