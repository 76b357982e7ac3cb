//! Tile shapes of the Hopper (wgmma) forward kernels: the table their entry points are
//! instantiated from, and the launch geometry (threads, shared memory, register split) each
//! shape implies.
use crate::kernel::Flavor;

/// Tile shape of one Hopper forward kernel instantiation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HopperConfig {
    /// Padded head dimension of Q and K (a multiple of 64: tiles are 64-column TMA boxes);
    /// inputs with a smaller head_dim are zero-filled by TMA past their last column.
    pub head_dim: usize,
    /// Padded head dimension of V and the output (a multiple of 64, at most `head_dim`: the
    /// output is staged in the Q tile); `head_dim` except in the kernels for V narrower than
    /// K ([`VALUE_DIMS`]).
    pub head_dim_v: usize,
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
    /// leaving their consumers 224; in the `paged` ones (two consumers, [`PAGED`]), whose
    /// producer walks the block table, 64, leaving 216, but 56 at head_dim 128, whose
    /// consumers need their 224 (ptxas spills either warpgroup otherwise).
    pub const fn producer_regs(&self, flavor: Flavor, paged: bool) -> u32 {
        match (self.consumers, flavor, paged) {
            (2, _, true) if self.head_dim != 128 => 64,
            (2, Flavor::Sparse, _) | (2, _, true) => 56,
            (2, _, false) => 40,
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
    pub const fn consumer_regs(&self, flavor: Flavor, paged: bool) -> u32 {
        let pool = self.initial_regs() as usize * self.threads();
        ((pool - 128 * self.producer_regs(flavor, paged) as usize) / (128 * self.consumers)) as u32 & !7
    }
    /// Bytes of one 64-column slab of a `rows`-row tile (128-byte rows).
    pub const fn slab_bytes(rows: usize) -> usize {
        rows * 128
    }
    /// Bytes of the Q tile (reused for O in the epilogue).
    pub const fn q_bytes(&self) -> usize {
        self.block_m() * self.head_dim * 2
    }
    /// Bytes of one K stage.
    pub const fn k_bytes(&self) -> usize {
        self.block_n * self.head_dim * 2
    }
    /// Bytes of one V stage.
    pub const fn v_bytes(&self) -> usize {
        self.block_n * self.head_dim_v * 2
    }
    /// Q tiles in shared memory: two where they fit ([`q_buffers`]).
    pub const fn q_buffers(&self) -> usize {
        q_buffers(self.q_bytes(), self.k_bytes() + self.v_bytes(), self.stages)
    }
    /// Dynamic shared memory in bytes: 1024 of alignment slack (tiles start on the 128-byte
    /// swizzle's 1024-byte period), the Q tiles, the K and V rings, then 1024 for the
    /// mbarriers and the work-tile slots.
    pub const fn smem_bytes(&self) -> usize {
        smem_bytes(self.q_bytes(), self.k_bytes() + self.v_bytes(), self.stages, self.q_buffers())
    }
    /// Bytes per stage of the FP8 kernels ([`FP8_CONFIGS`]): K, V as loaded, and V transposed
    /// (the K-major operand FP8 wgmma needs), one byte per element.
    pub const fn fp8_stage_bytes(&self) -> usize {
        stage_bytes(self.head_dim, self.head_dim_v, self.block_n, 1)
    }
    /// Q tiles of the FP8 kernels ([`q_buffers`]).
    pub const fn fp8_q_buffers(&self) -> usize {
        q_buffers(self.block_m() * self.head_dim, self.fp8_stage_bytes(), self.stages)
    }
    /// Dynamic shared memory of the FP8 kernels, as [`Self::smem_bytes`].
    pub const fn fp8_smem_bytes(&self) -> usize {
        smem_bytes(self.block_m() * self.head_dim, self.fp8_stage_bytes(), self.stages, self.fp8_q_buffers())
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

const fn smem_bytes(q_bytes: usize, stage_bytes: usize, stages: usize, q_buffers: usize) -> usize {
    1024 + q_buffers * q_bytes + stages * stage_bytes + 1024
}

/// Bytes per row of a shared-memory slab of `bytes`-wide rows: 128 (the widest swizzle span),
/// or the whole row where narrower. The FP8 kernels keep their Q, K and V tiles in slabs of
/// such rows, one TMA box each. Shared with the device.
pub const fn slab_row(bytes: usize) -> usize {
    if bytes >= 128 { 128 } else { bytes }
}

/// Bytes of one K/V stage of a forward kernel with Q/K head dimension `d`, V's `dv`, `block_n`
/// keys and inputs of `elem_bytes` bytes: K and V as loaded, and with FP8 inputs (one byte) V
/// transposed as well. Shared with the device's shared-memory plan.
pub const fn stage_bytes(d: usize, dv: usize, block_n: usize, elem_bytes: usize) -> usize {
    let transposed = if elem_bytes == 1 { block_n * dv } else { 0 };
    block_n * (d + dv) * elem_bytes + transposed
}

/// Q tiles a kernel with these tile sizes (a Q tile, and a K plus a V tile per stage) keeps:
/// two where they fit in [`MAX_SMEM`], so that a CTA walking several work tiles loads the next
/// tile's Q while it still computes (and stores the output of) the current one; else one
/// (head_dim 256, 192), and the next Q waits for the epilogue. Shared with the device's
/// shared-memory plan.
pub const fn q_buffers(q_bytes: usize, stage_bytes: usize, stages: usize) -> usize {
    if smem_bytes(q_bytes, stage_bytes, stages, 2) <= MAX_SMEM { 2 } else { 1 }
}

/// Every instantiated configuration (each for f16 and bf16): the pipelined kernels (the default
/// per padded head dimension, then head_dim 64 with two consumer warpgroups, its default before
/// the three-warpgroup one, kept to compare), then their serial twins. Each can be launched one
/// CTA per work tile or persistent (one CTA per SM claiming tiles); the kernel is the same.
pub const CONFIGS: [HopperConfig; 9] = [
    HopperConfig { head_dim: 64, head_dim_v: 64, block_n: 128, stages: 3, consumers: 3, pipelined: true },
    HopperConfig { head_dim: 128, head_dim_v: 128, block_n: 128, stages: 2, consumers: 2, pipelined: true },
    HopperConfig { head_dim: 256, head_dim_v: 256, block_n: 64, stages: 2, consumers: 2, pipelined: true },
    HopperConfig { head_dim: 64, head_dim_v: 64, block_n: 128, stages: 3, consumers: 2, pipelined: true },
    HopperConfig { head_dim: 64, head_dim_v: 64, block_n: 128, stages: 3, consumers: 3, pipelined: false },
    HopperConfig { head_dim: 128, head_dim_v: 128, block_n: 128, stages: 2, consumers: 2, pipelined: false },
    HopperConfig { head_dim: 256, head_dim_v: 256, block_n: 64, stages: 2, consumers: 2, pipelined: false },
    HopperConfig { head_dim: 64, head_dim_v: 64, block_n: 128, stages: 3, consumers: 2, pipelined: false },
    // Q/K 192 with V 128 (DeepSeek's): the head_dim 128 kernel's tiles with a wider Q K^T;
    // one Q tile (two do not fit beside the K/V ring).
    HopperConfig { head_dim: 192, head_dim_v: 128, block_n: 128, stages: 2, consumers: 2, pipelined: true },
];

/// The FP8 kernels' configurations (e4m3 Q, K and V; `flash_fwd_sm90_[varlen_]<out>_e4m3_*`),
/// one per padded head dimension, each fixed and variable length. Key tiles are 128 wide (the
/// transposed V's rows one 128-byte swizzle span). Head_dim 64 and 128 run three consumer
/// warpgroups (192-row tiles): their softmax's exponentials cost as much as their GEMMs, and a
/// third warpgroup keeps the tensor cores busy through two others' softmax (1.25x at head_dim
/// 128, 16k keys). At head_dim 128 the pipelined schedule would spill in three warpgroups'
/// registers, so it runs the serial one; at 256 one Q tile beside two stages fills the shared
/// memory, and the pipelined consumer spills there too. Three stages where they fit: a V tile
/// passes through the transposing warps before the consumers read it.
pub const FP8_CONFIGS: [HopperConfig; 3] = [
    HopperConfig { head_dim: 64, head_dim_v: 64, block_n: 128, stages: 3, consumers: 3, pipelined: true },
    HopperConfig { head_dim: 128, head_dim_v: 128, block_n: 128, stages: 3, consumers: 3, pipelined: false },
    HopperConfig { head_dim: 256, head_dim_v: 256, block_n: 128, stages: 2, consumers: 2, pipelined: false },
];

/// The FP8 configuration for `head_dim` (padded up to 64, 128 or 256), if any serves it.
pub const fn fp8_config(head_dim: usize) -> Option<HopperConfig> {
    match head_dim_slot(head_dim) {
        Some(i) => Some(FP8_CONFIGS[i]),
        None => None,
    }
}

/// Index into [`CONFIGS`] of the kernels for V narrower than Q and K, as (padded head_dim,
/// padded head_dim_v) pairs: with plain attention, modifications and block masks, fixed and
/// variable length. Other pairs take the configuration of the wider of the two.
pub const VALUE_DIMS: [usize; 1] = [8];

/// The [`VALUE_DIMS`] configuration for Q/K of `head_dim` and V of `head_dim_v`, if one has
/// that pair of padded dimensions (Q/K within 64 below its `head_dim`, V within 64 below its
/// `head_dim_v`); other pairs take the configuration of the wider of the two.
pub const fn value_dims_config(head_dim: usize, head_dim_v: usize) -> Option<HopperConfig> {
    let mut i = 0;
    while i < VALUE_DIMS.len() {
        let c = CONFIGS[VALUE_DIMS[i]];
        if head_dim <= c.head_dim && head_dim + 64 > c.head_dim && head_dim_v <= c.head_dim_v && head_dim_v + 64 > c.head_dim_v {
            return Some(c);
        }
        i += 1;
    }
    None
}

/// True when `c` is a [`VALUE_DIMS`] configuration.
pub const fn is_value_dims(c: &HopperConfig) -> bool {
    in_table(&VALUE_DIMS, c)
}

/// Field-wise equality (`PartialEq` is not const).
const fn same(a: &HopperConfig, b: &HopperConfig) -> bool {
    a.head_dim == b.head_dim && a.head_dim_v == b.head_dim_v && a.block_n == b.block_n && a.stages == b.stages && a.consumers == b.consumers && a.pipelined == b.pipelined
}

/// Index into [`CONFIGS`] of the default for each padded head dimension
/// ([`crate::tiles::HEAD_DIMS`]); these also have a variable-length kernel.
pub const DEFAULTS: [usize; 3] = [0, 1, 2];

/// The configuration short causal calls at head_dim 64 take instead of the default (the host's
/// planner says which): 128-row tiles of two consumer warpgroups, serial.
pub const SHORT_CAUSAL: HopperConfig = CONFIGS[7];

/// The configuration calls at head_dim 64 whose default grid leaves the GPU's SMs short of
/// work take (the host's planner says which): 128-row tiles of two consumer warpgroups.
pub const SMALL_GRID: HopperConfig = CONFIGS[3];

/// The default configuration for `head_dim` (padded up to 64, 128 or 256), if any serves it.
pub const fn default_config(head_dim: usize) -> Option<HopperConfig> {
    of_head_dim(&DEFAULTS, head_dim)
}

/// True when `c` has a variable-length kernel: the defaults and the [`VALUE_DIMS`] ones.
pub const fn is_default(c: &HopperConfig) -> bool {
    in_table(&DEFAULTS, c) || is_value_dims(c)
}

/// Index into [`CONFIGS`] of the paged kernels' configuration for each padded head dimension
/// (`flash_fwd_sm90_[varlen_]paged_*`: K and V read through a block table, plain attention):
/// the defaults, but head_dim 64 with two consumer warpgroups. The producer's thread walks the
/// block table, which takes more registers than three consumers' split leaves it
/// ([`HopperConfig::producer_regs`]).
pub const PAGED: [usize; 3] = [3, 1, 2];

/// The paged kernels' configuration for `head_dim` (padded up), if any serves it.
pub const fn paged_config(head_dim: usize) -> Option<HopperConfig> {
    of_head_dim(&PAGED, head_dim)
}

/// True when `c` has paged kernels (fixed-length and variable-length queries).
pub const fn has_paged(c: &HopperConfig) -> bool {
    in_table(&PAGED, c)
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
    in_table(&MODS, c) || is_value_dims(c)
}

/// The configuration `table` (indices into [`CONFIGS`], one per padded head dimension) has for
/// `head_dim` padded up, if any.
const fn of_head_dim(table: &[usize; 3], head_dim: usize) -> Option<HopperConfig> {
    match head_dim_slot(head_dim) {
        Some(i) => Some(CONFIGS[table[i]]),
        None => None,
    }
}

/// Index into [`crate::tiles::HEAD_DIMS`] of `head_dim` padded up, if it is at most the largest.
const fn head_dim_slot(head_dim: usize) -> Option<usize> {
    let dims = crate::tiles::HEAD_DIMS;
    let mut i = 0;
    while i < dims.len() {
        if head_dim <= dims[i] {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// True when `c` is one of `table`'s configurations.
const fn in_table(table: &[usize], c: &HopperConfig) -> bool {
    let mut i = 0;
    while i < table.len() {
        if same(&CONFIGS[table[i]], c) {
            return true;
        }
        i += 1;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pairs of head dimensions take the [`VALUE_DIMS`] kernel of their padded pair (192 / 128:
    /// Q/K 136-192 with V 72-128), and no other pair does.
    #[test]
    fn value_dims_kernels_serve_their_padded_pair() {
        let native = CONFIGS[VALUE_DIMS[0]];
        for (d, dv) in [(192, 128), (136, 72), (192, 72), (136, 128)] {
            assert_eq!(value_dims_config(d, dv), Some(native), "{d}/{dv}");
        }
        for (d, dv) in [(128, 128), (192, 192), (200, 128), (192, 64), (192, 136), (128, 64), (256, 128)] {
            assert_eq!(value_dims_config(d, dv), None, "{d}/{dv}");
        }
        assert!(is_default(&native) && has_mods(&native) && !is_default(&CONFIGS[3]));
        // One Q tile: two do not fit beside the ring.
        assert_eq!((native.q_buffers(), native.smem_bytes()), (1, 1024 + 128 * 192 * 2 + 2 * 128 * (192 + 128) * 2 + 1024));
        assert!(native.smem_bytes() <= MAX_SMEM);
        for c in &CONFIGS {
            assert!(c.head_dim_v <= c.head_dim && c.head_dim_v % 64 == 0, "{c:?}");
        }
    }

    /// Every configuration's register split fits what its CTA starts with (a consumer asking
    /// for more would wait forever), and the splits are the intended ones.
    #[test]
    fn register_splits_fit_the_cta() {
        for c in &CONFIGS {
            for (f, paged) in Flavor::ALL.into_iter().flat_map(|f| [(f, false), (f, true)]) {
                let used = 128 * c.producer_regs(f, paged) as usize + 128 * c.consumers * c.consumer_regs(f, paged) as usize;
                assert!(used <= c.initial_regs() as usize * c.threads(), "{c:?}: {used}");
                assert!(c.consumer_regs(f, paged) % 8 == 0 && c.producer_regs(f, paged) % 8 == 0);
                let want = match (c.consumers, f, paged) {
                    (2, _, true) if c.head_dim != 128 => (168, 64, 216),
                    (2, Flavor::Sparse, _) | (2, _, true) => (168, 56, 224),
                    (2, _, false) => (168, 40, 232),
                    _ => (128, 32, 160),
                };
                assert_eq!((c.initial_regs(), c.producer_regs(f, paged), c.consumer_regs(f, paged)), want, "{c:?}");
            }
        }
    }
}
