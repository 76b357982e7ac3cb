//! The second stage of planning: which kernel runs a validated call on a target GPU, split how
//! many ways, GQA-packed or not, persistent or not. Every choice is a [`Kernel`] that the
//! target runs and whose shared memory fits it; a call no kernel can take is a typed error
//! here, not a failed launch.
//!
//! The rules, in order:
//!
//! * **GQA packing** (`mma.sync` only): one query row per sequence with GQA/MQA, fixed-length:
//!   the query heads of a K/V group become the rows of one query block, so a CTA reads its K/V
//!   once for all of them (as FlashAttention does for decode).
//! * **Split-KV** (`auto_splits`): decode-shaped calls (at most 16 rows per query block) whose
//!   CTAs would fill fewer than four waves of the target's CTA slots split their key ranges
//!   (over FP8 caches, `fp8_auto_splits`: an SM's third slot counts only for long walks).
//! * **Variant**: variable-length, split-capable and paged calls take the variant kernels of
//!   [`flashrs_abi::Variant`]; decode-shaped calls take 16-row decode tiles where one holds
//!   their rows.
//! * **Hopper**: on sm_90a, `Auto` takes the wgmma kernels wherever they can take the call
//!   (not split or packed, paged only where no decode tile holds the rows, strides a tensor
//!   map can describe); `Wgmma` insists.
//! * **Fit**: of a table's configurations for the head dimension, the preferred one that fits
//!   the target's shared memory (head_dim 256 on sm_80 and sm_86/89, decode tiles of 128 keys
//!   on sm_86/89).
//! * **Modifications** (window, softcap, ALiBi, sinks): their own kernels, plain or
//!   variable-length, one CTA per query block (no split, no GQA packing, no decode tile), from
//!   [`tiles::MODS_CONFIGS`] or [`sm90::MODS`].
use flashrs_abi::tiles::{self, CONFIGS, FP8_CONFIGS, MAX_SPLITS, MODS_CONFIGS, SPLIT_CONFIGS, TileConfig, VARLEN_CONFIGS};
use flashrs_abi::{Flavor, Fp8, HopperConfig, Kernel, Variant, sm90};

use crate::error::{Error, Result};
use crate::params::KernelChoice;
use crate::target::{Arch, Target};
use crate::validate::Call;

/// What runs a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Selection {
    /// The kernel.
    pub kernel: Kernel,
    /// CTAs per query block (1: no split).
    pub num_splits: usize,
    /// The query heads of each K/V group are packed into one query block's rows.
    pub pack_gqa: bool,
    /// One CTA per SM claiming work tiles (Hopper kernels only).
    pub persistent: bool,
}

/// CTA slots (SMs times resident CTAs) the target has for a kernel.
pub(crate) type Slots<'s> = &'s dyn Fn(&Kernel) -> usize;

/// Longest key sequence of a non-causal call the default Hopper kernel launches persistent
/// (head_dim up to 128; see `persistent_pays`).
pub const PERSISTENT_MAX_KEYS: usize = 4096;

fn shape_err(what: &'static str, reason: impl Into<String>) -> Error {
    Error::InvalidShape { what, reason: reason.into() }
}

fn fits(c: &TileConfig, t: &Target) -> bool {
    c.smem_bytes() <= t.max_smem_per_block as usize
}

/// A [`Error::SharedMemory`] for `kernel` on `t`.
pub(crate) fn too_big(kernel: Kernel, t: &Target) -> Error {
    Error::SharedMemory { kernel: kernel.to_string(), needed: kernel.smem_bytes() as u64, available: t.max_smem_per_block as u64 }
}

