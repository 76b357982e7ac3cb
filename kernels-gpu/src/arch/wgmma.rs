//! `wgmma`: warpgroup (4 warps, 128 threads) asynchronous tensor-core MMA, sm_90a only.
//!
//! `wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}`: D(64xN, f32) = A(64x16) * B(16xN)
//! (+ D when `scale_d`). B always comes from shared memory through a [`SmemDesc`]; A comes from
//! shared memory too (`_ss`-style, the plain names) or from registers (`_rs`). Operands are
//! K-major unless a name says otherwise (`imm-trans-a = imm-trans-b = 0`): A is stored M x K
//! and B is stored N x K, both with K contiguous, the `A * B^T` of attention's `Q K^T`; `_tb`
//! takes B N-major and `_ss_tt` both A and B MN-major ([`crate::arch::wgmma_mn`]).
//!
//! Sequence: [`wgmma_fence_operands`] on D (pins its current values in registers), then
//! [`wgmma_fence`] (orders earlier register writes to D/A before the async reads), one or more
//! `mma_async`, [`wgmma_commit_group`], [`wgmma_wait_group`], then [`wgmma_fence_operands`] on D
//! again before reading it. Every thread of the warpgroup must execute each of these, converged
//! (`.sync.aligned`). Shared memory written with ordinary stores must be made visible to the
//! async proxy first (`fence.proxy.async.shared::cta` + CTA barrier). Where ptxas cannot see a
//! `wgmma.fence` between the last register write and a wgmma (register copies the compiler put
//! after the fence, or a fence hoisted into another basic block), it inserts one itself and
//! says so (info C7519): correct, but a sign the code around the wgmmas is not tight.
//!
//! Register fragments (warp `w` = warp index within the warpgroup, `g` = lane / 4, `t` = lane % 4):
//! * D, `[f32; N/2]`: `d[4i + 2h + j]` is row `16w + g + 8h`, column `8i + 2t + j`
//!   (i in 0..N/8, h, j in 0..2): one m16n8 `mma.sync` C fragment per 8 columns.
//! * A (`_rs`), `[u32; 4]` of packed pairs: the m16n8k16 `mma.sync` A fragment of rows
//!   `16w..16w+16`: `a[0]` = (row g, k 2t..2t+1), `a[1]` = (row g+8, same k),
//!   `a[2]` = (row g, k 8+2t..), `a[3]` = (row g+8, k 8+2t..), low half = lower k.
//!   These registers must stay unchanged until the wgmma has been waited for.

/// Swizzle mode field of a [`SmemDesc`] (bits 62-63). The pattern XORs the 16-byte chunk
/// index within a row (address bits 4..6) with the row index within the repeating pattern
/// (address bits 7..9 for 128B): the same pattern TMA's `CU_TENSOR_MAP_SWIZZLE_*` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum Swizzle {
    /// No swizzle ("interleave"): 8x16-byte core matrices, placed by LBO and SBO.
    None = 0,
    /// 128-byte swizzle: rows of 128 bytes, pattern repeats every 8 rows (1024 bytes).
    B128 = 1,
    /// 64-byte swizzle: rows of 64 bytes, pattern repeats every 512 bytes.
    B64 = 2,
    /// 32-byte swizzle: rows of 32 bytes, pattern repeats every 256 bytes.
    B32 = 3,
}

/// A shared-memory matrix descriptor (PTX ISA "Matrix Descriptor Format" of wgmma):
///
/// | bits  | field                                                                  |
/// |-------|------------------------------------------------------------------------|
/// | 0-13  | start address, `(addr & 0x3FFFF) >> 4`                                 |
/// | 16-29 | leading dimension byte offset (LBO) `>> 4`                              |
/// | 32-45 | stride dimension byte offset (SBO) `>> 4`                               |
/// | 49-51 | base offset: 0 when the swizzle pattern starts on its repeat boundary   |
/// |       | (1024 B for 128B swizzle), else `(pattern start >> 7) & 7`              |
/// | 62-63 | [`Swizzle`] mode                                                        |
///
/// For K-major operands: SBO is the distance between consecutive groups of 8 rows (M or N);
/// LBO is the distance between the two 8-column (16-byte) core matrices along K without
/// swizzle, and unused ("assumed 1") with swizzle. A K-major 128B-swizzled tile of 16-bit
/// elements therefore has rows of 64 elements (128 bytes), SBO = 1024, and the k-th group of
/// 16 columns starts `32 * k` bytes after the tile: the hardware applies the XOR to the
/// absolute address, so stepping the start address within a row stays on the pattern as long
/// as the tile itself is 1024-byte aligned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(transparent)]
pub struct SmemDesc(pub u64);

