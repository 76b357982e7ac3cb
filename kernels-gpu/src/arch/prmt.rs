//! `prmt.b32`: picks four bytes out of the eight of two registers.

/// `prmt.b32 d, a, b, SEL`: byte `i` of the result is byte `(SEL >> 4i) & 7` of `b:a` (bytes 0-3
/// from `a`, 4-7 from `b`).
#[inline(always)]
pub fn prmt<const SEL: u32>(a: u32, b: u32) -> u32 {
    let r: u32;
    unsafe {
        core::arch::asm!("prmt.b32 {r}, {a}, {b}, {sel};", r = out(reg32) r, a = in(reg32) a, b = in(reg32) b, sel = const SEL,
            options(pure, nomem, nostack))
    }
    r
}
