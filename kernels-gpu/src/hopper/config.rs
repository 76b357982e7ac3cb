//! Tile shapes of the Hopper (wgmma) forward kernels, one per padded head dimension.
//!
//! Compiled into both the device crate and the host library (through `#[path]`), like
//! `fwd/config.rs`, so launch geometry and kernel names come from one table.

/// Consumer warpgroups per CTA; each owns 64 query rows (one m64 wgmma row block).
pub const CONSUMER_WARPGROUPS: usize = 2;
/// Query rows per CTA.
pub const BLOCK_M: usize = 64 * CONSUMER_WARPGROUPS;
/// Threads per CTA: one producer warpgroup (TMA) and the consumer warpgroups (wgmma).
pub const THREADS: usize = 128 * (1 + CONSUMER_WARPGROUPS);
/// Registers per thread the producer warpgroup keeps after `setmaxnreg.dec`.
pub const PRODUCER_REGS: u32 = 40;
/// Registers per thread each consumer warpgroup claims with `setmaxnreg.inc`:
/// `128 * PRODUCER_REGS + 128 * CONSUMER_WARPGROUPS * CONSUMER_REGS` must fit in the 64K
/// register file (the CTA starts with 65536 / THREADS = 168 per thread, rounded to 8).
pub const CONSUMER_REGS: u32 = 232;

const _: () = assert!(128 * PRODUCER_REGS as usize + 128 * CONSUMER_WARPGROUPS * CONSUMER_REGS as usize <= 65536);

/// Tile shape of one Hopper forward kernel instantiation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HopperConfig {
    /// Padded head dimension (a multiple of 64: K/V/Q tiles are 64-column TMA boxes); inputs
    /// with a smaller head_dim are zero-filled by TMA past their last column.
    pub head_dim: usize,
    /// Key/value rows per pipeline stage (the N of `S = Q K^T`, the K of `O += P V`).
    pub block_n: usize,
    /// K/V shared-memory stages in the TMA ring.
    pub stages: usize,
    /// The FlashAttention-3 consumer schedule (softmax of tile `t` overlapping `P V` of tile
    /// `t - 1`, the two consumer warpgroups taking turns at the tensor cores); `false` is the
    /// serial schedule (each GEMM waited for at once), kept as a reference and for debugging.
    pub pipelined: bool,
    /// Launch one CTA per SM, each walking work tiles (barriers set up once, the next tile's
    /// first K/V loads overlapping the epilogue), instead of one CTA per tile. The same kernel
    /// serves both: only the host's grid differs.
    pub persistent: bool,
}

impl HopperConfig {
    /// Query rows per CTA.
    pub const fn block_m(&self) -> usize {
        BLOCK_M
    }
    /// Threads per CTA.
    pub const fn threads(&self) -> usize {
        THREADS
    }
    /// Bytes of one 64-column slab of a `rows`-row tile (128-byte rows).
    pub const fn slab_bytes(rows: usize) -> usize {
        rows * 128
    }
    /// Bytes of the Q tile (reused for O in the epilogue).
    pub const fn q_bytes(&self) -> usize {
        BLOCK_M * self.head_dim * 2
    }
    /// Bytes of one K (or V) stage.
    pub const fn kv_bytes(&self) -> usize {
        self.block_n * self.head_dim * 2
    }
    /// Dynamic shared memory in bytes: 1024 of alignment slack (tiles start on the 128-byte
    /// swizzle's 1024-byte period), Q, the K and V rings, then 1024 for the mbarriers.
    pub const fn smem_bytes(&self) -> usize {
        1024 + self.q_bytes() + 2 * self.stages * self.kv_bytes() + 1024
    }
}

/// Every configuration: a pipelined default per padded head dimension, its serial twin
/// (kernels 0..6 are instantiated, each for f16 and bf16), and persistent launches of the
/// pipelined kernels.
pub const CONFIGS: [HopperConfig; 9] = [
    HopperConfig { head_dim: 64, block_n: 128, stages: 3, pipelined: true, persistent: false },
    HopperConfig { head_dim: 128, block_n: 128, stages: 2, pipelined: true, persistent: false },
    HopperConfig { head_dim: 256, block_n: 64, stages: 2, pipelined: true, persistent: false },
    HopperConfig { head_dim: 64, block_n: 128, stages: 3, pipelined: false, persistent: false },
    HopperConfig { head_dim: 128, block_n: 128, stages: 2, pipelined: false, persistent: false },
    HopperConfig { head_dim: 256, block_n: 64, stages: 2, pipelined: false, persistent: false },
    HopperConfig { head_dim: 64, block_n: 128, stages: 3, pipelined: true, persistent: true },
    HopperConfig { head_dim: 128, block_n: 128, stages: 2, pipelined: true, persistent: true },
    HopperConfig { head_dim: 256, block_n: 64, stages: 2, pipelined: true, persistent: true },
];

/// Index into [`CONFIGS`] of the default for each padded head dimension (64, 128, 256).
pub const DEFAULTS: [usize; 3] = [0, 1, 2];

/// The padded head dimensions, smallest first.
pub const HEAD_DIMS: [usize; 3] = [64, 128, 256];

/// The default configuration for `head_dim` (padded up to 64, 128 or 256), if any serves it.
pub const fn default_config(head_dim: usize) -> Option<HopperConfig> {
    let mut i = 0;
    while i < HEAD_DIMS.len() {
        if head_dim <= HEAD_DIMS[i] {
            return Some(CONFIGS[DEFAULTS[i]]);
        }
        i += 1;
    }
    None
}
