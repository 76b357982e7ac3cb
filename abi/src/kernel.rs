//! The identity of every kernel entry point: family, variant, element type and configuration.
//!
//! A [`Kernel`] names one entry point of the PTX modules. Its entry name is derived from it in
//! exactly one place, its [`Display`](core::fmt::Display) implementation, which the host uses
//! to look the function up. [`Kernel::all`] lists every entry the device crate instantiates.
//!
//! # Markers
//!
//! Each device entry point carries a comment in its PTX body, emitted from the constants it is
//! instantiated with (an empty inline-assembly statement with `const` operands):
//!
//! ```text
//! // flashrs-kernel: mma <variant> <dtype> <head_dim> <block_m> <block_n> <warps> <stages> <flavor> <kv>
//! // flashrs-kernel: sm90 <layout> <dtype> <head_dim> <head_dim_v> <block_n> <stages> <consumers> <pipelined> <flavor>
//! // flashrs-kernel: bwd <step> <dtype> <head_dim> <block_m> <block_n> <stages> <flag>
//! // flashrs-kernel: merge <dtype>
//! ```
//!
//! with [`Variant::code`], the Hopper layout `varlen + 2 * paged`, [`DType::code`], [`BwdStep::code`], [`Flavor::code`], [`Fp8::code`] and 0/1 for the flags. [`Kernel::from_marker`] reads
//! it back, so a build can check without a GPU that every entry's name is the name of the
//! configuration it instantiates, and that the modules hold exactly [`Kernel::all`].
use core::fmt;

use crate::bwd::{AccumLayout, BWD_CONFIGS, BWD_MODS, BWD_ROW_THREADS, BWD_SM90_CONFIGS, BwdConfig, BwdSm90Config, SPARSE_LISTS_THREADS};
use crate::dtype::{DType, Fp8};
use crate::merge::MERGE_THREADS;
use crate::sm90::{self, HopperConfig};
use crate::tiles::{self, TileConfig};

/// The text before a kernel marker's fields (see the module docs).
pub const MARKER: &str = "flashrs-kernel:";

/// What an `mma.sync` entry point compiles in besides the plain kernel: the per-CTA sequence
/// lookup of packed variable-length batches, the key-range split with its partial epilogue and
/// merge (split-capable entries write the output directly when a launch has one split), and
/// block-table addressing of a paged K/V cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// `[batch, seqlen, heads, head_dim]` tensors.
    Plain,
    /// Packed variable-length sequences.
    Varlen,
    /// Split-KV.
    Split,
    /// Paged K/V cache (split-capable).
    Paged,
    /// Packed variable-length sequences, split-capable (decode-shaped calls).
    VarlenSplit,
    /// Packed queries against a paged K/V cache (split-capable).
    VarlenPaged,
}

impl Variant {
    /// Every variant, in the order of their codes.
    pub const ALL: [Variant; 6] = [Variant::Plain, Variant::Varlen, Variant::Split, Variant::Paged, Variant::VarlenSplit, Variant::VarlenPaged];

    /// Per-CTA sequence lookup from the offsets.
    pub const fn varlen(self) -> bool {
        matches!(self, Variant::Varlen | Variant::VarlenSplit | Variant::VarlenPaged)
    }
    /// Key-range split (taken when a launch has more than one split).
    pub const fn split(self) -> bool {
        matches!(self, Variant::Split | Variant::Paged | Variant::VarlenSplit | Variant::VarlenPaged)
    }
    /// Block-table K/V addressing.
    pub const fn paged(self) -> bool {
        matches!(self, Variant::Paged | Variant::VarlenPaged)
    }
    /// The configurations this variant is instantiated for.
    pub const fn configs(self) -> &'static [TileConfig] {
        match self {
            Variant::Plain => &tiles::CONFIGS,
            Variant::Varlen => &tiles::VARLEN_CONFIGS,
            _ => &tiles::SPLIT_CONFIGS,
        }
    }
    /// The configurations this variant's modification kernels (`mods`) are instantiated for:
    /// none for the split-capable and paged variants.
    pub const fn mods_configs(self) -> &'static [TileConfig] {
        match self {
            Variant::Plain | Variant::Varlen => &tiles::MODS_CONFIGS,
            _ => &[],
        }
    }
    /// The configurations of this variant's plain (`mods == false`) or modification kernels.
    pub const fn configs_of(self, mods: bool) -> &'static [TileConfig] {
        if mods { self.mods_configs() } else { self.configs() }
    }
    /// The configurations of this variant's kernels over FP8 K/V caches (plain flavor): none
    /// but for the split-capable variants.
    pub const fn fp8_configs(self) -> &'static [TileConfig] {
        if self.split() { &tiles::FP8_CONFIGS } else { &[] }
    }
    /// The configurations of this variant's kernels of the flavor (`mods`) and K/V element
    /// type (`fp8`: an FP8 cache) given.
    pub const fn configs_for(self, mods: bool, fp8: bool) -> &'static [TileConfig] {
        if fp8 { if mods { &[] } else { self.fp8_configs() } } else { self.configs_of(mods) }
    }
    /// The variant's part of an entry name.
    const fn infix(self) -> &'static str {
        match self {
            Variant::Plain => "",
            Variant::Varlen => "varlen_",
            Variant::Split => "split_",
            Variant::Paged => "paged_",
            Variant::VarlenSplit => "varlen_split_",
            Variant::VarlenPaged => "varlen_paged_",
        }
    }
    /// Number of this variant in kernel markers.
    pub const fn code(self) -> u32 {
        self as u32
    }
    /// The variant of marker number `code`.
    pub const fn from_code(code: u32) -> Option<Variant> {
        if (code as usize) < Variant::ALL.len() { Some(Variant::ALL[code as usize]) } else { None }
    }
}

/// What a forward kernel computes besides plain attention: each flavor is its own set of
/// entry points, so that one never pays for another's work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flavor {
    /// Plain attention.
    Plain,
    /// The attention modifications of [`crate::ModParams`] (sliding window, softcap, ALiBi,
    /// sinks).
    Mods,
    /// Those, over the key blocks of a block mask ([`crate::BlockSparse`]) instead of every
    /// key tile the window lets through.
    Sparse,
}

impl Flavor {
    /// Every flavor, in code order.
    pub const ALL: [Flavor; 3] = [Flavor::Plain, Flavor::Mods, Flavor::Sparse];

    /// Number of this flavor in kernel markers.
    pub const fn code(self) -> u32 {
        self as u32
    }

    /// The flavor of marker number `code`.
    pub const fn from_code(code: usize) -> Option<Flavor> {
        if code < Flavor::ALL.len() { Some(Flavor::ALL[code]) } else { None }
    }

