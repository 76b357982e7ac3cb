//! Shared-memory plan of a CTA: the Q tiles, the K and V rings, the mbarriers and the
//! work-tile slots.
//!
//! Every tile is stored as 64-column *slabs* (`head_dim / 64` of them), each slab `rows x 128`
//! bytes with the 128-byte swizzle: exactly what one TMA box of 64 columns with
//! `SWIZZLE_128B` writes, and the K-major (Q, K) or MN-major (V) layout the wgmma descriptors
//! read. Tiles start on 1024-byte boundaries (the swizzle's period), so descriptors need no
//! base offset. FP8 tiles (`EB = 1`) have slabs of up to 128 columns of one byte (see
//! [`super::fp8`]) and a third ring after V's, V transposed.
use flashrs_abi::sm90::{q_buffers, stage_bytes};

/// The CTA's dynamic shared memory, for Q/K head dimension `D`, V head dimension `DV` (at most
/// `D`: the 16-bit kernels stage the output in the Q tile), `BM` query rows, `BN` keys per
/// stage, `STAGES` stages and `EB` bytes per input element. Layout: the Q tiles (`BM x D`
/// each, [`Self::Q_BUFFERS`] of them), K stages (`BN x D`), V stages (`BN x DV`), with FP8
/// inputs the transposed V stages (`DV x BN`), then the barriers and the slots.
#[derive(Clone, Copy)]
pub struct Smem<const D: usize, const DV: usize, const BM: usize, const BN: usize, const STAGES: usize, const EB: usize = 2> {
    base: u32,
}

impl<const D: usize, const DV: usize, const BM: usize, const BN: usize, const STAGES: usize, const EB: usize> Smem<D, DV, BM, BN, STAGES, EB> {
    const Q_BYTES: u32 = (BM * D * EB) as u32;
    const K_BYTES: u32 = (BN * D * EB) as u32;
    const V_BYTES: u32 = (BN * DV * EB) as u32;
    /// Transposed V stages: FP8 only.
    const VT_STAGES: u32 = if EB == 1 { STAGES as u32 } else { 0 };
    /// Q tiles: work tile `i` of the CTA uses tile `i % Q_BUFFERS` (see [`q_buffers`]).
    pub const Q_BUFFERS: u32 = q_buffers(BM * D * EB, stage_bytes(D, DV, BN, EB), STAGES) as u32;
    const KV: u32 = Self::Q_BUFFERS * Self::Q_BYTES;
    const VT: u32 = Self::KV + STAGES as u32 * (Self::K_BYTES + Self::V_BYTES);
    const BARS: u32 = Self::VT + Self::VT_STAGES * Self::V_BYTES;
    /// The K/V barriers, after the two `q_full`s.
    const KV_BARS: u32 = Self::BARS + 16;

    /// The plan for dynamic shared memory starting at `base` (1024-byte aligned).
    #[inline(always)]
    pub fn new(base: u32) -> Self {
        Smem { base }
    }

    /// The Q tile of the CTA's work tile `i` and the parity of its fill there (producer and
    /// consumers walk the same work tiles, so both derive them from `i`).
    #[inline(always)]
    pub fn q_turn(i: u32) -> (u32, u32) {
        (i % Self::Q_BUFFERS, (i / Self::Q_BUFFERS) & 1)
    }

    /// Q tile `b`: `D / 64` slabs of `BM` rows.
    #[inline(always)]
    pub fn q(self, b: u32) -> u32 {
        self.base + b * Self::Q_BYTES
    }

    /// Consumer warpgroup `wg`'s first row of Q tile `b` (in its first slab).
    #[inline(always)]
    pub fn q_rows(self, b: u32, wg: u32) -> u32 {
        self.q(b) + 64 * wg * super::fp8::slab_row(D * EB) as u32
    }

    /// K stage `s`: `D / 64` slabs of `BN` rows.
    #[inline(always)]
    pub fn k(self, s: u32) -> u32 {
        self.base + Self::KV + s * Self::K_BYTES
    }

    /// V stage `s`: `DV / 64` slabs of `BN` rows. Written as the stride of a ring of equal K
    /// and V stages plus a correction, which kernels with `DV == D` fold away: so written,
    /// they compile to the same code as before V had a head dimension of its own.
    #[inline(always)]
    pub fn v(self, s: u32) -> u32 {
        self.base + Self::KV + (STAGES as u32 + s) * Self::V_BYTES + STAGES as u32 * (Self::K_BYTES - Self::V_BYTES)
    }

    /// Barrier: Q tile `b` landed (TMA transaction bytes), or the producer found no work tile
    /// to load there (a plain arrival; see [`Self::tile_slot`]).
    #[inline(always)]
    pub fn q_full(self, b: u32) -> u32 {
        self.base + Self::BARS + 8 * b
    }

    /// Barrier: K stage `s` landed.
    #[inline(always)]
    pub fn k_full(self, s: u32) -> u32 {
        self.base + Self::KV_BARS + 8 * s
    }

    /// Barrier: V stage `s` landed.
    #[inline(always)]
    pub fn v_full(self, s: u32) -> u32 {
        self.base + Self::KV_BARS + 8 * (STAGES as u32 + s)
    }

