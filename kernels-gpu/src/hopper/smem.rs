//! Shared-memory plan of a CTA: the Q tile, the K and V rings, and the mbarriers.
//!
//! Every tile is stored as 64-column *slabs* (`head_dim / 64` of them), each slab `rows x 128`
//! bytes with the 128-byte swizzle: exactly what one TMA box of 64 columns with
//! `SWIZZLE_128B` writes, and the K-major (Q, K) or MN-major (V) layout the wgmma descriptors
//! read. Tiles start on 1024-byte boundaries (the swizzle's period), so descriptors need no
//! base offset.

/// The CTA's dynamic shared memory, for head dimension `D`, `BM` query rows, `BN` keys per
/// stage and `STAGES` stages. Layout: Q (`BM x D`), K stages, V stages, then the barriers.
#[derive(Clone, Copy)]
pub struct Smem<const D: usize, const BM: usize, const BN: usize, const STAGES: usize> {
    base: u32,
}

impl<const D: usize, const BM: usize, const BN: usize, const STAGES: usize> Smem<D, BM, BN, STAGES> {
    const Q_BYTES: u32 = (BM * D * 2) as u32;
    const KV_BYTES: u32 = (BN * D * 2) as u32;
    const BARS: u32 = Self::Q_BYTES + 2 * STAGES as u32 * Self::KV_BYTES;

    /// The plan for dynamic shared memory starting at `base` (1024-byte aligned).
    #[inline(always)]
    pub fn new(base: u32) -> Self {
        Smem { base }
    }

    /// The Q tile: `D / 64` slabs of `BM` rows.
    #[inline(always)]
    pub fn q(self) -> u32 {
        self.base
    }

    /// K stage `s`: `D / 64` slabs of `BN` rows.
    #[inline(always)]
    pub fn k(self, s: u32) -> u32 {
        self.base + Self::Q_BYTES + s * Self::KV_BYTES
    }

    /// V stage `s`: `D / 64` slabs of `BN` rows.
    #[inline(always)]
    pub fn v(self, s: u32) -> u32 {
        self.base + Self::Q_BYTES + (STAGES as u32 + s) * Self::KV_BYTES
    }

    /// Barrier: the Q tile landed (TMA transaction bytes).
    #[inline(always)]
    pub fn q_full(self) -> u32 {
        self.base + Self::BARS
    }

    /// Barrier: K stage `s` landed.
    #[inline(always)]
    pub fn k_full(self, s: u32) -> u32 {
        self.base + Self::BARS + 8 + 8 * s
    }

    /// Barrier: V stage `s` landed.
    #[inline(always)]
    pub fn v_full(self, s: u32) -> u32 {
        self.base + Self::BARS + 8 + 8 * (STAGES as u32 + s)
    }

    /// Barrier: every consumer warp finished reading K stage `s`.
    #[inline(always)]
    pub fn k_empty(self, s: u32) -> u32 {
        self.base + Self::BARS + 8 + 8 * (2 * STAGES as u32 + s)
    }

    /// Barrier: every consumer warp finished reading V stage `s`.
    #[inline(always)]
    pub fn v_empty(self, s: u32) -> u32 {
        self.base + Self::BARS + 8 + 8 * (3 * STAGES as u32 + s)
    }

    /// Barrier: every consumer warp finished with the Q tile (its epilogue staged O there),
    /// so the next work tile's Q may be loaded.
    #[inline(always)]
    pub fn q_empty(self) -> u32 {
        self.base + Self::BARS + 8 + 8 * (4 * STAGES as u32)
    }
}

/// Start of dynamic shared memory rounded up to 1024 bytes (the host adds 1024 bytes of
/// slack to the allocation for this).
#[inline(always)]
pub fn dsmem_base_1024() -> u32 {
    (crate::arch::smem::dsmem_base() + 1023) & !1023
}