/// Chooses the kernel for `call` on `t`; `slots` counts the target's CTA slots per kernel.
pub(crate) fn select(call: &Call, t: &Target, slots: Slots) -> Result<Selection> {
    let p = call.p;
    let (forced, wgmma) = match p.kernel {
        KernelChoice::Auto => (None, None),
        KernelChoice::MmaSync { config } => (config, None),
        KernelChoice::Wgmma { config, persistent } => (None, Some((config, persistent))),
    };
    if wgmma.is_some() && t.arch != Arch::Sm90a {
        let (major, minor) = t.compute_capability;
        return Err(Error::PathUnavailable { path: "wgmma", needs: "an sm_90a GPU (H100/H200)", major: major as i32, minor: minor as i32 });
    }
    let padded = tiles::padded_head_dim(call.kernel_head_dim()).ok_or(Error::UnsupportedHeadDim(p.head_dim))?;
    if let Some(inputs) = call.bufs.query_fp8 {
        return select_fp8(call, inputs, wgmma, t);
    }
    let (varlen, paged) = (call.packed.is_some(), call.paged.is_some());
    // Block-sparse calls have kernels of their own, so that the other modification kernels
    // carry none of their work.
    let flavor = match call.mods {
        None => Flavor::Plain,
        Some(m) if m.blocks.counts != 0 => Flavor::Sparse,
        Some(_) => Flavor::Mods,
    };
    let mods = flavor.mods();
    // Modification kernels run one CTA per query block of a head (the validation refused
    // them paged or split): ALiBi slopes and sinks are per head, a sink joins a row once.
    let pack_gqa = wgmma.is_none() && p.seqlen_q == 1 && p.heads_q > p.heads_kv && !varlen && !mods;
    let block_rows = if pack_gqa { call.group } else { p.seqlen_q };
    // FP8 caches have split-capable kernels of their own table.
    let split_table: &[TileConfig] = if call.bufs.kv.is_some() { &FP8_CONFIGS } else { &SPLIT_CONFIGS };
    let split_cfg = match forced {
        _ if mods => None,
        Some(c) if c.head_dim == padded && split_table.contains(&c) => Some(c),
        _ => split_config(split_table, padded, block_rows, t),
    };
    let split_variant = match (varlen, paged) {
        (true, true) => Variant::VarlenPaged,
        (true, false) => Variant::VarlenSplit,
        (false, true) => Variant::Paged,
        (false, false) => Variant::Split,
    };
    let asked = match call.num_splits {
        Some(n) => n,
        // A forced configuration other than the split one keeps the call whole.
        None if wgmma.is_some() || forced.is_some_and(|c| Some(c) != split_cfg) => 1,
        None => split_cfg.map_or(1, |c| {
            let heads = if pack_gqa { p.heads_kv } else { p.heads_q };
            let kernel = Kernel::Mma { dtype: call.bufs.dtype, kv: call.bufs.kv, variant: split_variant, config: c, flavor: Flavor::Plain };
            let slots = slots(&kernel);
            match call.bufs.kv {
                Some(_) => fp8_auto_splits(p.batch, heads, block_rows, p.seqlen_q, p.seqlen_k, &c, slots, t.sm_count as usize),
                None => auto_splits(p.batch, heads, block_rows, p.seqlen_q, p.seqlen_k, &c, slots),
            }
        }),
    };
    // At least one K/V tile per split, and no split without tiles: `n` splits of `ceil(tiles /
    // n)` tiles may need fewer CTAs than `n`.
    let num_splits = match split_cfg {
        Some(c) if asked > 1 => {
            let tiles = p.seqlen_k.div_ceil(c.block_n);
            if tiles < 2 { 1 } else { tiles.div_ceil(tiles.div_ceil(asked.min(tiles))) }
        }
        _ => 1,
    };
    if num_splits > 1 && wgmma.is_some() {
        return Err(shape_err("wgmma path", "split-KV runs on the mma.sync path"));
    }
    // A decode tile (16 rows) holds a sequence's few rows where a variable-length kernel's
    // 128-row block would be mostly padding.
    let decode_tile = wgmma.is_none() && split_cfg.is_some_and(|c| block_rows <= c.block_m && c.block_m <= 16);
    // FP8 caches have kernels of the split-capable variants only (which write the output
    // directly when unsplit).
    let kv = call.bufs.kv;
    let variant = match (varlen, paged, num_splits > 1) {
        (true, true, _) => Variant::VarlenPaged,
        (true, false, true) => Variant::VarlenSplit,
        (true, false, false) if decode_tile || kv.is_some() => Variant::VarlenSplit,
        (true, false, false) => Variant::Varlen,
        (false, true, _) => Variant::Paged,
        (false, false, true) => Variant::Split,
        (false, false, false) if kv.is_some() => Variant::Split,
        (false, false, false) => Variant::Plain,
    };
    if let (Some(kv), Some(_)) = (kv, wgmma) {
        return Err(shape_err("wgmma path", format!("{} K/V caches run on the mma.sync path", kv.name())));
    }
    if t.arch == Arch::Sm90a && forced.is_none() && kv.is_none() && !matches!(p.kernel, KernelChoice::MmaSync { .. }) {
        // Paged calls of decode shape keep their decode tiles (a Hopper tile of 128 or more
        // rows would be mostly padding) unless the call insists on wgmma.
        let paged_prefill = paged && num_splits == 1 && !decode_tile;
        let hopper = if (matches!(variant, Variant::Plain | Variant::Varlen) || paged_prefill) && !pack_gqa {
            hopper_kernel(call, wgmma.and_then(|w| w.0), t)
        } else {
            Err(format!("{} calls have no Hopper kernel", variant_name(variant, pack_gqa)))
        };
        match (hopper, wgmma) {
            (Ok(config), _) => {
                let persistent = wgmma.and_then(|w| w.1).unwrap_or_else(|| persistent_pays(config.q_buffers(), config.head_dim, p.causal || flavor == Flavor::Sparse, p.seqlen_k));
                let kernel = Kernel::Sm90 { dtype: call.bufs.dtype, inputs: None, varlen, paged, config, flavor };
                return Ok(Selection { kernel, num_splits: 1, pack_gqa: false, persistent });
            }
            (Err(reason), Some(_)) => return Err(shape_err("wgmma path", reason)),
            (Err(_), None) => {}
        }
    }
    let config = if mods { mods_config(call, flavor, forced, padded, t)? } else { mma_config(call, variant, forced, split_cfg, block_rows, padded, t)? };
    let kernel = Kernel::Mma { dtype: call.bufs.dtype, kv, variant, config, flavor };
    if !fits(&config, t) {
        return Err(too_big(kernel, t));
    }
    Ok(Selection { kernel, num_splits, pack_gqa, persistent: false })
}

