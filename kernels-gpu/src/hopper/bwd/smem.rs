//! Shared-memory plan of a Hopper backward CTA: K and V (the CTA's keys, loaded once), the
//! query-side ring (Q and dO tiles and the rows' statistics per stage), two dS^T tiles (and at
//! head_dim 256 two P^T tiles), and the mbarriers.
//!
//! Q, dO, K and V are stored as 64-column slabs (`rows x 128` bytes, 128-byte swizzle), as
//! TMA's 64-column boxes write them and as the forward's tiles are. dS^T is stored the same
//! way with the keys as rows and the query rows as columns (`block_m / 64` slabs of 128 rows):
//! each consumer writes its 64 keys' rows from its accumulator with conflict-free 4-byte stores
//! (a row's swizzle phase is the lane's `g`), and `dQ = dS K` reads it MN-major. Two of them,
//! so that a warpgroup may write step `i + 1`'s while the other still reads step `i`'s. Every
//! tile starts on a 1024-byte boundary (the swizzle's period).
use flashrs_abi::{AccumLayout, BwdSm90Config};

/// The CTA's dynamic shared memory for head dimension `D`, `BM` query rows per step and
/// `STAGES` query-side stages (layout: see the module docs and
/// [`BwdSm90Config::smem_bytes`]).
#[derive(Clone, Copy)]
pub struct Smem<const D: usize, const BM: usize, const STAGES: usize> {
    base: u32,
}

impl<const D: usize, const BM: usize, const STAGES: usize> Smem<D, BM, STAGES> {
    const CONFIG: BwdSm90Config = BwdSm90Config { head_dim: D, block_m: BM, stages: STAGES };
    const BN: usize = Self::CONFIG.block_n();
    const KV_BYTES: u32 = (Self::BN * D * 2) as u32;
    const Q_BYTES: u32 = (BM * D * 2) as u32;
    const DS_BYTES: u32 = (Self::BN * BM * 2) as u32;
    const Q: u32 = 2 * Self::KV_BYTES;
    const DO: u32 = Self::Q + STAGES as u32 * Self::Q_BYTES;
    const DS: u32 = Self::DO + STAGES as u32 * Self::Q_BYTES;
    const STATS_BYTES: u32 = (BM / 64 * AccumLayout::STATS * 4) as u32;
    const STATS: u32 = Self::DS + Self::CONFIG.transposed_tiles() as u32 * Self::DS_BYTES;
    const BARS: u32 = Self::STATS + STAGES as u32 * Self::STATS_BYTES;

    /// The plan for dynamic shared memory starting at `base` (1024-byte aligned).
    #[inline(always)]
    pub fn new(base: u32) -> Self {
        Smem { base }
    }

    /// K: `D / 64` slabs of `block_n` rows.
    #[inline(always)]
    pub fn k(self) -> u32 {
        self.base
    }

    /// V: `D / 64` slabs of `block_n` rows.
    #[inline(always)]
    pub fn v(self) -> u32 {
        self.base + Self::KV_BYTES
    }

    /// Q tile of stage `s`: `D / 64` slabs of `BM` rows.
    #[inline(always)]
    pub fn q(self, s: u32) -> u32 {
        self.base + Self::Q + s * Self::Q_BYTES
    }

    /// dO tile of stage `s`: `D / 64` slabs of `BM` rows.
    #[inline(always)]
    pub fn dout(self, s: u32) -> u32 {
        self.base + Self::DO + s * Self::Q_BYTES
    }

    /// dS^T tile `b` (0, 1): `BM / 64` slabs of `block_n` key rows.
    #[inline(always)]
    pub fn ds(self, b: u32) -> u32 {
        self.base + Self::DS + b * Self::DS_BYTES
    }

    /// P^T tile `b` (0, 1), laid out as dS^T's; only where
    /// [`BwdSm90Config::transposed_tiles`] has room for it (head_dim 256).
    #[inline(always)]
    pub fn pt(self, b: u32) -> u32 {
        const { assert!(Self::CONFIG.transposed_tiles() == 4) };
        self.base + Self::DS + (2 + b) * Self::DS_BYTES
    }

    /// Stage `s`'s row statistics: per 64 rows of the step a block of 64 log-sum-exp bases,
    /// then 64 dsums ([`AccumLayout::fragment_stats`]).
    #[inline(always)]
    pub fn stats(self, s: u32) -> u32 {
        self.base + Self::STATS + s * Self::STATS_BYTES
    }

    /// Barrier: K and V landed.
    #[inline(always)]
    pub fn kv_full(self) -> u32 {
        self.base + Self::BARS
    }

    /// Barrier: stage `s`'s Q, dO and statistics landed.
    #[inline(always)]
    pub fn q_full(self, s: u32) -> u32 {
        self.base + Self::BARS + 8 + 8 * s
    }

    /// Barrier: every consumer thread is done with stage `s`.
    #[inline(always)]
    pub fn q_empty(self, s: u32) -> u32 {
        self.base + Self::BARS + 8 + 8 * (STAGES as u32 + s)
    }

    /// Stage `s`'s step as the producer leaves it for a block-sparse walk (16 bytes, after the
    /// barriers, in the room [`BwdSm90Config::smem_bytes`] keeps for them).
    #[inline(always)]
    pub fn step(self, s: u32) -> u32 {
        const { assert!(8 + 16 * STAGES + 16 * STAGES <= 1024) };
        self.base + Self::BARS + 8 + 16 * STAGES as u32 + 16 * s
    }
}
