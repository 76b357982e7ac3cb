//! Tile shapes of the Hopper (wgmma) forward kernels: the table their entry points are
//! instantiated from, and the launch geometry (threads, shared memory, register split) each
//! shape implies.
use crate::kernel::Flavor;

/// Tile shape of one Hopper forward kernel instantiation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HopperConfig {
    /// Padded head dimension (a multiple of 64: K/V/Q tiles are 64-column TMA boxes); inputs
    /// with a smaller head_dim are zero-filled by TMA past their last column.
    pub head_dim: usize,
    /// Key/value rows per pipeline stage (the N of `S = Q K^T`, the K of `O += P V`).
    pub block_n: usize,
    /// K/V shared-memory stages in the TMA ring.
    pub stages: usize,
    /// Consumer warpgroups per CTA (2 or 3), each owning 64 query rows (one m64 wgmma row
    /// block). Three hide more of the softmax behind the tensor cores (two issue GEMMs while
    /// one exponentiates), which pays where the exponentials weigh most against the GEMMs
    /// (head_dim 64), at the price of fewer registers per consumer ([`Self::consumer_regs`]).
    pub consumers: usize,
    /// The FlashAttention-3 consumer schedule (softmax of tile `t` overlapping `P V` of tile
    /// `t - 1`, the consumer warpgroups taking turns at the tensor cores); `false` is the
    /// serial schedule (each GEMM waited for at once), kept as a reference and for debugging.
    pub pipelined: bool,
}

impl HopperConfig {
    /// Query rows per CTA: 64 per consumer warpgroup.
    pub const fn block_m(&self) -> usize {
        64 * self.consumers
    }
    /// Threads per CTA: one producer warpgroup (TMA) and the consumer warpgroups (wgmma).
    pub const fn threads(&self) -> usize {
        128 * (1 + self.consumers)
    }
    /// Registers per thread the producer warpgroup keeps after `setmaxnreg.dec` (its one
    /// TMA-issuing thread needs few): 32 with three consumer warpgroups, so that they get 160
    /// each (FlashAttention-3's split); 40 with two, whose 232 each are already plenty; 56 in
    /// the block-sparse kernels (two consumers), whose producer walks the block mask's lists,
    /// leaving their consumers 224.
    pub const fn producer_regs(&self, flavor: Flavor) -> u32 {
        match (self.consumers, flavor) {
            (2, Flavor::Sparse) => 56,
            (2, _) => 40,
            _ => 32,
        }
    }
    /// Registers per thread the CTA starts with ([`initial_regs`]).
    pub const fn initial_regs(&self) -> u32 {
        initial_regs(self.threads())
    }
    /// Registers per thread each consumer warpgroup claims with `setmaxnreg.inc`: what the
    /// producer leaves of the CTA's registers ([`HopperConfig::initial_regs`] per thread),
    /// shared evenly and rounded down to the multiple of 8 that `setmaxnreg` takes.
    pub const fn consumer_regs(&self, flavor: Flavor) -> u32 {
        let pool = self.initial_regs() as usize * self.threads();
        ((pool - 128 * self.producer_regs(flavor) as usize) / (128 * self.consumers)) as u32 & !7
    }
    /// Bytes of one 64-column slab of a `rows`-row tile (128-byte rows).
    pub const fn slab_bytes(rows: usize) -> usize {
        rows * 128
    }
    /// Bytes of the Q tile (reused for O in the epilogue).
    pub const fn q_bytes(&self) -> usize {
        self.block_m() * self.head_dim * 2
    }
    /// Bytes of one K (or V) stage.
    pub const fn kv_bytes(&self) -> usize {
        self.block_n * self.head_dim * 2
    }
    /// Q tiles in shared memory: two where they fit ([`q_buffers`]).
    pub const fn q_buffers(&self) -> usize {
        q_buffers(self.q_bytes(), self.kv_bytes(), self.stages)
    }
    /// Dynamic shared memory in bytes: 1024 of alignment slack (tiles start on the 128-byte
    /// swizzle's 1024-byte period), the Q tiles, the K and V rings, then 1024 for the
    /// mbarriers and the work-tile slots.
    pub const fn smem_bytes(&self) -> usize {
        smem_bytes(self.q_bytes(), self.kv_bytes(), self.stages, self.q_buffers())
    }
}

/// Registers per thread a CTA of `threads` threads starts with: 65536 / threads, rounded down
/// to the multiple of 8 the hardware allocates (168 for 384 threads, 128 for 512).
/// `setmaxnreg` only moves these between warpgroups: a warpgroup's `setmaxnreg.inc` waits until
/// others' `.dec` have released what it asks for, so asking for more than the CTA holds hangs.
pub const fn initial_regs(threads: usize) -> u32 {
    (65536 / threads as u32) & !7
}

/// Dynamic shared memory an sm_90 CTA may have: 227 KB.
pub const MAX_SMEM: usize = 227 * 1024;

const fn smem_bytes(q_bytes: usize, kv_bytes: usize, stages: usize, q_buffers: usize) -> usize {
    1024 + q_buffers * q_bytes + 2 * stages * kv_bytes + 1024
}