/// The kernel of a call with FP8 queries (the validation checked that K and V are of the same
/// format and that nothing else comes with them): the Hopper FP8 kernel of the padded head
/// dimension, unsplit, persistent where [`persistent_pays`].
fn select_fp8(call: &Call, inputs: Fp8, wgmma: Option<(Option<HopperConfig>, Option<bool>)>, t: &Target) -> Result<Selection> {
    let p = call.p;
    if t.arch != Arch::Sm90a {
        let (major, minor) = t.compute_capability;
        return Err(Error::PathUnavailable { path: "FP8 queries", needs: "an sm_90a GPU (H100/H200)", major: major as i32, minor: minor as i32 });
    }
    if matches!(p.kernel, KernelChoice::MmaSync { .. }) {
        return Err(shape_err("kernel", "FP8 queries run on the wgmma path only"));
    }
    if call.num_splits.is_some_and(|n| n > 1) {
        return Err(shape_err("num_splits", "calls with FP8 queries run unsplit"));
    }
    let wide = call.kernel_head_dim();
    let config = match wgmma.and_then(|w| w.0) {
        Some(c) if !sm90::FP8_CONFIGS.contains(&c) => return Err(shape_err("wgmma path", format!("{c:?} is not an FP8 configuration"))),
        Some(c) if c.head_dim < wide => return Err(shape_err("wgmma path", format!("head_dim {wide} does not fit {c:?}"))),
        Some(c) => c,
        None => sm90::fp8_config(wide).ok_or(Error::UnsupportedHeadDim(wide))?,
    };
    if !call.empty {
        tma_describable(call).map_err(|reason| shape_err("strides", reason))?;
    }
    let kernel = Kernel::Sm90 { dtype: call.bufs.dtype, inputs: Some(inputs), varlen: call.packed.is_some(), paged: false, config, flavor: Flavor::Plain };
    if kernel.smem_bytes() > t.max_smem_per_block as usize {
        return Err(too_big(kernel, t));
    }
    let persistent = wgmma.and_then(|w| w.1).unwrap_or_else(|| persistent_pays(config.fp8_q_buffers(), config.head_dim, p.causal, p.seqlen_k));
    Ok(Selection { kernel, num_splits: 1, pack_gqa: false, persistent })
}