impl SmemDesc {
    /// Descriptor of a matrix starting at shared address `addr` (16-byte aligned), with the
    /// given byte offsets (multiples of 16, below 256 KiB) and swizzle, base offset 0.
    #[inline(always)]
    pub const fn new(addr: u32, lbo_bytes: u32, sbo_bytes: u32, swizzle: Swizzle) -> Self {
        SmemDesc(
            encode(addr)
                | (encode(lbo_bytes) << 16)
                | (encode(sbo_bytes) << 32)
                | ((swizzle as u64) << 62),
        )
    }

    /// K-major 16-bit operand in 128B-swizzle atoms (8 rows x 64 elements, 1024 bytes, rows
    /// 128 bytes apart, 8-row groups `1024` bytes apart): what TMA with
    /// `CU_TENSOR_MAP_SWIZZLE_128B` and a 64-element inner box writes. `addr` must be
    /// 1024-byte aligned (plus `32 * k` for the k-th 16-column step, see [`SmemDesc::add`]).
    #[inline(always)]
    pub const fn k_major_sw128(addr: u32) -> Self {
        Self::new(addr, 16, 1024, Swizzle::B128)
    }

    /// The same descriptor with its start address `bytes` further on (a multiple of 16), e.g.
    /// `32 * k` for the k-th 16-element step along K of a 128B-swizzled K-major tile.
    #[inline(always)]
    pub const fn add(self, bytes: u32) -> Self {
        // Start address is the low field: no carry into LBO while addresses stay below 256 KiB.
        SmemDesc(self.0 + (bytes as u64 >> 4))
    }

    /// The same descriptor with base offset `off` (0..8) in bits 49-51.
    #[inline(always)]
    pub const fn with_base_offset(self, off: u32) -> Self {
        SmemDesc((self.0 & !(0x7 << 49)) | (((off & 0x7) as u64) << 49))
    }
}

#[inline(always)]
const fn encode(x: u32) -> u64 {
    ((x & 0x3FFFF) >> 4) as u64
}

/// `wgmma.fence.sync.aligned`: orders this warpgroup's earlier register accesses (accumulators,
/// A fragments) before the following `wgmma.mma_async`s. Needed before the first wgmma and
/// whenever D or A registers were written in between.
#[inline(always)]
pub fn wgmma_fence() {
    unsafe { core::arch::asm!("wgmma.fence.sync.aligned;", options(nostack)) }
}

/// `wgmma.commit_group.sync.aligned`: closes the group of wgmmas issued since the last commit.
#[inline(always)]
pub fn wgmma_commit_group() {
    unsafe { core::arch::asm!("wgmma.commit_group.sync.aligned;", options(nostack)) }
}

/// `wgmma.wait_group.sync.aligned N`: waits until at most `N` committed groups are pending.
/// Their shared-memory operands may then be overwritten and their D read (after
/// [`wgmma_fence_operands`]).
#[inline(always)]
pub fn wgmma_wait_group<const N: u32>() {
    unsafe { core::arch::asm!("wgmma.wait_group.sync.aligned {n};", n = const N, options(nostack)) }
}

/// Compiler-only fence on one accumulator register: emits nothing, but makes the value an
/// output of an ordered asm statement, so code using it cannot be hoisted above an earlier
/// [`wgmma_wait_group`] (to the compiler, `mma_async` wrote D when it was *issued*).
#[inline(always)]
pub fn wgmma_fence_operand(x: &mut f32) {
    unsafe { core::arch::asm!("/* wgmma operand {x} */", x = inout(reg32) *x, options(nomem, nostack)) }
}

/// [`wgmma_fence_operand`] on every register of an accumulator.
#[inline(always)]
pub fn wgmma_fence_operands<const K: usize>(d: &mut [f32; K]) {
    for x in d.iter_mut() {
        wgmma_fence_operand(x);
    }
}

/// Accumulator of an m64n32 wgmma: 16 f32 per thread.
pub type AccN32 = [f32; 16];
/// Accumulator of an m64n64 wgmma: 32 f32 per thread.
pub type AccN64 = [f32; 32];
/// Accumulator of an m64n128 wgmma: 64 f32 per thread.
pub type AccN128 = [f32; 64];
/// Accumulator of an m64n256 wgmma: 128 f32 per thread.
pub type AccN256 = [f32; 128];
/// A fragment of a register-sourced (`_rs`) wgmma: 64x16 16-bit elements over the warpgroup.
pub type FragA = [u32; 4];