    /// True when the kernels compile in the attention modifications (both flavors but
    /// [`Flavor::Plain`]): they take the modification kernels' tile tables.
    pub const fn mods(self) -> bool {
        !matches!(self, Flavor::Plain)
    }

    /// The flavor's part of an entry name.
    const fn infix(self) -> &'static str {
        match self {
            Flavor::Plain => "",
            Flavor::Mods => "mods_",
            Flavor::Sparse => "sparse_",
        }
    }
}

/// One kernel entry point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// A FlashAttention-2-style `mma.sync` kernel (sm_80 and newer; in both modules).
    Mma {
        /// Element type of the queries and the output (and of K and V where `kv` is `None`).
        dtype: DType,
        /// The 8-bit element type of K and V, or `None` for `dtype`'s. FP8 caches have kernels
        /// of the split-capable variants ([`Variant::split`]), plain flavor only.
        kv: Option<Fp8>,
        /// What it compiles in.
        variant: Variant,
        /// Its tile configuration, one of [`Variant::configs_of`] `flavor.mods()`.
        config: TileConfig,
        /// What it computes besides plain attention (only the plain and variable-length
        /// variants have modification kernels).
        flavor: Flavor,
    },
    /// A FlashAttention-3-style Hopper kernel (TMA, wgmma; in the sm_90a module only).
    Sm90 {
        /// Element type of the output (and of Q, K and V where `inputs` is `None`).
        dtype: DType,
        /// The 8-bit element type of Q, K and V, or `None` for `dtype`'s. FP8 kernels exist for
        /// [`Fp8::E4m3`] in the configurations of [`sm90::FP8_CONFIGS`], fixed and variable
        /// length, plain flavor only.
        inputs: Option<Fp8>,
        /// The variable-length twin (only the defaults have one, [`sm90::is_default`]).
        varlen: bool,
        /// K and V read through a block table from paged caches (plain 16-bit kernels of
        /// [`sm90::PAGED`]; fixed-length and variable-length queries).
        paged: bool,
        /// Its tile configuration, one of [`sm90::CONFIGS`].
        config: HopperConfig,
        /// What it computes besides plain attention (only the configurations of
        /// [`sm90::MODS`] have modification kernels).
        flavor: Flavor,
    },
    /// A step of the backward pass (in both modules, but for the Hopper main kernel), see
    /// [`crate::bwd`].
    Bwd {
        /// Element type.
        dtype: DType,
        /// Which of the three launches.
        step: BwdStep,
    },
    /// The merge of a partial attention result into a running one (see [`crate::merge`]; in
    /// both modules).
    Merge {
        /// Element type of the parts and the output.
        dtype: DType,
    },
}

/// The launches of a backward call (see [`crate::bwd`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BwdStep {
    /// `dot(dO, O)` per row, in the statistics layout of the accumulator layout's main kernel
    /// (see [`AccumLayout`]); zeroes the dQ accumulator.
    Prep(AccumLayout),
    /// dK, dV and the dQ accumulator, `mma.sync`, in one of [`BWD_CONFIGS`]: in rows (sm_80
    /// and newer), or (sm_90a only, configurations that take it, [`BwdConfig::fragments`]) in
    /// fragment order, where each thread adds 16 contiguous bytes at once.
    Main {
        /// Its tile configuration.
        config: BwdConfig,
        /// The accumulator layout it adds dQ in.
        accum: AccumLayout,
        /// [`Flavor::Mods`]: the attention modifications compiled in (sliding window, softcap,
        /// ALiBi; configurations of [`BWD_MODS`]); [`Flavor::Sparse`]: those, walking the
        /// query steps of a block mask's lists ([`crate::bwd::QueryLists`]); else
        /// [`Flavor::Plain`].
        flavor: Flavor,
    },
    /// dK, dV and the dQ accumulator (fragment order), Hopper (sm_90a only), in one of
    /// [`BWD_SM90_CONFIGS`]; each has a variable-length twin, and each of those a
    /// block-sparse and a modification one.
    MainSm90 {
        /// Its tile configuration.
        config: BwdSm90Config,
        /// The variable-length twin: packed rows, per-sequence extents from the offsets.
        varlen: bool,
        /// [`Flavor::Sparse`]: walking the query steps of a block mask's lists
        /// ([`crate::bwd::QueryLists`]; no other modification); [`Flavor::Mods`]: the
        /// built-in modifications (sliding window, softcap, ALiBi; no block mask or user
        /// data); else [`Flavor::Plain`].
        flavor: Flavor,
    },
    /// dQ from its accumulator, laid out as the main kernel leaves it.
    Dq(AccumLayout),
    /// Block-sparse calls, before the main kernel: each (batch entry, head, query block) row of
    /// the block mask's lists as a bitmap over the key blocks ([`crate::bwd::QueryLists`]).
    SparseBits,
    /// Block-sparse calls, after [`BwdStep::SparseBits`]: from the bitmaps, the query steps
    /// each (batch entry, K/V head, key block) visits, the main kernel's walk.
    SparseLists,
}

impl BwdStep {
    /// Number of this step in kernel markers.
    pub const fn code(self) -> u32 {
        match self {
            BwdStep::Prep(AccumLayout::Rows) => 0,
            BwdStep::Main { flavor: Flavor::Plain, .. } => 1,
            BwdStep::Main { flavor: Flavor::Mods, .. } => 6,
            BwdStep::Main { flavor: Flavor::Sparse, .. } => 9,
            BwdStep::SparseBits => 7,
            BwdStep::SparseLists => 8,
            BwdStep::Dq(AccumLayout::Rows) => 2,
            BwdStep::MainSm90 { flavor: Flavor::Sparse, .. } => 10,
            BwdStep::MainSm90 { flavor: Flavor::Mods, .. } => 11,
            BwdStep::MainSm90 { .. } => 3,
            BwdStep::Dq(AccumLayout::Fragments) => 4,
            BwdStep::Prep(AccumLayout::Fragments) => 5,
        }
    }

    /// The accumulator layout the step works in: the one a main step leaves, which its prep
    /// step prepares for and its dQ step reads.
    pub const fn accum_layout(self) -> AccumLayout {
        match self {
            BwdStep::Main { accum, .. } => accum,
            BwdStep::MainSm90 { .. } => AccumLayout::Fragments,
            BwdStep::Prep(l) | BwdStep::Dq(l) => l,
            BwdStep::SparseBits | BwdStep::SparseLists => AccumLayout::Rows,
        }
    }