/// Q tiles a kernel with these tile sizes keeps: two where they fit in [`MAX_SMEM`], so that
/// a CTA walking several work tiles loads the next tile's Q while it still computes (and
/// stores the output of) the current one; else one (head_dim 256), and the next Q waits for
/// the epilogue. Shared with the device's shared-memory plan.
pub const fn q_buffers(q_bytes: usize, kv_bytes: usize, stages: usize) -> usize {
    if smem_bytes(q_bytes, kv_bytes, stages, 2) <= MAX_SMEM { 2 } else { 1 }
}

/// Every instantiated configuration (each for f16 and bf16): the pipelined kernels (the default
/// per padded head dimension, then head_dim 64 with two consumer warpgroups, its default before
/// the three-warpgroup one, kept to compare), then their serial twins. Each can be launched one
/// CTA per work tile or persistent (one CTA per SM claiming tiles); the kernel is the same.
pub const CONFIGS: [HopperConfig; 8] = [
    HopperConfig { head_dim: 64, block_n: 128, stages: 3, consumers: 3, pipelined: true },
    HopperConfig { head_dim: 128, block_n: 128, stages: 2, consumers: 2, pipelined: true },
    HopperConfig { head_dim: 256, block_n: 64, stages: 2, consumers: 2, pipelined: true },
    HopperConfig { head_dim: 64, block_n: 128, stages: 3, consumers: 2, pipelined: true },
    HopperConfig { head_dim: 64, block_n: 128, stages: 3, consumers: 3, pipelined: false },
    HopperConfig { head_dim: 128, block_n: 128, stages: 2, consumers: 2, pipelined: false },
    HopperConfig { head_dim: 256, block_n: 64, stages: 2, consumers: 2, pipelined: false },
    HopperConfig { head_dim: 64, block_n: 128, stages: 3, consumers: 2, pipelined: false },
];

/// Index into [`CONFIGS`] of the default for each padded head dimension
/// ([`crate::tiles::HEAD_DIMS`]); these also have a variable-length kernel.
pub const DEFAULTS: [usize; 3] = [0, 1, 2];

/// The default configuration for `head_dim` (padded up to 64, 128 or 256), if any serves it.
pub const fn default_config(head_dim: usize) -> Option<HopperConfig> {
    of_head_dim(&DEFAULTS, head_dim)
}

/// True when `c` is one of the defaults, which also have a variable-length kernel.
pub const fn is_default(c: &HopperConfig) -> bool {
    in_table(&DEFAULTS, c)
}

/// Index into [`CONFIGS`] of the modification kernels' configuration for each padded head
/// dimension (`flash_fwd_sm90_[varlen_]mods_*`: sliding window, softcap, ALiBi, sinks): the
/// defaults, but head_dim 64 with two consumer warpgroups (three leave 160 registers each,
/// which the per-score work spills).
pub const MODS: [usize; 3] = [3, 1, 2];

/// The modification kernels' configuration for `head_dim` (padded up), if any serves it.
pub const fn mods_config(head_dim: usize) -> Option<HopperConfig> {
    of_head_dim(&MODS, head_dim)
}

/// True when `c` has modification kernels (fixed-length and variable-length).
pub const fn has_mods(c: &HopperConfig) -> bool {
    in_table(&MODS, c)
}

/// The configuration `table` (indices into [`CONFIGS`], one per padded head dimension) has for
/// `head_dim` padded up, if any.
const fn of_head_dim(table: &[usize; 3], head_dim: usize) -> Option<HopperConfig> {
    let dims = crate::tiles::HEAD_DIMS;
    let mut i = 0;
    while i < dims.len() {
        if head_dim <= dims[i] {
            return Some(CONFIGS[table[i]]);
        }
        i += 1;
    }
    None
}

/// True when `c` is one of `table`'s configurations.
const fn in_table(table: &[usize; 3], c: &HopperConfig) -> bool {
    let mut i = 0;
    while i < table.len() {
        let d = CONFIGS[table[i]];
        if d.head_dim == c.head_dim && d.block_n == c.block_n && d.stages == c.stages && d.consumers == c.consumers && d.pipelined == c.pipelined {
            return true;
        }
        i += 1;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every configuration's register split fits what its CTA starts with (a consumer asking
    /// for more would wait forever), and the splits are the intended ones.
    #[test]
    fn register_splits_fit_the_cta() {
        for c in &CONFIGS {
            for f in Flavor::ALL {
                let used = 128 * c.producer_regs(f) as usize + 128 * c.consumers * c.consumer_regs(f) as usize;
                assert!(used <= c.initial_regs() as usize * c.threads(), "{c:?}: {used}");
                assert!(c.consumer_regs(f) % 8 == 0 && c.producer_regs(f) % 8 == 0);
                let want = match (c.consumers, f) {
                    (2, Flavor::Sparse) => (168, 56, 224),
                    (2, _) => (168, 40, 232),
                    _ => (128, 32, 160),
                };
                assert_eq!((c.initial_regs(), c.producer_regs(f), c.consumer_regs(f)), want, "{c:?}");
            }
        }
    }
}