// "{0}, {1}, ..." for the positional accumulator operands.
macro_rules! wgmma_regs {
    ($first:literal $($rest:literal)*) => { concat!("{", $first, "}" $(, ", {", $rest, "}")*) };
}

// Per shape: both operands from shared memory (`ss`), A from registers with a K-major B
// (`rs`), A from registers with an N-major B (`rs_tb`, `imm-trans-b = 1`: see
// [`crate::arch::wgmma_mn`] for its layout), both from shared memory MN-major (`ss_tt`, the
// backward's `dQ = dS K` with dS stored transposed), and A from shared memory K-major with an
// N-major B (`ss_tb`, the head-dim-256 backward's `dV += P^T dO` with P^T in shared memory),
// each for f16 and bf16.
macro_rules! wgmma_shape {
    ($shape:literal, $acc:ty, [$($i:literal)+],
     $ss_f16:ident, $ss_bf16:ident, $rs_f16:ident, $rs_bf16:ident, $tb_f16:ident, $tb_bf16:ident,
     $tt_f16:ident, $tt_bf16:ident, $stb_f16:ident, $stb_bf16:ident) => {
        wgmma_shape!(@ss $shape, "f16", $acc, [$($i)+], $ss_f16, "0, 0",
            "A and B from shared memory (K-major descriptors): `d = a * b^T + (scale_d ? d : 0)`.");
        wgmma_shape!(@ss $shape, "bf16", $acc, [$($i)+], $ss_bf16, "0, 0",
            "A and B from shared memory (K-major descriptors): `d = a * b^T + (scale_d ? d : 0)`.");
        wgmma_shape!(@ss $shape, "f16", $acc, [$($i)+], $tt_f16, "1, 1",
            "A and B from shared memory, both MN-major (`imm-trans-a = imm-trans-b = 1`, see [`crate::arch::wgmma_mn`]): `d = a * b + (scale_d ? d : 0)`.");
        wgmma_shape!(@ss $shape, "bf16", $acc, [$($i)+], $tt_bf16, "1, 1",
            "A and B from shared memory, both MN-major (`imm-trans-a = imm-trans-b = 1`, see [`crate::arch::wgmma_mn`]): `d = a * b + (scale_d ? d : 0)`.");
        wgmma_shape!(@ss $shape, "f16", $acc, [$($i)+], $stb_f16, "0, 1",
            "A from shared memory K-major, B MN-major (`imm-trans-b = 1`, see [`crate::arch::wgmma_mn`]): `d = a * b + (scale_d ? d : 0)`.");
        wgmma_shape!(@ss $shape, "bf16", $acc, [$($i)+], $stb_bf16, "0, 1",
            "A from shared memory K-major, B MN-major (`imm-trans-b = 1`, see [`crate::arch::wgmma_mn`]): `d = a * b + (scale_d ? d : 0)`.");
        wgmma_shape!(@rs $shape, "f16", $acc, [$($i)+], $rs_f16, "0",
            "B from shared memory (K-major descriptor): `d = a * b^T + (scale_d ? d : 0)`.");
        wgmma_shape!(@rs $shape, "bf16", $acc, [$($i)+], $rs_bf16, "0",
            "B from shared memory (K-major descriptor): `d = a * b^T + (scale_d ? d : 0)`.");
        wgmma_shape!(@rs $shape, "f16", $acc, [$($i)+], $tb_f16, "1",
            "B N-major (`imm-trans-b = 1`, see [`crate::arch::wgmma_mn`]): `d = a * b + (scale_d ? d : 0)`.");
        wgmma_shape!(@rs $shape, "bf16", $acc, [$($i)+], $tb_bf16, "1",
            "B N-major (`imm-trans-b = 1`, see [`crate::arch::wgmma_mn`]): `d = a * b + (scale_d ? d : 0)`.");
    };
    (@ss $shape:literal, $ty:literal, $acc:ty, [$($i:literal)+], $name:ident, $trans:literal, $what:literal) => {
        #[doc = concat!("`wgmma.mma_async.sync.aligned.", $shape, ".f32.", $ty, ".", $ty, "`, ", $what)]
        #[inline(always)]
        pub unsafe fn $name(d: &mut $acc, a: SmemDesc, b: SmemDesc, scale_d: bool) {
            unsafe {
                core::arch::asm!(
                    concat!("{{ .reg .pred p; setp.ne.b32 p, {sd}, 0; wgmma.mma_async.sync.aligned.",
                        $shape, ".f32.", $ty, ".", $ty, " {{", wgmma_regs!($($i)+),
                        "}}, {a}, {b}, p, 1, 1, ", $trans, "; }}"),
                    $(inout(reg32) d[$i],)+
                    a = in(reg64) a.0, b = in(reg64) b.0, sd = in(reg32) scale_d as u32,
                    options(nostack))
            }
        }
    };
    (@rs $shape:literal, $ty:literal, $acc:ty, [$($i:literal)+], $name:ident, $tb:literal, $what:literal) => {
        #[doc = concat!("`wgmma.mma_async.sync.aligned.", $shape, ".f32.", $ty, ".", $ty,
            "`, A from registers ([`FragA`]), ", $what)]
        #[inline(always)]
        pub unsafe fn $name(d: &mut $acc, a: &FragA, b: SmemDesc, scale_d: bool) {
            unsafe {
                core::arch::asm!(
                    concat!("{{ .reg .pred p; setp.ne.b32 p, {sd}, 0; wgmma.mma_async.sync.aligned.",
                        $shape, ".f32.", $ty, ".", $ty, " {{", wgmma_regs!($($i)+),
                        "}}, {{{a0}, {a1}, {a2}, {a3}}}, {b}, p, 1, 1, ", $tb, "; }}"),
                    $(inout(reg32) d[$i],)+
                    a0 = in(reg32) a[0], a1 = in(reg32) a[1], a2 = in(reg32) a[2], a3 = in(reg32) a[3],
                    b = in(reg64) b.0, sd = in(reg32) scale_d as u32,
                    options(nostack))
            }
        }
    };
}