    /// Every backward step the device crate instantiates.
    fn all() -> impl Iterator<Item = BwdStep> + Clone {
        [AccumLayout::Rows, AccumLayout::Fragments]
            .into_iter()
            .flat_map(|l| [BwdStep::Prep(l), BwdStep::Dq(l)])
            .chain(BWD_CONFIGS.into_iter().map(|config| BwdStep::Main { config, accum: AccumLayout::Rows, flavor: Flavor::Plain }))
            .chain(BWD_CONFIGS.into_iter().filter(|c| c.fragments()).map(|config| BwdStep::Main { config, accum: AccumLayout::Fragments, flavor: Flavor::Plain }))
            .chain([Flavor::Mods, Flavor::Sparse].into_iter().flat_map(|flavor| {
                let rows = BWD_MODS.into_iter().map(move |i| BwdStep::Main { config: BWD_CONFIGS[i], accum: AccumLayout::Rows, flavor });
                let frags = BWD_MODS.into_iter().filter(|&i| BWD_CONFIGS[i].fragments()).map(move |i| BwdStep::Main { config: BWD_CONFIGS[i], accum: AccumLayout::Fragments, flavor });
                rows.chain(frags)
            }))
            .chain([BwdStep::SparseBits, BwdStep::SparseLists])
            .chain([Flavor::Plain, Flavor::Sparse, Flavor::Mods].into_iter().flat_map(|flavor| {
                BWD_SM90_CONFIGS.into_iter().flat_map(move |config| [false, true].map(|varlen| BwdStep::MainSm90 { config, varlen, flavor }))
            }))
    }
}

impl Kernel {
    /// Every kernel the device crate instantiates: each `mma.sync` variant for each
    /// configuration of its table, plain and then with modifications, then the split-capable
    /// ones over FP8 caches (each format), then each Hopper
    /// configuration and, for the defaults, its variable-length twin, each of those of every
    /// flavor it has, then the backward's row kernels and each of its configurations; each
    /// for f16 and bf16.
    pub fn all() -> impl Iterator<Item = Kernel> + Clone {
        let mma = Flavor::ALL.into_iter().flat_map(|flavor| {
            Variant::ALL.into_iter().flat_map(move |variant| {
                variant.configs_of(flavor.mods()).iter().flat_map(move |&config| DType::ALL.into_iter().map(move |dtype| Kernel::Mma { dtype, kv: None, variant, config, flavor }))
            })
        });
        let fp8 = Variant::ALL.into_iter().flat_map(|variant| {
            variant.fp8_configs().iter().flat_map(move |&config| {
                Fp8::ALL.into_iter().flat_map(move |kv| DType::ALL.into_iter().map(move |dtype| Kernel::Mma { dtype, kv: Some(kv), variant, config, flavor: Flavor::Plain }))
            })
        });
        let mma = mma.chain(fp8);
        let sm90 = sm90::CONFIGS.into_iter().flat_map(|config| {
            let kinds = Flavor::ALL.into_iter().flat_map(|flavor| [(false, false), (true, false), (false, true), (true, true)].map(|(v, pg)| (v, pg, flavor)));
            kinds.filter(move |&(varlen, paged, flavor)| sm90_twin(&config, varlen, paged, flavor)).flat_map(move |(varlen, paged, flavor)| {
                DType::ALL.into_iter().map(move |dtype| Kernel::Sm90 { dtype, inputs: None, varlen, paged, config, flavor })
            })
        });
        let sm90_fp8 = sm90::FP8_CONFIGS.into_iter().flat_map(|config| {
            [false, true].into_iter().flat_map(move |varlen| {
                DType::ALL.into_iter().map(move |dtype| Kernel::Sm90 { dtype, inputs: Some(Fp8::E4m3), varlen, paged: false, config, flavor: Flavor::Plain })
            })
        });
        let sm90 = sm90.chain(sm90_fp8);
        let bwd = BwdStep::all().flat_map(|step| DType::ALL.into_iter().map(move |dtype| Kernel::Bwd { dtype, step }));
        let merge = DType::ALL.into_iter().map(|dtype| Kernel::Merge { dtype });
        mma.chain(sm90).chain(bwd).chain(merge)
    }

    /// True when the device crate instantiates this kernel (it is one of [`Kernel::all`]).
    pub fn is_instantiated(&self) -> bool {
        match *self {
            Kernel::Mma { variant, config, flavor, kv, .. } => variant.configs_for(flavor.mods(), kv.is_some()).contains(&config),
            Kernel::Sm90 { inputs: None, varlen, paged, config, flavor, .. } => sm90::CONFIGS.contains(&config) && sm90_twin(&config, varlen, paged, flavor),
            Kernel::Sm90 { inputs: Some(f), paged, config, flavor, .. } => f == Fp8::E4m3 && !paged && flavor == Flavor::Plain && sm90::FP8_CONFIGS.contains(&config),
            Kernel::Bwd { step: BwdStep::Main { config, accum, flavor: Flavor::Plain }, .. } => BWD_CONFIGS.contains(&config) && (accum == AccumLayout::Rows || config.fragments()),
            Kernel::Bwd { step: BwdStep::Main { config, accum, flavor }, .. } => {
                flavor.mods() && (accum == AccumLayout::Rows || config.fragments()) && BWD_MODS.iter().any(|&i| BWD_CONFIGS[i] == config)
            }
            Kernel::Bwd { step: BwdStep::MainSm90 { config, .. }, .. } => BWD_SM90_CONFIGS.contains(&config),
            Kernel::Bwd { .. } | Kernel::Merge { .. } => true,
        }
    }

    /// What a forward kernel computes besides plain attention ([`Flavor::Plain`] for the
    /// backward's and the merge).
    pub const fn flavor(&self) -> Flavor {
        match *self {
            Kernel::Mma { flavor, .. } | Kernel::Sm90 { flavor, .. } => flavor,
            Kernel::Bwd { step: BwdStep::Main { flavor, .. } | BwdStep::MainSm90 { flavor, .. }, .. } => flavor,
            Kernel::Bwd { .. } | Kernel::Merge { .. } => Flavor::Plain,
        }
    }

    /// True for the kernels that compile in the attention modifications.
    pub const fn mods(&self) -> bool {
        self.flavor().mods()
    }

    /// True for the kernels a caller's own module may stand in for (see the host's `custom`
    /// module): the forward kernels and the backward's `mma.sync` main kernels of the ABI's
    /// tables ([`Kernel::is_instantiated`]), the ones instantiated with a score modification and
    /// a mask (not the paged Hopper ones, which take two more tensor maps).
    pub fn replaceable(&self) -> bool {
        matches!(self, Kernel::Mma { kv: None, .. } | Kernel::Sm90 { inputs: None, paged: false, .. } | Kernel::Bwd { step: BwdStep::Main { .. }, .. }) && self.is_instantiated()
    }