fn variant_name(v: Variant, pack_gqa: bool) -> &'static str {
    match v {
        _ if pack_gqa => "GQA-packed decode",
        Variant::Plain | Variant::Varlen => "these",
        Variant::Split | Variant::VarlenSplit => "split-KV",
        Variant::Paged | Variant::VarlenPaged => "paged",
    }
}

/// The `mma.sync` configuration of `variant` for the call.
fn mma_config(
    call: &Call,
    variant: Variant,
    forced: Option<TileConfig>,
    split_cfg: Option<TileConfig>,
    block_rows: usize,
    padded: usize,
    t: &Target,
) -> Result<TileConfig> {
    let p = call.p;
    let none_fits = |table: &[TileConfig], variant| {
        let c = table.iter().find(|c| c.head_dim == padded).copied().ok_or(Error::UnsupportedHeadDim(p.head_dim))?;
        Err(too_big(Kernel::Mma { dtype: call.bufs.dtype, kv: call.bufs.kv, variant, config: c, flavor: Flavor::Plain }, t))
    };
    let own = match (variant, forced) {
        (Variant::Plain, _) => None,
        (Variant::Varlen, Some(c)) if c.head_dim == padded && VARLEN_CONFIGS.contains(&c) => Some(Some(c)),
        (Variant::Varlen, _) => Some(VARLEN_CONFIGS.iter().find(|c| c.head_dim == padded && fits(c, t)).copied()),
        _ => Some(split_cfg),
    };
    match (own, forced) {
        (Some(None), _) => none_fits(variant.configs_for(false, call.bufs.kv.is_some()), variant),
        (Some(Some(c)), Some(given)) if given != c => {
            Err(shape_err("config", format!("{} calls take {c:?}", variant_name(variant, false))))
        }
        (Some(Some(c)), _) => Ok(c),
        (None, Some(c)) => {
            if !CONFIGS.contains(&c) {
                return Err(shape_err("config", format!("{c:?} is not an instantiated configuration")));
            }
            if c.head_dim < call.kernel_head_dim() {
                return Err(shape_err("config", format!("head_dim {} does not fit config for {}", call.kernel_head_dim(), c.head_dim)));
            }
            Ok(c)
        }
        (None, None) => {
            let default = tiles::default_config(padded).filter(|c| fits(c, t));
            let Some(default) = default.or_else(|| CONFIGS.iter().find(|c| c.head_dim == padded && fits(c, t)).copied()) else {
                return none_fits(&CONFIGS, Variant::Plain);
            };
            // Decode-shaped calls (few query rows, or packed GQA heads) take a decode tile
            // where one is smaller than the default's (16 or 64 rows instead of mostly padding).
            Ok(match split_config(&SPLIT_CONFIGS, padded, block_rows, t) {
                Some(c) if block_rows <= c.block_m && c.block_m < default.block_m => c,
                _ => default,
            })
        }
    }
}

/// The `mma.sync` configuration of a call with modifications (of `flavor`): `forced` if it is
/// one of [`MODS_CONFIGS`] for the head dimension, else the first of those that fits the
/// target.
fn mods_config(call: &Call, flavor: Flavor, forced: Option<TileConfig>, padded: usize, t: &Target) -> Result<TileConfig> {
    let of_dim = || MODS_CONFIGS.iter().filter(|c| c.head_dim == padded);
    match forced {
        Some(c) if of_dim().any(|m| *m == c) => Ok(c),
        Some(c) => Err(shape_err("config", format!("calls with attention modifications take one of {:?}, not {c:?}", of_dim().collect::<Vec<_>>()))),
        None => of_dim().find(|c| fits(c, t)).copied().ok_or_else(|| {
            let variant = if call.packed.is_some() { Variant::Varlen } else { Variant::Plain };
            let c = *of_dim().next().expect("every head dimension has a modification configuration");
            too_big(Kernel::Mma { dtype: call.bufs.dtype, kv: None, variant, config: c, flavor }, t)
        }),
    }
}