wgmma_shape!("m64n32k16", AccN32,
    [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15],
    wgmma_mma_async_m64n32k16_f32_f16, wgmma_mma_async_m64n32k16_f32_bf16,
    wgmma_mma_async_m64n32k16_f32_f16_rs, wgmma_mma_async_m64n32k16_f32_bf16_rs,
    wgmma_mma_async_m64n32k16_f32_f16_rs_tb, wgmma_mma_async_m64n32k16_f32_bf16_rs_tb,
    wgmma_mma_async_m64n32k16_f32_f16_ss_tt, wgmma_mma_async_m64n32k16_f32_bf16_ss_tt,
    wgmma_mma_async_m64n32k16_f32_f16_ss_tb, wgmma_mma_async_m64n32k16_f32_bf16_ss_tb);

wgmma_shape!("m64n64k16", AccN64,
    [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31],
    wgmma_mma_async_m64n64k16_f32_f16, wgmma_mma_async_m64n64k16_f32_bf16,
    wgmma_mma_async_m64n64k16_f32_f16_rs, wgmma_mma_async_m64n64k16_f32_bf16_rs,
    wgmma_mma_async_m64n64k16_f32_f16_rs_tb, wgmma_mma_async_m64n64k16_f32_bf16_rs_tb,
    wgmma_mma_async_m64n64k16_f32_f16_ss_tt, wgmma_mma_async_m64n64k16_f32_bf16_ss_tt,
    wgmma_mma_async_m64n64k16_f32_f16_ss_tb, wgmma_mma_async_m64n64k16_f32_bf16_ss_tb);

wgmma_shape!("m64n128k16", AccN128,
    [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
     32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63],
    wgmma_mma_async_m64n128k16_f32_f16, wgmma_mma_async_m64n128k16_f32_bf16,
    wgmma_mma_async_m64n128k16_f32_f16_rs, wgmma_mma_async_m64n128k16_f32_bf16_rs,
    wgmma_mma_async_m64n128k16_f32_f16_rs_tb, wgmma_mma_async_m64n128k16_f32_bf16_rs_tb,
    wgmma_mma_async_m64n128k16_f32_f16_ss_tt, wgmma_mma_async_m64n128k16_f32_bf16_ss_tt,
    wgmma_mma_async_m64n128k16_f32_f16_ss_tb, wgmma_mma_async_m64n128k16_f32_bf16_ss_tb);