    /// True for kernels only the sm_90a module holds.
    pub const fn needs_sm90a(&self) -> bool {
        matches!(self, Kernel::Sm90 { .. } | Kernel::Bwd { step: BwdStep::MainSm90 { .. } | BwdStep::Main { accum: AccumLayout::Fragments, .. }, .. })
    }

    /// Element type.
    pub const fn dtype(&self) -> DType {
        match *self {
            Kernel::Mma { dtype, .. } | Kernel::Sm90 { dtype, .. } | Kernel::Bwd { dtype, .. } | Kernel::Merge { dtype } => dtype,
        }
    }

    /// The 8-bit element type of K and V, where they are not of [`Kernel::dtype`].
    pub const fn kv(&self) -> Option<Fp8> {
        match *self {
            Kernel::Mma { kv, .. } => kv,
            Kernel::Sm90 { inputs, .. } => inputs,
            _ => None,
        }
    }

    /// The 8-bit element type of Q, where it is not of [`Kernel::dtype`] (then K and V are
    /// of that type too).
    pub const fn query_fp8(&self) -> Option<Fp8> {
        match *self {
            Kernel::Sm90 { inputs, .. } => inputs,
            _ => None,
        }
    }

    /// The padded head dimension it computes (0 for the backward's row kernels, which take
    /// any).
    pub const fn head_dim(&self) -> usize {
        match self {
            Kernel::Mma { config, .. } => config.head_dim,
            Kernel::Sm90 { config, .. } => config.head_dim,
            Kernel::Bwd { step: BwdStep::Main { config, .. }, .. } => config.head_dim,
            Kernel::Bwd { step: BwdStep::MainSm90 { config, .. }, .. } => config.head_dim,
            Kernel::Bwd { .. } | Kernel::Merge { .. } => 0,
        }
    }

    /// Query rows per CTA (per work tile; the backward main kernel's per step, its row kernels'
    /// rows per CTA).
    pub const fn block_m(&self) -> usize {
        match self {
            Kernel::Mma { config, .. } => config.block_m,
            Kernel::Sm90 { config, .. } => config.block_m(),
            Kernel::Bwd { step: BwdStep::Main { config, .. }, .. } => config.block_m,
            Kernel::Bwd { step: BwdStep::MainSm90 { config, .. }, .. } => config.block_m,
            Kernel::Bwd { .. } => BWD_ROW_THREADS / 32,
            Kernel::Merge { .. } => MERGE_THREADS / 32,
        }
    }

    /// Key rows per K/V tile (the backward main kernel's per CTA; 0 for its row kernels).
    pub const fn block_n(&self) -> usize {
        match self {
            Kernel::Mma { config, .. } => config.block_n,
            Kernel::Sm90 { config, .. } => config.block_n,
            Kernel::Bwd { step: BwdStep::Main { config, .. }, .. } => config.block_n,
            Kernel::Bwd { step: BwdStep::MainSm90 { config, .. }, .. } => config.block_n(),
            Kernel::Bwd { .. } | Kernel::Merge { .. } => 0,
        }
    }

    /// Threads per CTA.
    pub const fn threads(&self) -> usize {
        match self {
            Kernel::Mma { config, .. } => config.threads(),
            Kernel::Sm90 { config, .. } => config.threads(),
            Kernel::Bwd { step: BwdStep::Main { config, .. }, .. } => config.threads(),
            Kernel::Bwd { step: BwdStep::MainSm90 { config, .. }, .. } => config.threads(),
            Kernel::Bwd { step: BwdStep::SparseLists, .. } => SPARSE_LISTS_THREADS,
            Kernel::Bwd { .. } => BWD_ROW_THREADS,
            Kernel::Merge { .. } => MERGE_THREADS,
        }
    }

    /// Dynamic shared memory per CTA, bytes.
    pub const fn smem_bytes(&self) -> usize {
        match self {
            Kernel::Mma { config, .. } => config.smem_bytes(),
            Kernel::Sm90 { config, inputs: None, .. } => config.smem_bytes(),
            Kernel::Sm90 { config, inputs: Some(_), .. } => config.fp8_smem_bytes(),
            Kernel::Bwd { step: BwdStep::Main { config, .. }, .. } => config.smem_bytes(),
            Kernel::Bwd { step: BwdStep::MainSm90 { config, .. }, .. } => config.smem_bytes(),
            Kernel::Bwd { .. } | Kernel::Merge { .. } => 0,
        }
    }

    /// The kernel a marker line describes (the text from [`MARKER`] on, or a PTX line holding
    /// it), if it is one.
    pub fn from_marker(line: &str) -> Option<Kernel> {
        let (_, rest) = line.split_once(MARKER)?;
        let mut words = rest.split_whitespace();
        let family = words.next()?;
        // The forward families carry an eighth field, the flavor; the `mma.sync` one a ninth,
        // K's and V's element type, the Hopper one V's head dimension.
        let fields = match family {
            "bwd" => 7,
            "merge" => 1,
            "sm90" => 10,
            _ => 9,
        };
        let mut n = [0usize; 10];
        for x in n.iter_mut().take(fields) {
            *x = words.next()?.parse().ok()?;
        }
        if words.next().is_some() {
            return None;
        }
        let flag = |x: usize| match x {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        };
        if family == "merge" {
            return Some(Kernel::Merge { dtype: DType::from_code(u32::try_from(n[0]).ok()?)? });
        }
        let dtype = DType::from_code(u32::try_from(n[1]).ok()?)?;
        match family {
            "mma" => {
                let variant = Variant::from_code(u32::try_from(n[0]).ok()?)?;
                let config = TileConfig { head_dim: n[2], block_m: n[3], block_n: n[4], warps: n[5], stages: n[6] };
                let kv = Fp8::from_code(u32::try_from(n[8]).ok()?)?;
                Some(Kernel::Mma { dtype, kv, variant, config, flavor: Flavor::from_code(n[7])? })
            }
            "sm90" => {
                let config = HopperConfig { head_dim: n[2], head_dim_v: n[3], block_n: n[4], stages: n[5], consumers: n[6], pipelined: flag(n[7])? };
                let inputs = Fp8::from_code(u32::try_from(n[9]).ok()?)?;
                let (varlen, paged) = (flag(n[0] & 1)?, flag(n[0] >> 1)?);
                Some(Kernel::Sm90 { dtype, inputs, varlen, paged, config, flavor: Flavor::from_code(n[8])? })
            }
            "bwd" => {
                let config = BwdConfig { head_dim: n[2], block_m: n[3], block_n: n[4], stages: n[5] };
                let none = BwdConfig { head_dim: 0, block_m: 0, block_n: 0, stages: 0 };
                let sm90 = BwdSm90Config { head_dim: n[2], block_m: n[3], stages: n[5] };
                let step = match (n[0], n[6]) {
                    (0, 0) if config == none => BwdStep::Prep(AccumLayout::Rows),
                    (1, a) => BwdStep::Main { config, accum: if flag(a)? { AccumLayout::Fragments } else { AccumLayout::Rows }, flavor: Flavor::Plain },
                    (6, a) => BwdStep::Main { config, accum: if flag(a)? { AccumLayout::Fragments } else { AccumLayout::Rows }, flavor: Flavor::Mods },
                    (9, a) => BwdStep::Main { config, accum: if flag(a)? { AccumLayout::Fragments } else { AccumLayout::Rows }, flavor: Flavor::Sparse },
                    (7, 0) if config == none => BwdStep::SparseBits,
                    (8, 0) if config == none => BwdStep::SparseLists,
                    (2, 0) if config == none => BwdStep::Dq(AccumLayout::Rows),
                    (3, v) if n[4] == sm90.block_n() => BwdStep::MainSm90 { config: sm90, varlen: flag(v)?, flavor: Flavor::Plain },
                    (10, v) if n[4] == sm90.block_n() => BwdStep::MainSm90 { config: sm90, varlen: flag(v)?, flavor: Flavor::Sparse },
                    (11, v) if n[4] == sm90.block_n() => BwdStep::MainSm90 { config: sm90, varlen: flag(v)?, flavor: Flavor::Mods },
                    (4, 0) if config == none => BwdStep::Dq(AccumLayout::Fragments),
                    (5, 0) if config == none => BwdStep::Prep(AccumLayout::Fragments),
                    _ => return None,
                };
                Some(Kernel::Bwd { dtype, step })
            }
            _ => None,
        }
    }
}