/// The default split-KV (and paged, and decode) configuration for the padded head dimension
/// and query blocks of `rows` rows on `t`: of `table` ([`SPLIT_CONFIGS`], or [`FP8_CONFIGS`]
/// for FP8 caches) those that fit (fallbacks only where nothing else does,
/// [`tiles::is_fallback`]), the smallest block that holds every row (fewest padding rows in
/// the MMAs), else the largest; the first listed among equals.
fn split_config(table: &[TileConfig], padded: usize, rows: usize, t: &Target) -> Option<TileConfig> {
    let mut fit: Vec<&TileConfig> = table.iter().filter(|c| c.head_dim == padded && fits(c, t) && !tiles::is_fallback(c)).collect();
    if fit.is_empty() {
        fit = table.iter().filter(|c| c.head_dim == padded && fits(c, t)).collect();
    }
    // Blocks that hold every row first, smallest first; then the others, largest first.
    // Stable: equal blocks keep their listed order.
    fit.sort_by_key(|c| if c.block_m >= rows { c.block_m } else { usize::MAX - c.block_m });
    fit.first().map(|&&c| c)
}

/// The split count for a decode-shaped call of `batch * heads` query blocks of `rows` rows on a
/// target with `slots` CTA slots for configuration `c`: 1 (no split) unless `seqlen_q` is 1 to
/// 16 and the call's CTAs fill fewer than four waves of the slots. Then the fewest splits whose
/// CTAs fill their waves to 95% (else the fewest within 0.5% of the best fill), keeping at least
/// two K/V tiles per split and at most [`MAX_SPLITS`]: a partly filled last wave costs as much
/// time as a full one (measured on the H200 at batch 8, 8 KV heads, 8k-128k keys: 4 splits, one
/// wave of 256 CTAs, 3.6-4.6 TB/s; 9 splits, 2.2 waves, 2.9-3.9 TB/s).
pub(crate) fn auto_splits(batch: usize, heads: usize, rows: usize, seqlen_q: usize, seqlen_k: usize, c: &TileConfig, slots: usize) -> usize {
    if seqlen_q == 0 || seqlen_q > 16 {
        return 1;
    }
    let ctas = batch.saturating_mul(heads).saturating_mul(rows.div_ceil(c.block_m));
    let slots = slots.max(1);
    if ctas == 0 || ctas >= 4 * slots {
        return 1;
    }
    let most = (seqlen_k.div_ceil(c.block_n) / 2).clamp(1, MAX_SPLITS);
    // How full the launch's waves are, in [0, 1]: waves / ceil(waves).
    let fill = |s: usize| {
        let n = ctas * s;
        n as f64 / (n.div_ceil(slots) * slots) as f64
    };
    if let Some(s) = (1..=most).find(|&s| fill(s) >= 0.95) {
        return s;
    }
    let best = (1..=most).map(fill).fold(0.0, f64::max);
    (1..=most).find(|&s| fill(s) >= 0.995 * best).unwrap_or(most)
}

/// Keys each split of an FP8 decode call walks where it counts an SM's third CTA slot
/// ([`fp8_auto_splits`]).
pub(crate) const FP8_THIRD_SLOT_KEYS: usize = 4096;

/// [`auto_splits`] for a call over FP8 caches on a target of `sms` SMs. Their decode tiles fit
/// three CTAs an SM (K/V tiles of half the bytes), and a third CTA helps long walks hide the
/// widening's latency, but splitting short caches further to fill it costs more in each split's
/// fixed work and the merge than it brings: the split count for all the slots stands where each
/// split still walks [`FP8_THIRD_SLOT_KEYS`] keys, else the one for two slots an SM. Measured on
/// the H200 (bf16 queries, E4M3, 32/8 heads, head_dim 128, two rounds): batch 64 x 1k keys
/// 66 us with 3 splits against 55 unsplit, batch 8 x 1k 17.7 (6 splits) against 16.0 (4), batch
/// 8 x 8k 59.5 (6) against 56.9 (4); long caches 1.7-2% faster with the third slot, batch 8 x
/// 128k 715 us (6) against 727 (4), batch 64 x 32k 1369 (3) against 1396 (1).
#[allow(clippy::too_many_arguments)]
pub(crate) fn fp8_auto_splits(batch: usize, heads: usize, rows: usize, seqlen_q: usize, seqlen_k: usize, c: &TileConfig, slots: usize, sms: usize) -> usize {
    let n = auto_splits(batch, heads, rows, seqlen_q, seqlen_k, c, slots);
    if seqlen_k.div_ceil(c.block_n) >= FP8_THIRD_SLOT_KEYS.div_ceil(c.block_n) * n {
        n
    } else {
        auto_splits(batch, heads, rows, seqlen_q, seqlen_k, c, slots.min(2 * sms))
    }
}