wgmma_shape!("m64n256k16", AccN256,
    [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
     32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63
     64 65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80 81 82 83 84 85 86 87 88 89 90 91 92 93 94 95
     96 97 98 99 100 101 102 103 104 105 106 107 108 109 110 111 112 113 114 115 116 117 118 119 120 121 122 123 124 125 126 127],
    wgmma_mma_async_m64n256k16_f32_f16, wgmma_mma_async_m64n256k16_f32_bf16,
    wgmma_mma_async_m64n256k16_f32_f16_rs, wgmma_mma_async_m64n256k16_f32_bf16_rs,
    wgmma_mma_async_m64n256k16_f32_f16_rs_tb, wgmma_mma_async_m64n256k16_f32_bf16_rs_tb,
    wgmma_mma_async_m64n256k16_f32_f16_ss_tt, wgmma_mma_async_m64n256k16_f32_bf16_ss_tt,
    wgmma_mma_async_m64n256k16_f32_f16_ss_tb, wgmma_mma_async_m64n256k16_f32_bf16_ss_tb);

// FP8 (`.e4m3` A and B, k32 per instruction): K-major operands only (FP8 wgmma has no
// transposed forms), A from shared memory (`ss`) or registers (`rs`, [`FragA`] holding 64x32
// bytes over the warpgroup: `a[0]` = (row g, k 4t..4t+3), `a[1]` = (row g+8, same k), `a[2]`
// = (row g, k 16+4t..), `a[3]` = (row g+8, k 16+4t..), lowest k in the low byte).
macro_rules! wgmma_fp8_shape {
    ($shape:literal, $acc:ty, [$($i:literal)+], $ss:ident, $rs:ident) => {
        wgmma_fp8_shape!(@ss $shape, $acc, [$($i)+], $ss);
        wgmma_fp8_shape!(@rs $shape, $acc, [$($i)+], $rs);
    };
    (@ss $shape:literal, $acc:ty, [$($i:literal)+], $name:ident) => {
        #[doc = concat!("`wgmma.mma_async.sync.aligned.", $shape, ".f32.e4m3.e4m3`, A and B from shared memory (K-major descriptors): `d = a * b^T + (scale_d ? d : 0)`.")]
        #[inline(always)]
        pub unsafe fn $name(d: &mut $acc, a: SmemDesc, b: SmemDesc, scale_d: bool) {
            unsafe {
                core::arch::asm!(
                    concat!("{{ .reg .pred p; setp.ne.b32 p, {sd}, 0; wgmma.mma_async.sync.aligned.",
                        $shape, ".f32.e4m3.e4m3 {{", wgmma_regs!($($i)+), "}}, {a}, {b}, p, 1, 1; }}"),
                    $(inout(reg32) d[$i],)+
                    a = in(reg64) a.0, b = in(reg64) b.0, sd = in(reg32) scale_d as u32,
                    options(nostack))
            }
        }
    };
    (@rs $shape:literal, $acc:ty, [$($i:literal)+], $name:ident) => {
        #[doc = concat!("`wgmma.mma_async.sync.aligned.", $shape, ".f32.e4m3.e4m3`, A from registers ([`FragA`], 8-bit), B from shared memory (K-major descriptor): `d = a * b^T + (scale_d ? d : 0)`.")]
        #[inline(always)]
        pub unsafe fn $name(d: &mut $acc, a: &FragA, b: SmemDesc, scale_d: bool) {
            unsafe {
                core::arch::asm!(
                    concat!("{{ .reg .pred p; setp.ne.b32 p, {sd}, 0; wgmma.mma_async.sync.aligned.",
                        $shape, ".f32.e4m3.e4m3 {{", wgmma_regs!($($i)+),
                        "}}, {{{a0}, {a1}, {a2}, {a3}}}, {b}, p, 1, 1; }}"),
                    $(inout(reg32) d[$i],)+
                    a0 = in(reg32) a[0], a1 = in(reg32) a[1], a2 = in(reg32) a[2], a3 = in(reg32) a[3],
                    b = in(reg64) b.0, sd = in(reg32) scale_d as u32,
                    options(nostack))
            }
        }
    };
}

wgmma_fp8_shape!("m64n64k32", AccN64,
    [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31],
    wgmma_mma_async_m64n64k32_f32_e4m3, wgmma_mma_async_m64n64k32_f32_e4m3_rs);
wgmma_fp8_shape!("m64n128k32", AccN128,
    [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
     32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63],
    wgmma_mma_async_m64n128k32_f32_e4m3, wgmma_mma_async_m64n128k32_f32_e4m3_rs);
wgmma_fp8_shape!(@rs "m64n256k32", AccN256,
    [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
     32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63
     64 65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80 81 82 83 84 85 86 87 88 89 90 91 92 93 94 95
     96 97 98 99 100 101 102 103 104 105 106 107 108 109 110 111 112 113 114 115 116 117 118 119 120 121 122 123 124 125 126 127],
    wgmma_mma_async_m64n256k32_f32_e4m3_rs);
