//! Tile shapes of the `mma.sync` forward kernels: the tables their entry points are
//! instantiated from, and the launch geometry (threads, shared memory) each shape implies.
//! The host's launch geometry and the kernels' const generics come from these tables alone.

/// Tile shape of one forward kernel instantiation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TileConfig {
    /// Padded head dimension the kernel is compiled for (inputs with a smaller head_dim are
    /// zero-padded on load).
    pub head_dim: usize,
    /// Query rows per CTA.
    pub block_m: usize,
    /// Key/value rows per pipeline stage.
    pub block_n: usize,
    /// Warps per CTA. Each owns `block_m / warps` query rows; with fewer than 16 rows per warp
    /// (decode tiles), groups of [`TileConfig::warps_n`] warps share 16 rows and split every
    /// K/V tile's keys between them.
    pub warps: usize,
    /// K/V shared-memory stages (loads of tile j+stages-1 overlap compute on tile j).
    pub stages: usize,
}

impl TileConfig {
    /// Threads per CTA.
    pub const fn threads(&self) -> usize {
        self.warps * 32
    }
    /// Warps that share a 16-row MMA tile, each taking `block_n / warps_n` keys of every K/V
    /// tile (1 unless `block_m < 16 * warps`).
    pub const fn warps_n(&self) -> usize {
        if self.block_m >= 16 * self.warps { 1 } else { self.warps / (self.block_m / 16) }
    }
    /// 16-row MMA tiles each warp owns.
    pub const fn m_tiles(&self) -> usize {
        self.block_m * self.warps_n() / self.warps / 16
    }
    /// Dynamic shared memory in bytes: the Q tile (reused for O), then K and V stages.
    pub const fn smem_bytes(&self) -> usize {
        (self.block_m + 2 * self.stages * self.block_n) * self.head_dim * 2
    }
}

/// Every instantiated configuration (each for f16 and bf16). All assemble without spills.
/// One 16-row MMA tile per warp costs ~165 registers; two tiles per warp halve the
/// shared-memory reads per MMA (each K/V fragment feeds two MMAs) but sit near the 255-register
/// limit: head_dim 128 fits them only with 32-row K/V tiles (64-row ones spill).
/// A CTA's threads must cover whole 8-row swizzle groups per copy pass: `threads >=
/// 8 * head_dim / 8`, so head_dim 256 needs 8 warps. The last one, head_dim 256 in 16-key
/// tiles, is the one that fits the 99 KB a CTA may have on sm_86 and sm_89 (RTX 30xx/40xx, A10,
/// L4, L40). Warps that split a tile's keys ([`TileConfig::warps_n`] > 1) share one 16-row
/// group per CTA: the merge of their results keeps one scratch slot per warp of that group.
pub const CONFIGS: [TileConfig; 13] = [
    TileConfig { head_dim: 64, block_m: 128, block_n: 64, warps: 4, stages: 2 },
    TileConfig { head_dim: 64, block_m: 128, block_n: 128, warps: 8, stages: 2 },
    TileConfig { head_dim: 64, block_m: 128, block_n: 64, warps: 4, stages: 3 },
    TileConfig { head_dim: 128, block_m: 128, block_n: 64, warps: 8, stages: 2 },
    TileConfig { head_dim: 128, block_m: 128, block_n: 64, warps: 8, stages: 3 },
    TileConfig { head_dim: 128, block_m: 64, block_n: 64, warps: 4, stages: 2 },
    TileConfig { head_dim: 128, block_m: 128, block_n: 32, warps: 4, stages: 2 },
    TileConfig { head_dim: 256, block_m: 128, block_n: 64, warps: 8, stages: 2 },
    TileConfig { head_dim: 256, block_m: 128, block_n: 32, warps: 8, stages: 2 },
    TileConfig { head_dim: 128, block_m: 16, block_n: 128, warps: 4, stages: 2 },
    TileConfig { head_dim: 128, block_m: 16, block_n: 64, warps: 4, stages: 2 },
    TileConfig { head_dim: 64, block_m: 16, block_n: 64, warps: 4, stages: 2 },
    SMALL_D256,
];

