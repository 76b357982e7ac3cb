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
//! The instructions themselves (`wgmma_mma_async_m64n*k16_f32_*_rs_tb`) are generated with the
//! other wgmma forms in [`crate::arch::wgmma`], which also has the fence/commit/wait protocol
//! and the register fragments.
use crate::arch::wgmma::FragA;

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