    /// Barrier: every consumer warp finished reading K stage `s`.
    #[inline(always)]
    pub fn k_empty(self, s: u32) -> u32 {
        self.base + Self::KV_BARS + 8 * (2 * STAGES as u32 + s)
    }

    /// Barrier: every consumer warp finished reading V stage `s`.
    #[inline(always)]
    pub fn v_empty(self, s: u32) -> u32 {
        self.base + Self::KV_BARS + 8 * (3 * STAGES as u32 + s)
    }

    /// Barrier: every consumer warp finished with Q tile `b` (its epilogue staged O there), so
    /// the next work tile's Q may be loaded into it.
    #[inline(always)]
    pub fn q_empty(self, b: u32) -> u32 {
        self.base + Self::KV_BARS + 8 * (4 * STAGES as u32 + b)
    }

    /// The index of the work tile whose Q goes to Q tile `b` (u32), written by the producer
    /// before it signals `q_full(b)` and read by the consumers after it completes; past the
    /// last tile when there is none.
    #[inline(always)]
    pub fn tile_slot(self, b: u32) -> u32 {
        self.base + Self::KV_BARS + 8 * (4 * STAGES as u32 + 2) + 4 * b
    }

    /// The first key (u32) of the K/V tile in stage `s`, for kernels whose key tiles come from
    /// a block mask ([`crate::mods::MaskMod::BLOCKS`]): written by the producer before it
    /// signals `k_full(s)`, read by the consumers before they release `k_empty(s)`.
    #[inline(always)]
    pub fn key_slot(self, s: u32) -> u32 {
        self.base + Self::KV_BARS + 8 * (4 * STAGES as u32 + 3) + 4 * s
    }

    /// FP8: transposed V stage `s`, `DV` rows of `BN` keys (see [`super::fp8`]).
    #[inline(always)]
    pub fn vt(self, s: u32) -> u32 {
        self.base + Self::VT + s * Self::V_BYTES
    }

    /// FP8: barrier, transposed V stage `s` written (one arrival per transposing thread).
    #[inline(always)]
    pub fn vt_full(self, s: u32) -> u32 {
        self.base + Self::KV_BARS + 8 * (5 * STAGES as u32 + 3) + 8 * s
    }

    /// FP8: barrier, every consumer warp finished reading transposed V stage `s`.
    #[inline(always)]
    pub fn vt_empty(self, s: u32) -> u32 {
        self.base + Self::KV_BARS + 8 * (6 * STAGES as u32 + 3) + 8 * s
    }

    /// FP8: the number of V tiles the producer loaded plus one (u32; 0 until then), written
    /// before its plain arrival on the next V stage's `v_full`, which then ends the
    /// transposing warps (see [`super::transpose`]).
    #[inline(always)]
    pub fn done_slot(self) -> u32 {
        self.base + Self::KV_BARS + 8 * (7 * STAGES as u32 + 3)
    }

    /// Paged kernels: barrier, the producer's thread named the work tile whose Q goes to Q
    /// tile `b` in [`Self::tile_slot`] (a plain arrival, before it loads that Q), for the
    /// threads that share its loads (see [`super::producer`]).
    #[inline(always)]
    pub fn tile_posted(self, b: u32) -> u32 {
        self.base + Self::KV_BARS + 8 * (7 * STAGES as u32 + 4) + 8 * b
    }

    /// Paged kernels: the block-table entries of the K/V tile in stage `s` that producer
    /// thread `role` (0 to 3) loads, one u32 per segment of the tile (at most
    /// [`MAX_SEGMENTS`]), written and read by that thread only.
    #[inline(always)]
    pub fn page_slots(self, s: u32, role: u32) -> u32 {
        const { assert!(16 + 8 * (7 * STAGES + 6) + 4 * 4 * MAX_SEGMENTS * STAGES <= 1024, "the barrier area holds the page slots") };
        self.base + Self::KV_BARS + 8 * (7 * STAGES as u32 + 6) + (4 * MAX_SEGMENTS) as u32 * (s + role * STAGES as u32)
    }

    /// The operand `O += P V` reads for stage `s`: V as loaded (16-bit) or transposed (FP8).
    #[inline(always)]
    pub fn pv(self, s: u32) -> u32 {
        if EB == 1 { self.vt(s) } else { self.v(s) }
    }

    /// Barrier: the operand of [`Self::pv`] is ready.
    #[inline(always)]
    pub fn pv_full(self, s: u32) -> u32 {
        if EB == 1 { self.vt_full(s) } else { self.v_full(s) }
    }

    /// Barrier: the consumers finished reading the operand of [`Self::pv`].
    #[inline(always)]
    pub fn pv_empty(self, s: u32) -> u32 {
        if EB == 1 { self.vt_empty(s) } else { self.v_empty(s) }
    }
}

/// Most segments (TMA boxes within one page, 16 rows or more) a paged kernel's key tile has.
pub const MAX_SEGMENTS: usize = 8;

/// Start of dynamic shared memory rounded up to 1024 bytes (the host adds 1024 bytes of
/// slack to the allocation for this).
#[inline(always)]
pub fn dsmem_base_1024() -> u32 {
    (crate::arch::smem::dsmem_base() + 1023) & !1023
}