/// Head_dim 256 in the least shared memory: 128 query rows in 8 warps (8 warps are what a
/// head_dim-256 row's copy needs), 16-key tiles, 96 KB. Every table has it, so that GPUs whose
/// CTAs get 99 KB (sm_86, sm_89) or 163 KB (sm_80) run every variant at head_dim 256. It is a
/// fallback ([`is_fallback`]): chosen only where no other configuration fits.
pub const SMALL_D256: TileConfig = TileConfig { head_dim: 256, block_m: 128, block_n: 16, warps: 8, stages: 2 };

/// True for configurations that exist for GPUs with little shared memory per CTA, and are
/// chosen only where no other configuration of their head dimension fits.
pub const fn is_fallback(c: &TileConfig) -> bool {
    c.head_dim == SMALL_D256.head_dim && c.block_m == SMALL_D256.block_m && c.block_n == SMALL_D256.block_n && c.warps == SMALL_D256.warps && c.stages == SMALL_D256.stages
}

/// The default configuration for each padded head dimension (64, 128, 256): the fastest
/// measured on the H100 over the standard sweep (see the README's benchmark section).
pub const DEFAULTS: [TileConfig; 3] = [
    TileConfig { head_dim: 64, block_m: 128, block_n: 64, warps: 4, stages: 2 },
    TileConfig { head_dim: 128, block_m: 128, block_n: 32, warps: 4, stages: 2 },
    TileConfig { head_dim: 256, block_m: 128, block_n: 64, warps: 8, stages: 2 },
];

/// Configurations of the variable-length kernels (`flash_fwd_varlen_*`): first the default for
/// each padded head dimension (same order as [`HEAD_DIMS`]; the per-CTA sequence bounds cost
/// registers, so these leave headroom below the 255-register limit), then [`SMALL_D256`].
pub const VARLEN_CONFIGS: [TileConfig; 4] = [
    TileConfig { head_dim: 64, block_m: 128, block_n: 64, warps: 4, stages: 2 },
    TileConfig { head_dim: 128, block_m: 128, block_n: 64, warps: 8, stages: 2 },
    TileConfig { head_dim: 256, block_m: 128, block_n: 64, warps: 8, stages: 2 },
    SMALL_D256,
];

/// Configurations of the split-KV and paged kernels (`flash_fwd_split_*`, `flash_fwd_paged_*`),
/// which serve short query blocks (decode). For each call the planner takes the smallest block
/// that holds its rows per query block (the first listed among equals), so 16-row decode
/// blocks (GQA-packed heads, up to 16 query rows) run on 16-row tiles whose warps split the
/// keys; the others can be forced for tuning. Head_dim 128 takes 128-key tiles for decode: on
/// the H100 they beat 64-key ones on every decode row measured (one CTA per SM, each K/V
/// stage twice as large).
pub const SPLIT_CONFIGS: [TileConfig; 7] = [
    TileConfig { head_dim: 64, block_m: 128, block_n: 64, warps: 4, stages: 2 },
    TileConfig { head_dim: 128, block_m: 64, block_n: 64, warps: 4, stages: 2 },
    TileConfig { head_dim: 256, block_m: 128, block_n: 64, warps: 8, stages: 2 },
    TileConfig { head_dim: 128, block_m: 16, block_n: 128, warps: 4, stages: 2 },
    TileConfig { head_dim: 128, block_m: 16, block_n: 64, warps: 4, stages: 2 },
    TileConfig { head_dim: 64, block_m: 16, block_n: 64, warps: 4, stages: 2 },
    SMALL_D256,
];

/// Configurations of the split-capable kernels over FP8 K/V caches (`flash_fwd_*_e4m3_*`,
/// `*_e5m2_*`): [`SPLIT_CONFIGS`] but the 64-key tiles at head_dim 256, whose 16-bit kernels
/// already use 250-255 registers and spill with the FP8 widening; head_dim 256 takes
/// [`SMALL_D256`]. Head_dim 128's decode tiles are listed 64 keys first, so that decode takes
/// them: the widening makes an FP8 decode CTA's work issue-bound where a 16-bit one waits for
/// memory, and 64-key tiles (70 KB) let three CTAs share an SM where 128-key ones (135 KB) leave
/// one (measured on the H200, batch 1-64, 8k-128k keys: 0.78-0.88x the time, short rows equal).
pub const FP8_CONFIGS: [TileConfig; 6] = [SPLIT_CONFIGS[0], SPLIT_CONFIGS[1], SPLIT_CONFIGS[4], SPLIT_CONFIGS[3], SPLIT_CONFIGS[5], SMALL_D256];

