//! Shared-memory plan of a CTA: the Q tiles, the K and V rings, the mbarriers and the
//! work-tile slots.
//!
//! Every tile is stored as 64-column *slabs* (`head_dim / 64` of them), each slab `rows x 128`
//! bytes with the 128-byte swizzle: exactly what one TMA box of 64 columns with
//! `SWIZZLE_128B` writes, and the K-major (Q, K) or MN-major (V) layout the wgmma descriptors
//! read. Tiles start on 1024-byte boundaries (the swizzle's period), so descriptors need no
//! base offset.
use flashrs_abi::sm90::q_buffers;

/// The CTA's dynamic shared memory, for Q/K head dimension `D`, V head dimension `DV` (at most
/// `D`: the output is staged in the Q tile), `BM` query rows, `BN` keys per stage and `STAGES`
/// stages. Layout: the Q tiles (`BM x D` each, [`Self::Q_BUFFERS`] of them), K stages (`BN x
/// D`), V stages (`BN x DV`), then the barriers and the work-tile slots.
#[derive(Clone, Copy)]
pub struct Smem<const D: usize, const DV: usize, const BM: usize, const BN: usize, const STAGES: usize> {
    base: u32,
}

impl<const D: usize, const DV: usize, const BM: usize, const BN: usize, const STAGES: usize> Smem<D, DV, BM, BN, STAGES> {
    const Q_BYTES: u32 = (BM * D * 2) as u32;
    const K_BYTES: u32 = (BN * D * 2) as u32;
    const V_BYTES: u32 = (BN * DV * 2) as u32;
    /// Q tiles: work tile `i` of the CTA uses tile `i % Q_BUFFERS` (see [`q_buffers`]).
    pub const Q_BUFFERS: u32 = q_buffers(BM * D * 2, BN * (D + DV) * 2, STAGES) as u32;
    const KV: u32 = Self::Q_BUFFERS * Self::Q_BYTES;
    const BARS: u32 = Self::KV + STAGES as u32 * (Self::K_BYTES + Self::V_BYTES);
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
}

/// Start of dynamic shared memory rounded up to 1024 bytes (the host adds 1024 bytes of
/// slack to the allocation for this).
#[inline(always)]
pub fn dsmem_base_1024() -> u32 {
    (crate::arch::smem::dsmem_base() + 1023) & !1023
}