/// Each `.entry` of a PTX module with the kernel marker its body holds: `None` for a body with
/// none, or with two (two entries inlined into one). The build checks its modules with it, and
/// the host maps the entries of a caller's own module to the kernels they stand in for.
pub fn marked_entries(ptx: &str) -> impl Iterator<Item = (&str, Option<Kernel>)> {
    fn entry_name(line: &str) -> Option<&str> {
        let rest = line.split(".entry ").nth(1).filter(|_| line.trim_start().starts_with(".entry") || line.contains(" .entry "))?;
        Some(rest.split('(').next().unwrap_or(rest).trim())
    }
    let mut lines = ptx.lines().peekable();
    core::iter::from_fn(move || {
        let name = lines.by_ref().find_map(entry_name)?;
        let mut marker: Option<Option<Kernel>> = None;
        while let Some(line) = lines.next_if(|l| entry_name(l).is_none()) {
            if let Some(k) = Kernel::from_marker(line) {
                marker = Some(if marker.is_some() { None } else { Some(k) });
            }
        }
        Some((name, marker.flatten()))
    })
}

/// The entry point's name: `flash_fwd_[<variant>_][mods_|sparse_]<dtype>[_<fp8>]_d<D>_<BM>x<BN>w<warps>s<stages>`
/// for `mma.sync` kernels (`<fp8>` the K/V element type where it is 8-bit), `flash_fwd_sm90_[varlen_][paged_][mods_|sparse_]<dtype>_d<D>[v<DV>]_<BM>x<BN>s<stages>[_serial]`
/// for Hopper ones (`v<DV>` where V's head dimension differs), `flash_bwd_prep_[frag_]<dtype>`, `flash_bwd_[frag_][mods_|sparse_]<dtype>_d<D>_<BM>x<BN>s<stages>`, `flash_bwd_sparse_{bits,lists}_<dtype>`,
/// `flash_bwd_sm90_[varlen_][sparse_]<dtype>_d<D>_<BM>x<BN>s<stages>`
/// and `flash_bwd_dq_[frag_]<dtype>` for the backward's, `flash_merge_<dtype>` for the merge.
impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Kernel::Mma { dtype, kv, variant, config: c, flavor } => {
                let (v, m, t) = (variant.infix(), flavor.infix(), dtype.name());
                let kv = kv.map_or("", |kv| match kv {
                    Fp8::E4m3 => "_e4m3",
                    Fp8::E5m2 => "_e5m2",
                });
                write!(f, "flash_fwd_{v}{m}{t}{kv}_d{}_{}x{}w{}s{}", c.head_dim, c.block_m, c.block_n, c.warps, c.stages)
            }
            Kernel::Sm90 { dtype, inputs, varlen, paged, config: c, flavor } => {
                let (v, m, t) = (if *varlen { "varlen_" } else { "" }, flavor.infix(), dtype.name());
                let pg = if *paged { "paged_" } else { "" };
                let serial = if c.pipelined { "" } else { "_serial" };
                let inputs = inputs.map_or("", |i| match i {
                    Fp8::E4m3 => "_e4m3",
                    Fp8::E5m2 => "_e5m2",
                });
                write!(f, "flash_fwd_sm90_{v}{pg}{m}{t}{inputs}_d{}", c.head_dim)?;
                if c.head_dim_v != c.head_dim {
                    write!(f, "v{}", c.head_dim_v)?;
                }
                write!(f, "_{}x{}s{}{serial}", c.block_m(), c.block_n, c.stages)
            }
            Kernel::Bwd { dtype, step } => match step {
                BwdStep::Prep(AccumLayout::Rows) => write!(f, "flash_bwd_prep_{}", dtype.name()),
                BwdStep::Prep(AccumLayout::Fragments) => write!(f, "flash_bwd_prep_frag_{}", dtype.name()),
                BwdStep::Main { config: c, accum, flavor } => {
                    let a = if *accum == AccumLayout::Fragments { "frag_" } else { "" };
                    write!(f, "flash_bwd_{a}{}{}_d{}_{}x{}s{}", flavor.infix(), dtype.name(), c.head_dim, c.block_m, c.block_n, c.stages)
                }
                BwdStep::MainSm90 { config: c, varlen, flavor } => {
                    let v = if *varlen { "varlen_" } else { "" };
                    write!(f, "flash_bwd_sm90_{v}{}{}_d{}_{}x{}s{}", flavor.infix(), dtype.name(), c.head_dim, c.block_m, c.block_n(), c.stages)
                }
                BwdStep::Dq(AccumLayout::Rows) => write!(f, "flash_bwd_dq_{}", dtype.name()),
                BwdStep::Dq(AccumLayout::Fragments) => write!(f, "flash_bwd_dq_frag_{}", dtype.name()),
                BwdStep::SparseBits => write!(f, "flash_bwd_sparse_bits_{}", dtype.name()),
                BwdStep::SparseLists => write!(f, "flash_bwd_sparse_lists_{}", dtype.name()),
            },
            Kernel::Merge { dtype } => write!(f, "flash_merge_{}", dtype.name()),
        }
    }
}