/// Configurations of the modification kernels (`flash_fwd_[varlen_]mods_*`: sliding window,
/// softcap, ALiBi, sinks), fixed-length and variable-length alike: the variable-length ones
/// where they leave the registers the per-score work needs, 32-key tiles at head_dim 256 (64-key
/// ones spill with it on sm_80), then [`SMALL_D256`]. (The plain default at head_dim 128, 128 x
/// 32 in four warps, spills with it too.)
pub const MODS_CONFIGS: [TileConfig; 4] = [
    VARLEN_CONFIGS[0],
    VARLEN_CONFIGS[1],
    TileConfig { head_dim: 256, block_m: 128, block_n: 32, warps: 8, stages: 2 },
    SMALL_D256,
];

/// Most split-KV CTAs per query block: the merge gives each split one lane of a warp.
pub const MAX_SPLITS: usize = 32;

/// The padded head dimensions, smallest first.
pub const HEAD_DIMS: [usize; 3] = [64, 128, 256];

/// The padded head dimension that serves `head_dim` (the smallest that holds it).
pub const fn padded_head_dim(head_dim: usize) -> Option<usize> {
    let mut i = 0;
    while i < HEAD_DIMS.len() {
        if head_dim <= HEAD_DIMS[i] {
            return Some(HEAD_DIMS[i]);
        }
        i += 1;
    }
    None
}

/// The default configuration for `head_dim` (padded up), if any serves it.
pub const fn default_config(head_dim: usize) -> Option<TileConfig> {
    let mut i = 0;
    while i < HEAD_DIMS.len() {
        if head_dim <= HEAD_DIMS[i] {
            return Some(DEFAULTS[i]);
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_instantiated_and_serve_every_head_dim() {
        for (i, (d, c)) in HEAD_DIMS.iter().zip(DEFAULTS).enumerate() {
            assert!(CONFIGS.contains(&c), "default {c:?} is not in CONFIGS");
            assert_eq!((c.head_dim, VARLEN_CONFIGS[i].head_dim), (*d, *d));
        }
        for head_dim in (8..=256).step_by(8) {
            let c = default_config(head_dim).expect("every multiple of 8 up to 256 is served");
            assert!(c.head_dim >= head_dim && c.head_dim - head_dim < 128);
            assert_eq!(padded_head_dim(head_dim), Some(c.head_dim));
        }
        assert_eq!((default_config(264), padded_head_dim(264)), (None, None));
    }

    /// Decode-shaped calls run the split table's tiles on the plain kernel too.
    #[test]
    fn split_configurations_are_plain_ones_too() {
        for c in SPLIT_CONFIGS {
            assert!(CONFIGS.contains(&c), "{c:?}");
        }
    }

    /// Every configuration fits the copy loops and, key-splitting warps, the merge's scratch;
    /// every table holds one for each head dimension that fits 99 KB per CTA (sm_86, sm_89).
    #[test]
    fn configurations_are_launchable_and_every_table_fits_small_gpus() {
        for c in CONFIGS.iter().chain(&VARLEN_CONFIGS).chain(&SPLIT_CONFIGS) {
            assert!(c.threads() >= c.head_dim, "{c:?}: threads must cover an 8-row swizzle group");
            assert_eq!(c.block_m * c.warps_n() % (c.warps * 16), 0, "{c:?}");
            assert!(c.warps_n() == 1 || c.m_tiles() == 1, "{c:?}");
            // Key-splitting warps only in a CTA of one 16-row group (their merge's scratch).
            assert!(c.warps_n() == 1 || c.block_m == 16, "{c:?}");
        }
        for table in [&CONFIGS[..], &VARLEN_CONFIGS[..], &SPLIT_CONFIGS[..]] {
            for d in HEAD_DIMS {
                assert!(table.iter().any(|c| c.head_dim == d && c.smem_bytes() <= 99 * 1024), "no head_dim {d} configuration fits 99 KB");
            }
        }
    }
}