/// Largest byte stride a tensor map takes (exclusive).
pub(crate) const MAX_STRIDE_BYTES: u64 = 1 << 40;

/// The Hopper configuration for a call the wgmma kernels can take (`forced`, else the default
/// for the head dimension), or why they cannot: tensor maps need strides below 2^40 bytes, and
/// a dimension of more than one index with stride 0 (a broadcast view) is left to `mma.sync`.
fn hopper_kernel(call: &Call, forced: Option<HopperConfig>, t: &Target) -> std::result::Result<HopperConfig, String> {
    let p = call.p;
    let (mods, paged) = (call.mods.is_some(), call.paged.is_some());
    let (d, dv) = (p.head_dim, p.head_dim_v());
    // A kernel for the pair of head dimensions where there is one, else one as wide as the
    // wider (which zero-fills the narrower's extra columns).
    let native = sm90::value_dims_config(d, dv);
    let wide = call.kernel_head_dim();
    let config = match forced {
        Some(c) if !sm90::CONFIGS.contains(&c) => return Err(format!("{c:?} is not an instantiated Hopper configuration")),
        Some(c) if c.head_dim < d || c.head_dim_v < dv => return Err(format!("head_dim {d} (V {dv}) does not fit {c:?}")),
        Some(c) => c,
        None if mods => native.or(sm90::mods_config(wide)).ok_or_else(|| format!("no Hopper kernel for head_dim {wide}"))?,
        None if paged => sm90::paged_config(wide).ok_or_else(|| format!("no Hopper kernel for head_dim {wide}"))?,
        None if native.is_none() && short_causal(call) => sm90::SHORT_CAUSAL,
        None if native.is_none() && small_grid(call, t) => sm90::SMALL_GRID,
        None => native.or(sm90::default_config(wide)).ok_or_else(|| format!("no Hopper kernel for head_dim {wide}"))?,
    };
    if mods && !sm90::has_mods(&config) {
        return Err(format!("{config:?} has no kernel with attention modifications"));
    }
    if call.packed.is_some() && !mods && !paged && !sm90::is_default(&config) {
        return Err(format!("{config:?} has no variable-length kernel"));
    }
    if paged && !sm90::has_paged(&config) {
        return Err(format!("{config:?} has no paged kernel"));
    }
    if call.empty {
        return Ok(config);
    }
    tma_describable(call)?;
    Ok(config)
}

/// True for a plain fixed-length causal call of head_dim 64 (padded) and at most
/// [`SHORT_CAUSAL_KEYS`] keys: it takes [`sm90::SHORT_CAUSAL`], two consumer warpgroups of
/// 64 rows, serial, whose 128-row work tiles waste less of a short causal row than the
/// default's 192 and run persistent. H100, bf16, two runs each (`flashrs benchmark --config`):
/// 0.898x the default's time at 32 x 512, 0.890x at 16 x 1k; 1.021x at 8 x 2k, 1.10x at 2 x 8k
/// (the pipelined twin: 0.913x, 0.911x, 1.048x).
fn short_causal(call: &Call) -> bool {
    let p = call.p;
    p.causal && call.packed.is_none() && call.paged.is_none() && call.kernel_head_dim() == 64 && p.seqlen_k <= SHORT_CAUSAL_KEYS
}

/// The most keys of a causal call at head_dim 64 that takes [`sm90::SHORT_CAUSAL`].
pub const SHORT_CAUSAL_KEYS: usize = 1024;