/// True when Hopper configuration `c` has the kernel of this length kind, K/V layout and
/// flavor: every configuration a plain fixed-length one, the defaults a variable-length twin,
/// those of [`sm90::MODS`] modification and block-sparse kernels of both kinds, and those of
/// [`sm90::has_paged`] plain paged kernels of both kinds.
const fn sm90_twin(c: &HopperConfig, varlen: bool, paged: bool, flavor: Flavor) -> bool {
    match (paged, flavor.mods()) {
        (true, mods) => !mods && sm90::has_paged(c),
        (false, true) => sm90::has_mods(c),
        (false, false) => !varlen || sm90::is_default(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::string::ToString;

    #[test]
    fn names_follow_the_configuration() {
        let c = TileConfig { head_dim: 128, block_m: 16, block_n: 128, warps: 4, stages: 2 };
        let k = Kernel::Mma { kv: None, dtype: DType::Bf16, variant: Variant::VarlenPaged, config: c, flavor: Flavor::Plain };
        assert_eq!(k.to_string(), "flash_fwd_varlen_paged_bf16_d128_16x128w4s2");
        assert_eq!(Kernel::Mma { kv: None, dtype: DType::F16, variant: Variant::Plain, config: c, flavor: Flavor::Plain }.to_string(), "flash_fwd_f16_d128_16x128w4s2");
        let m = Kernel::Mma { kv: None, dtype: DType::Bf16, variant: Variant::Varlen, config: tiles::VARLEN_CONFIGS[1], flavor: Flavor::Mods };
        assert_eq!(m.to_string(), "flash_fwd_varlen_mods_bf16_d128_128x64w8s2");
        assert!(m.mods() && m.is_instantiated() && !m.needs_sm90a());
        let h = Kernel::Sm90 { inputs: None, dtype: DType::F16, varlen: true, paged: false, config: sm90::CONFIGS[0], flavor: Flavor::Plain };
        assert_eq!(h.to_string(), "flash_fwd_sm90_varlen_f16_d64_192x128s3");
        let hm = Kernel::Sm90 { inputs: None, dtype: DType::Bf16, varlen: false, paged: false, config: sm90::CONFIGS[1], flavor: Flavor::Mods };
        assert_eq!(hm.to_string(), "flash_fwd_sm90_mods_bf16_d128_128x128s2");
        let hm64 = Kernel::Sm90 { inputs: None, dtype: DType::F16, varlen: true, paged: false, config: sm90::CONFIGS[3], flavor: Flavor::Mods };
        assert_eq!(hm64.to_string(), "flash_fwd_sm90_varlen_mods_f16_d64_128x128s3");
        let sparse = Kernel::Sm90 { inputs: None, dtype: DType::F16, varlen: true, paged: false, config: sm90::CONFIGS[3], flavor: Flavor::Sparse };
        assert_eq!(sparse.to_string(), "flash_fwd_sm90_varlen_sparse_f16_d64_128x128s3");
        assert!(sparse.mods() && sparse.is_instantiated() && sparse.flavor() == Flavor::Sparse);
        let mma_sparse = Kernel::Mma { kv: None, dtype: DType::Bf16, variant: Variant::Varlen, config: tiles::VARLEN_CONFIGS[1], flavor: Flavor::Sparse };
        assert_eq!(mma_sparse.to_string(), "flash_fwd_varlen_sparse_bf16_d128_128x64w8s2");
        assert!(!Kernel::Mma { kv: None, dtype: DType::F16, variant: Variant::Split, config: tiles::SPLIT_CONFIGS[0], flavor: Flavor::Sparse }.is_instantiated());
        assert!(hm64.is_instantiated() && !Kernel::Sm90 { inputs: None, dtype: DType::F16, varlen: true, paged: false, config: sm90::CONFIGS[0], flavor: Flavor::Mods }.is_instantiated());
        let paged = |varlen, config, flavor| Kernel::Sm90 { inputs: None, dtype: DType::Bf16, varlen, paged: true, config, flavor };
        assert_eq!(paged(true, sm90::CONFIGS[1], Flavor::Plain).to_string(), "flash_fwd_sm90_varlen_paged_bf16_d128_128x128s2");
        assert_eq!(paged(false, sm90::CONFIGS[3], Flavor::Plain).to_string(), "flash_fwd_sm90_paged_bf16_d64_128x128s3");
        assert!(paged(false, sm90::CONFIGS[2], Flavor::Plain).is_instantiated() && !paged(true, sm90::CONFIGS[1], Flavor::Plain).replaceable());
        // Paged: their table's configurations, plain attention only.
        assert!(!paged(false, sm90::CONFIGS[0], Flavor::Plain).is_instantiated() && !paged(false, sm90::CONFIGS[8], Flavor::Plain).is_instantiated());
        assert!(!paged(false, sm90::CONFIGS[1], Flavor::Mods).is_instantiated() && !paged(true, sm90::CONFIGS[1], Flavor::Sparse).is_instantiated());
        let serial = Kernel::Sm90 { inputs: None, dtype: DType::Bf16, varlen: false, paged: false, config: sm90::CONFIGS[5], flavor: Flavor::Plain };
        assert_eq!(serial.to_string(), "flash_fwd_sm90_bf16_d128_128x128s2_serial");
        let bwd = Kernel::Bwd { dtype: DType::Bf16, step: BwdStep::Main { config: BWD_CONFIGS[1], accum: AccumLayout::Rows, flavor: Flavor::Plain } };
        assert_eq!(bwd.to_string(), "flash_bwd_bf16_d128_64x128s3");
        assert!(!bwd.needs_sm90a());
        let frag = Kernel::Bwd { dtype: DType::F16, step: BwdStep::Main { config: BWD_CONFIGS[0], accum: AccumLayout::Fragments, flavor: Flavor::Plain } };
        assert_eq!(frag.to_string(), "flash_bwd_frag_f16_d64_128x128s3");
        assert!(frag.needs_sm90a() && frag.is_instantiated());
        let wide = Kernel::Bwd { dtype: DType::F16, step: BwdStep::Main { config: BWD_CONFIGS[2], accum: AccumLayout::Fragments, flavor: Flavor::Plain } };
        assert!(BWD_CONFIGS[2].head_dim == 256 && !wide.is_instantiated());
        assert_eq!(Kernel::Bwd { dtype: DType::F16, step: BwdStep::Prep(AccumLayout::Rows) }.to_string(), "flash_bwd_prep_f16");
        let hopper = Kernel::Bwd { dtype: DType::Bf16, step: BwdStep::MainSm90 { config: BWD_SM90_CONFIGS[1], varlen: false, flavor: Flavor::Plain } };
        assert_eq!(hopper.to_string(), "flash_bwd_sm90_bf16_d128_64x128s2");
        assert!(hopper.needs_sm90a());
        let twin = Kernel::Bwd { dtype: DType::F16, step: BwdStep::MainSm90 { config: BWD_SM90_CONFIGS[2], varlen: true, flavor: Flavor::Plain } };
        assert_eq!(twin.to_string(), "flash_bwd_sm90_varlen_f16_d256_64x64s2");
        assert_eq!(Kernel::Bwd { dtype: DType::F16, step: BwdStep::Dq(AccumLayout::Fragments) }.to_string(), "flash_bwd_dq_frag_f16");
        assert_eq!(Kernel::Bwd { dtype: DType::Bf16, step: BwdStep::Prep(AccumLayout::Fragments) }.to_string(), "flash_bwd_prep_frag_bf16");
        let lists = Kernel::Bwd { dtype: DType::F16, step: BwdStep::SparseLists };
        assert_eq!((lists.to_string(), lists.threads()), ("flash_bwd_sparse_lists_f16".into(), crate::bwd::SPARSE_LISTS_THREADS));
        let sparse = Kernel::Bwd { dtype: DType::Bf16, step: BwdStep::Main { config: BWD_CONFIGS[8], accum: AccumLayout::Fragments, flavor: Flavor::Sparse } };
        assert_eq!(sparse.to_string(), "flash_bwd_frag_sparse_bf16_d128_64x64s2");
        assert!(sparse.is_instantiated() && sparse.replaceable() && sparse.mods());
        let hopper = Kernel::Bwd { dtype: DType::F16, step: BwdStep::MainSm90 { config: BWD_SM90_CONFIGS[1], varlen: true, flavor: Flavor::Sparse } };
        assert_eq!(hopper.to_string(), "flash_bwd_sm90_varlen_sparse_f16_d128_64x128s2");
        assert!(hopper.is_instantiated() && hopper.needs_sm90a() && hopper.flavor() == Flavor::Sparse && !hopper.replaceable());
        let mods = Kernel::Bwd { dtype: DType::F16, step: BwdStep::MainSm90 { config: BWD_SM90_CONFIGS[1], varlen: true, flavor: Flavor::Mods } };
        assert_eq!(mods.to_string(), "flash_bwd_sm90_varlen_mods_f16_d128_64x128s2");
        assert!(mods.is_instantiated() && mods.needs_sm90a() && mods.flavor() == Flavor::Mods && !mods.replaceable());
        let fp8 = Kernel::Mma { dtype: DType::Bf16, kv: Some(Fp8::E4m3), variant: Variant::Paged, config: tiles::SPLIT_CONFIGS[3], flavor: Flavor::Plain };
        assert_eq!(fp8.to_string(), "flash_fwd_paged_bf16_e4m3_d128_16x128w4s2");
        assert!(fp8.is_instantiated() && !fp8.replaceable() && fp8.kv() == Some(Fp8::E4m3));
        let e5m2 = Kernel::Mma { dtype: DType::F16, kv: Some(Fp8::E5m2), variant: Variant::Split, config: tiles::SPLIT_CONFIGS[0], flavor: Flavor::Plain };
        assert_eq!(e5m2.to_string(), "flash_fwd_split_f16_e5m2_d64_128x64w4s2");
        // FP8 caches: split-capable variants, plain flavor only.
        let e5m2_kernel = |variant, config, flavor| Kernel::Mma { dtype: DType::F16, kv: Some(Fp8::E5m2), variant, config, flavor };
        assert!(!e5m2_kernel(Variant::Plain, tiles::CONFIGS[0], Flavor::Plain).is_instantiated());
        assert!(!e5m2_kernel(Variant::Varlen, tiles::VARLEN_CONFIGS[0], Flavor::Plain).is_instantiated());
        assert!(!e5m2_kernel(Variant::Split, tiles::SPLIT_CONFIGS[0], Flavor::Mods).is_instantiated());
        let merge = Kernel::Merge { dtype: DType::Bf16 };
        assert_eq!(merge.to_string(), "flash_merge_bf16");
        assert!(merge.is_instantiated() && !merge.needs_sm90a() && merge.threads() == MERGE_THREADS);
    }

    #[test]
    fn every_kernel_has_its_own_name_and_reads_back_from_its_marker() {
        let all: std::vec::Vec<Kernel> = Kernel::all().collect();
        let names: HashSet<_> = all.iter().map(|k| k.to_string()).collect();
        assert_eq!(names.len(), all.len(), "two kernels share a name");
        // FP8 caches: both formats on the split-capable variants' plain tables.
        let fp8 = 2 * Variant::ALL.iter().map(|v| v.fp8_configs().len()).sum::<usize>();
        let mma = fp8 + Variant::ALL.iter().map(|v| v.configs().len() + 2 * v.mods_configs().len()).sum::<usize>();
        let sm90 = sm90::CONFIGS.len() + sm90::DEFAULTS.len() + 2 * sm90::PAGED.len() + 4 * sm90::MODS.len() + 5 * sm90::VALUE_DIMS.len() + 2 * sm90::FP8_CONFIGS.len();
        let frag = BWD_CONFIGS.iter().filter(|c| c.fragments()).count();
        assert!(frag > 0 && frag < BWD_CONFIGS.len());
        let mods_frag = BWD_MODS.iter().filter(|&&i| BWD_CONFIGS[i].fragments()).count();
        // The backward: prep and dQ in two layouts, the plain main kernels, modification and
        // block-sparse twins, the Hopper ones of both length kinds and three flavors, the two
        // list launches.
        assert_eq!(all.len(), 2 * (mma + sm90 + 4 + BWD_CONFIGS.len() + frag + 2 * (BWD_MODS.len() + mods_frag) + 6 * BWD_SM90_CONFIGS.len() + 2 + 1));
        for k in &all {
            assert!(k.is_instantiated(), "{k}");
            let marker = match *k {
                Kernel::Mma { dtype, kv, variant, config: c, flavor } => std::format!(
                    "\t// {MARKER} mma {} {} {} {} {} {} {} {} {}",
                    variant.code(), dtype.code(), c.head_dim, c.block_m, c.block_n, c.warps, c.stages, flavor.code(), Fp8::code(kv)
                ),
                Kernel::Sm90 { dtype, inputs, varlen, paged, config: c, flavor } => std::format!(
                    "// {MARKER} sm90 {} {} {} {} {} {} {} {} {} {}",
                    varlen as u32 + 2 * paged as u32, dtype.code(), c.head_dim, c.head_dim_v, c.block_n, c.stages, c.consumers, c.pipelined as u32, flavor.code(), Fp8::code(inputs)
                ),
                Kernel::Bwd { dtype, step } => {
                    let (c, flag) = match step {
                        BwdStep::Main { config: c, accum, .. } => (c, accum == AccumLayout::Fragments),
                        BwdStep::MainSm90 { config: c, varlen, .. } => (BwdConfig { head_dim: c.head_dim, block_m: c.block_m, block_n: c.block_n(), stages: c.stages }, varlen),
                        _ => (BwdConfig { head_dim: 0, block_m: 0, block_n: 0, stages: 0 }, false),
                    };
                    std::format!("// {MARKER} bwd {} {} {} {} {} {} {}", step.code(), dtype.code(), c.head_dim, c.block_m, c.block_n, c.stages, flag as u32)
                }
                Kernel::Merge { dtype } => std::format!("// {MARKER} merge {}", dtype.code()),
            };
            assert_eq!(Kernel::from_marker(&marker), Some(*k), "{marker}");
        }
        // Not instantiated: a variable-length twin of a non-default, a config from another table.
        assert!(!Kernel::Sm90 { inputs: None, dtype: DType::F16, varlen: true, paged: false, config: sm90::CONFIGS[3], flavor: Flavor::Plain }.is_instantiated());
        assert!(!Kernel::Sm90 { inputs: None, dtype: DType::F16, varlen: false, paged: false, config: sm90::CONFIGS[0], flavor: Flavor::Mods }.is_instantiated());
        // FP8 inputs: e4m3 on their own table, plain flavor, not replaceable.
        let fp8 = |inputs, config, flavor| Kernel::Sm90 { dtype: DType::Bf16, inputs: Some(inputs), varlen: true, paged: false, config, flavor };
        let e4m3 = fp8(Fp8::E4m3, sm90::FP8_CONFIGS[1], Flavor::Plain);
        assert!(e4m3.is_instantiated() && !e4m3.replaceable() && e4m3.kv() == Some(Fp8::E4m3) && e4m3.query_fp8() == Some(Fp8::E4m3));
        assert_eq!(e4m3.to_string(), "flash_fwd_sm90_varlen_bf16_e4m3_d128_192x128s3_serial");
        assert_eq!(e4m3.smem_bytes(), 1024 + 2 * 192 * 128 + 3 * 128 * 3 * 128 + 1024);
        assert!(!fp8(Fp8::E5m2, sm90::FP8_CONFIGS[1], Flavor::Plain).is_instantiated());
        assert!(!fp8(Fp8::E4m3, sm90::FP8_CONFIGS[1], Flavor::Mods).is_instantiated());
        assert!(!fp8(Fp8::E4m3, sm90::CONFIGS[3], Flavor::Plain).is_instantiated());
        let c = tiles::CONFIGS[6];
        assert!(!tiles::SPLIT_CONFIGS.contains(&c) && !Kernel::Mma { kv: None, dtype: DType::F16, variant: Variant::Split, config: c, flavor: Flavor::Plain }.is_instantiated());
        // Modifications: not on split-capable or paged variants, nor on tiles outside their table.
        let split = tiles::SPLIT_CONFIGS[0];
        assert!(!Kernel::Mma { kv: None, dtype: DType::F16, variant: Variant::Split, config: split, flavor: Flavor::Mods }.is_instantiated());
        assert!(!Kernel::Mma { kv: None, dtype: DType::F16, variant: Variant::Plain, config: tiles::CONFIGS[6], flavor: Flavor::Mods }.is_instantiated());
        // The backward's modification twins: of their table's configurations only, in rows, and
        // in fragment order where the configuration takes it.
        let bwd = |config: BwdConfig, accum, flavor| Kernel::Bwd { dtype: DType::Bf16, step: BwdStep::Main { config, accum, flavor } };
        let twin = bwd(BWD_CONFIGS[7], AccumLayout::Rows, Flavor::Mods);
        assert!(twin.is_instantiated() && twin.mods() && twin.to_string() == "flash_bwd_mods_bf16_d128_64x64s1");
        assert!(!bwd(BWD_CONFIGS[1], AccumLayout::Rows, Flavor::Mods).is_instantiated() && !BWD_MODS.contains(&1));
        let frag = bwd(BWD_CONFIGS[7], AccumLayout::Fragments, Flavor::Mods);
        assert!(frag.is_instantiated() && frag.needs_sm90a() && frag.to_string() == "flash_bwd_frag_mods_bf16_d128_64x64s1");
        assert!(!bwd(BWD_CONFIGS[3], AccumLayout::Fragments, Flavor::Mods).is_instantiated() && !BWD_CONFIGS[3].fragments());
        assert!(bwd(BWD_CONFIGS[7], AccumLayout::Rows, Flavor::Sparse).is_instantiated());
        assert!(!bwd(BWD_CONFIGS[1], AccumLayout::Rows, Flavor::Sparse).is_instantiated());
    }

    #[test]
    fn malformed_markers_read_as_none() {
        for bad in ["", "flashrs-kernel:", "flashrs-kernel: mma 0 0 64 128 64 4 2", "flashrs-kernel: mma 9 0 64 128 64 4 2 0 0",
            "flashrs-kernel: mma 0 7 64 128 64 4 2 0 0", "flashrs-kernel: mma 0 0 64 128 64 4 2 0 3", "flashrs-kernel: mma 0 0 64 128 64 4 2 0", "flashrs-kernel: sm90 2 0 64 128 3 3 1 0", "flashrs-kernel: tc 0 0 64 128 64 4 2 0",
            "flashrs-kernel: mma 0 0 64 128 64 4 2 0 1 0", "flashrs-kernel: mma 0 0 64 128 x 4 2 0 0", "flashrs-kernel: mma 0 0 64 128 64 4 2 3 0",
            "flashrs-kernel: sm90 0 0 64 128 3 3 1 3", "flashrs-kernel: sm90 0 0 64 128 3 3 1", "flashrs-kernel: sm90 0 0 64 64 128 3 3 1 3",
            "flashrs-kernel: sm90 0 0 64 64 128 3 3 1 0 0 0", "flashrs-kernel: sm90 0 0 64 64 128 3 3 1 0 3",
            "flashrs-kernel: bwd 0 0 64 0 0 0 0", "flashrs-kernel: bwd 3 0 0 0 0 0 0", "flashrs-kernel: bwd 1 0 64 64 128 2 2",
            "flashrs-kernel: bwd 3 0 128 64 64 2 0", "flashrs-kernel: bwd 4 0 64 0 0 0 0", "flashrs-kernel: bwd 3 0 128 64 128 2 2",
            "flashrs-kernel: bwd 6 0 128 64 128 2 2", "flashrs-kernel: bwd 7 0 128 64 128 2 0",
            "flashrs-kernel: merge", "flashrs-kernel: merge 7", "flashrs-kernel: merge 0 0"] {
            assert_eq!(Kernel::from_marker(bad), None, "{bad:?}");
        }
    }
}
