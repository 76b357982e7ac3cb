//! `mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}`: D = A(16x16) * B(16x8) + C, f32 accumulate.
//!
//! Fragments per lane (g = lane / 4, t = lane % 4):
//! A: `[a0..a3]` = rows (g, g+8, g, g+8) x cols (2t..2t+1, same, 8+2t.., same), packed pairs;
//! B: `[b0, b1]` = rows k (2t..2t+1, 8+2t..) of column n = g;
//! C/D: `[c0..c3]` = (row g, cols 2t, 2t+1), (row g+8, cols 2t, 2t+1).

/// A fragment of a 16x16 16-bit tile (4 packed pairs).
pub type FragA = [u32; 4];
/// B fragment of a 16x8 16-bit tile (2 packed pairs).
pub type FragB = [u32; 2];
/// Accumulator fragment of a 16x8 f32 tile.
pub type FragC = [f32; 4];

macro_rules! mma_m16n8k16 {
    ($(#[$doc:meta])* $name:ident, $ty:literal) => {
        $(#[$doc])*
        #[inline(always)]
        pub fn $name(c: &mut FragC, a: &FragA, b: &FragB) {
            unsafe {
                core::arch::asm!(
                    concat!("mma.sync.aligned.m16n8k16.row.col.f32.", $ty, ".", $ty, ".f32 ",
                        "{{{c0}, {c1}, {c2}, {c3}}}, {{{a0}, {a1}, {a2}, {a3}}}, {{{b0}, {b1}}}, ",
                        "{{{c0}, {c1}, {c2}, {c3}}};"),
                    c0 = inout(reg32) c[0], c1 = inout(reg32) c[1], c2 = inout(reg32) c[2], c3 = inout(reg32) c[3],
                    a0 = in(reg32) a[0], a1 = in(reg32) a[1], a2 = in(reg32) a[2], a3 = in(reg32) a[3],
                    b0 = in(reg32) b[0], b1 = in(reg32) b[1],
                    options(pure, nomem, nostack))
            }
        }
    };
}

mma_m16n8k16!(/// f16 inputs.
    mma_m16n8k16_f32_f16, "f16");
mma_m16n8k16!(/// bf16 inputs.
    mma_m16n8k16_f32_bf16, "bf16");