/// True for a plain fixed-length non-causal call of head_dim 64 (padded) whose default grid (192-row work
/// tiles, one CTA each) fills at most two waves of the target's SMs: it takes
/// [`sm90::SMALL_GRID`], two consumer warpgroups of 64 rows, a third more CTAs that each finish
/// sooner. H100, bf16, non-causal, queued timing, two runs each: 0.84x the default's time at 1 x
/// 8 x 512 (24 CTAs; 12.6 us to 10.6-10.8), 0.84x at 2 x 8 x 512, 1 x 16 x 1k, 0.83x at 2 x 16
/// x 1k (192 CTAs); 1.02-1.05x at 4 x 32 x 512 (384 CTAs) and 1.045x at 32 x 32 x 512.
fn small_grid(call: &Call, t: &Target) -> bool {
    let p = call.p;
    let Some(default) = sm90::default_config(64) else { return false };
    let default_ctas = (p.batch as u128).saturating_mul(p.heads_q as u128).saturating_mul(p.seqlen_q.div_ceil(default.block_m()) as u128);
    !p.causal && call.packed.is_none() && call.paged.is_none() && call.kernel_head_dim() == 64 && default_ctas <= 2 * t.sm_count as u128
}

/// Whether TMA can read the call's Q, K, V and output (and so dO, laid out like it): tensor
/// maps need strides below 2^40 bytes, and a dimension of more than one index with stride 0
/// (a broadcast view) is left to `mma.sync`.
pub(crate) fn tma_describable(call: &Call) -> std::result::Result<(), String> {
    let p = call.p;
    let reads_kv = call.reads_kv();
    let ([bq, sq], [bk, sk]) = match &call.packed {
        Some(v) => ([1, v.total_q], [1, v.total_k]),
        None => ([p.batch, p.seqlen_q], [p.batch, p.seqlen_k]),
    };
    // Paged caches: pages of rows (their strides are the batch strides).
    let [bk, sk] = call.paged.map_or([bk, sk], |pg| [pg.pages.num_pages, pg.pages.page_size]);
    let extents = [[bq, sq, p.heads_q], [bk, sk, p.heads_kv], [bk, sk, p.heads_kv], [bq, sq, p.heads_q]];
    for ((name, strides), extents) in ["q", "k", "v", "out"].into_iter().zip(call.strides).zip(extents) {
        if extents.contains(&0) || (!reads_kv && (name == "k" || name == "v")) {
            // Never read (no keys).
            continue;
        }
        for ((stride, extent), dim) in strides.iter().zip(extents).zip(["batch", "row", "head"]) {
            // Packed rows' batch strides are unused (one batch entry); negative ones are the
            // buffer checks' to report.
            if extent > 1 && *stride >= 0 && (*stride == 0 || *stride as u64 * 2 >= MAX_STRIDE_BYTES) {
                return Err(format!("{name}'s {dim} stride {stride} cannot be described to TMA (nonzero, below 2^40 bytes)"));
            }
        }
    }
    Ok(())
}

