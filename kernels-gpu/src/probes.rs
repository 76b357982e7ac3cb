//! Minimal kernels that prove each instruction family on the GPU against a CPU computation.
//! Each is launched and checked by `tests/tests/probes.rs`, which documents the launch
//! geometry next to the CPU reference. Names start with `probe_` (only `flash_*` are hot).
//!
//! * [`mma`]: `ldmatrix` + `mma.sync` m16n8k16 (both modules).
//! * [`fp8`]: FP8 widening (`mul.rn.f16x2` and the bit moves around it) of every byte, both
//!   formats, to f16 and bf16 (both modules).
//! * [`cp_async`]: a 3-stage `cp.async` ring through shared memory (both modules).
//! * [`mbarrier`]: a full/empty mbarrier handshake between two warps (sm_90a).
//! * [`wgmma`]: `wgmma.mma_async` m64nNk16 on 128B-swizzled shared memory (sm_90a).
//! * [`tma`]: a `cp.async.bulk.tensor.2d` tile load completing on an mbarrier (sm_90a).
//! * [`reduce`]: the backward pass's warp sum, f16 widening, 4-byte `cp.async`, `red.add.f32`
//!   and `ld.acquire` (both modules), its 8- and 16-byte vector reductions and a bulk copy into
//!   shared memory (sm_90a); the CTA-wide count of `barrier.red.popc` (both modules).
//! * [`stmatrix`]: `stmatrix` of four 8x8 matrices to rows each lane addresses (sm_90a), as
//!   the FP8 kernels' V transpose stores.
//! * [`wgmma_tb`]: `wgmma` with A from registers and an N-major (transposed) B, as the Hopper
//!   kernel's `P V` (sm_90a; checked by `tests/tests/forward_wgmma.rs`), and with both A and
//!   B MN-major, as the Hopper backward's `dQ = dS K` (checked by `tests/tests/backward.rs`).

pub mod cp_async;
pub mod fp8;
#[cfg(target_feature = "sm_90a")]
pub mod mbarrier;
pub mod mma;
pub mod reduce;
#[cfg(target_feature = "sm_90a")]
pub mod stmatrix;
#[cfg(target_feature = "sm_90a")]
pub mod tma;
#[cfg(target_feature = "sm_90a")]
pub mod wgmma;
#[cfg(target_feature = "sm_90a")]
pub mod wgmma_tb;

/// `ld.shared.b32` (the arch layer has only the 16-byte form).
#[inline(always)]
#[allow(dead_code)]
unsafe fn ld_shared_b32(addr: u32) -> u32 {
    let v: u32;
    unsafe { core::arch::asm!("ld.shared.b32 {v}, [{p}];", v = out(reg32) v, p = in(reg32) addr, options(readonly, nostack)) }
    v
}

/// Byte offset of 16-byte chunk `chunk` (0..8) of row `row` in a tile of 128-byte rows stored
/// with the 128-byte swizzle (TMA `SWIZZLE_128B`, wgmma `Swizzle::B128`): the chunk index is
/// XORed with the row index modulo 8. The tile must start on a 1024-byte boundary.
#[inline(always)]
#[allow(dead_code)]
fn sw128_offset(row: u32, chunk: u32) -> u32 {
    row * 128 + ((chunk ^ (row & 7)) << 4)
}

/// Dynamic shared memory rounded up to 1024 bytes (the 128B swizzle's repeat), for probes
/// that depend on the pattern's phase; their launches add 1024 bytes of slack.
#[inline(always)]
#[allow(dead_code)]
fn dsmem_base_1024() -> u32 {
    (crate::arch::smem::dsmem_base() + 1023) & !1023
}
