//! `wgmma` with an N-major (transposed) B operand, sm_90a only: the `O += P V` of attention,
//! where V is stored row-major (`[keys, head_dim]`, head_dim contiguous) and is the `K x N`
//! B operand with N contiguous. A comes from registers ([`FragA`], P after the softmax).
//!
//! `wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}` with `imm-trans-b = 1` (allowed for
//! 16-bit types only). The B descriptor describes an MN-major layout (PTX ISA, "Shared Memory
//! Matrix Layout", canonical MN-major 128B swizzling `((8,8,m),(8,k)):((1,8,LBO),(64,SBO))` in
//! elements):
//! * a swizzle atom is 8 rows along K (keys) of 64 elements along N (128 bytes each), 1024
//!   bytes: exactly a 128B-swizzled box of 8 rows x 64 columns as TMA writes it;
//! * LBO = byte distance between atoms along N (the next 64 columns of head_dim);
//! * SBO = byte distance between atoms along K (the next 8 keys), 1024 for packed atoms.
//!
//! See [`crate::arch::wgmma`] for the fence/commit/wait protocol and the register fragments.
use crate::arch::wgmma::{AccN64, AccN128, AccN256, FragA, SmemDesc};

/// Compiler-only fence on the registers of an A fragment (see
/// [`crate::arch::wgmma::wgmma_fence_operand`]): pins their values before a `wgmma.fence`, so
/// the conversions producing them are not scheduled between the fence and the wgmma.
#[inline(always)]
pub fn wgmma_fence_frag(a: &mut FragA) {
    unsafe {
        core::arch::asm!("/* wgmma A {0} {1} {2} {3} */",
            inout(reg32) a[0], inout(reg32) a[1], inout(reg32) a[2], inout(reg32) a[3], options(nomem, nostack))
    }
}

// "{0}, {1}, ..." for the positional accumulator operands.
macro_rules! wgmma_mn_regs {
    ($first:literal $($rest:literal)*) => { concat!("{", $first, "}" $(, ", {", $rest, "}")*) };
}

macro_rules! wgmma_rs_tb {
    ($shape:literal, $acc:ty, [$($i:literal)+], $f16:ident, $bf16:ident) => {
        wgmma_rs_tb!(@one $shape, "f16", $acc, [$($i)+], $f16);
        wgmma_rs_tb!(@one $shape, "bf16", $acc, [$($i)+], $bf16);
    };
    (@one $shape:literal, $ty:literal, $acc:ty, [$($i:literal)+], $name:ident) => {
        #[doc = concat!("`wgmma.mma_async.sync.aligned.", $shape, ".f32.", $ty, ".", $ty,
            "`, A from registers, B N-major (`imm-trans-b = 1`, see the module docs): ",
            "`d = a * b + (scale_d ? d : 0)`.")]
        #[inline(always)]
        pub unsafe fn $name(d: &mut $acc, a: &FragA, b: SmemDesc, scale_d: bool) {
            unsafe {
                core::arch::asm!(
                    concat!("{{ .reg .pred p; setp.ne.b32 p, {sd}, 0; wgmma.mma_async.sync.aligned.",
                        $shape, ".f32.", $ty, ".", $ty, " {{", wgmma_mn_regs!($($i)+),
                        "}}, {{{a0}, {a1}, {a2}, {a3}}}, {b}, p, 1, 1, 1; }}"),
                    $(inout(reg32) d[$i],)+
                    a0 = in(reg32) a[0], a1 = in(reg32) a[1], a2 = in(reg32) a[2], a3 = in(reg32) a[3],
                    b = in(reg64) b.0, sd = in(reg32) scale_d as u32,
                    options(nostack))
            }
        }
    };
}

wgmma_rs_tb!("m64n64k16", AccN64,
    [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31],
    wgmma_mma_async_m64n64k16_f32_f16_rs_tb, wgmma_mma_async_m64n64k16_f32_bf16_rs_tb);

wgmma_rs_tb!("m64n128k16", AccN128,
    [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
     32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63],
    wgmma_mma_async_m64n128k16_f32_f16_rs_tb, wgmma_mma_async_m64n128k16_f32_bf16_rs_tb);

wgmma_rs_tb!("m64n256k16", AccN256,
    [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
     32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63
     64 65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80 81 82 83 84 85 86 87 88 89 90 91 92 93 94 95
     96 97 98 99 100 101 102 103 104 105 106 107 108 109 110 111 112 113 114 115 116 117 118 119 120 121 122 123 124 125 126 127],
    wgmma_mma_async_m64n256k16_f32_f16_rs_tb, wgmma_mma_async_m64n256k16_f32_bf16_rs_tb);