/// Whether a Hopper launch of a configuration for `head_dim` that keeps `q_buffers` Q tiles
/// runs persistent (one CTA per SM claiming work tiles): where it keeps two (16-bit head_dim
/// up to 128, FP8 all), so the next tile's Q and first K/V tiles load while the current one
/// computes and stores, and where the work tiles are short enough for that to matter: up to
/// [`PERSISTENT_MAX_KEYS`] keys, and `short` calls (causal, or block-sparse: most blocks see a
/// part of the keys) at head_dim up to 128. Measured on an H100 against one CTA per tile
/// (16k-token batches), 16-bit: 2k keys 3-13% faster, 4k 1-7%, causal head_dim 64 8k-16k
/// 3-9%, causal head_dim 128 8k-16k 0.5-2% slower (two runs; kept for one rule); head_dim 256
/// (one Q tile: the next Q waits for the epilogue) up to 15% slower. Block-sparse non-causal,
/// bf16, 80% sparsity, two interleaved rounds: 0.89x the time at head_dim 64, 8k keys, 0.93x
/// at 128, 0.95x and 0.97x at 16k. FP8: 2k keys 0.94x the time at head_dim 64 and 256
/// non-causal, 0.87x and 0.93x causal; causal 16k at head_dim 256 1.06x (so not persistent),
/// at 64 1.0x. See docs/PERF-NOTES.md.
fn persistent_pays(q_buffers: usize, head_dim: usize, short: bool, seqlen_k: usize) -> bool {
    q_buffers == 2 && (seqlen_k <= PERSISTENT_MAX_KEYS || (short && head_dim <= 128))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Split and paged calls take the smallest decode tile that holds their rows, and rows
    /// that no tile holds (prefill) the largest: 16-row tiles for a 2k-row prefill would do 4x
    /// the tiles' fixed work. GPUs with 99 KB per CTA take what fits.
    #[test]
    fn split_configs_hold_the_rows_or_are_the_largest_that_fit() {
        let bm = |d: usize, rows: usize, t: &Target| split_config(&SPLIT_CONFIGS, d, rows, t).unwrap().block_m;
        let h = &Target::H100;
        assert_eq!([bm(128, 1, h), bm(128, 16, h), bm(128, 17, h), bm(128, 64, h), bm(128, 65, h), bm(128, 2048, h)], [16, 16, 64, 64, 64, 64]);
        assert_eq!([bm(64, 4, h), bm(64, 100, h), bm(64, 5000, h)], [16, 128, 128]);
        assert_eq!([bm(256, 1, h), bm(256, 300, h)], [128, 128]);
        // Among equal blocks the first listed: head_dim 128's 16x128 before 16x64, where it fits.
        assert_eq!(split_config(&SPLIT_CONFIGS, 128, 8, h).unwrap().block_n, 128);
        assert_eq!(split_config(&SPLIT_CONFIGS, 128, 8, &Target::L4).unwrap().block_n, 64);
        // Head_dim 256 on GPUs of 163 or 99 KB per CTA: the small configuration.
        for t in [Target::A100, Target::A10, Target::L4] {
            assert_eq!(split_config(&SPLIT_CONFIGS, 256, 1000, &t), Some(tiles::SMALL_D256));
        }
        // FP8 caches: the same blocks, but head_dim 128's decode tile of 64 keys (three CTAs an
        // SM) and at head_dim 256 the small configuration only.
        assert_eq!(split_config(&FP8_CONFIGS, 128, 8, h).map(|c| (c.block_m, c.block_n)), Some((16, 64)));
        assert_eq!(split_config(&FP8_CONFIGS, 128, 1000, h), split_config(&SPLIT_CONFIGS, 128, 1000, h));
        assert_eq!(split_config(&FP8_CONFIGS, 256, 1, h), Some(tiles::SMALL_D256));
    }

    #[test]
    fn fp8_decode_counts_a_third_cta_slot_only_for_long_walks() {
        let c = FP8_CONFIGS[2]; // 16x64, three CTAs an SM
        assert_eq!((c.block_m, c.block_n), (16, 64));
        let splits = |batch: usize, keys: usize| fp8_auto_splits(batch, 8, 4, 1, keys, &c, 3 * 132, 132);
        assert_eq!([splits(64, 1024), splits(8, 1024), splits(8, 8192)], [1, 4, 4]);
        assert_eq!([splits(8, 131072), splits(64, 32768), splits(1, 131072)], [6, 3, 32]);
    }

    #[test]
    fn auto_splits_fill_whole_waves() {
        let c = SPLIT_CONFIGS[3]; // 16x128
        // 64 CTAs of 132 slots: 2 splits (one wave), not 3 (a second wave 45% full).
        assert_eq!(auto_splits(8, 8, 4, 1, 32768, &c, 132), 2);
        assert_eq!(auto_splits(1, 8, 4, 1, 8192, &c, 132), 16);
        // At most half the tiles (8 tiles of 128 keys: 4).
        assert_eq!(auto_splits(1, 8, 4, 1, 1024, &c, 132), 4);
        // Full GPUs and prefill never split.
        assert_eq!(auto_splits(64, 8, 4, 1, 8192, &c, 132), 1);
        assert_eq!(auto_splits(1, 32, 128, 128, 8192, &c, 132), 1);
    }
}
