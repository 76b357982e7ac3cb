//! What a call computes: [`AttentionParams`], its strides and its kernel choice.
//!
//! Semantics are those of FlashAttention-2's `flash_attn_func`: `out = softmax(scale * Q K^T +
//! mask) V` per (batch, head), tensors `[batch, seqlen, heads, head_dim]` with explicit strides,
//! grouped-query attention when `heads_q` is a multiple of `heads_kv`, and causal masking
//! aligned to the bottom-right corner when `seqlen_q != seqlen_k`.
use crate::descale::{Descale, Descales};
use flashrs_abi::{HopperConfig, TileConfig};

use crate::error::{Error, Result};
use crate::layout::{DeviceArray, DeviceOffsets, Kv, Layout, Offsets, PagedKv, Rows};
use crate::mods::{Alibi, Mods, Window};
use crate::sparse::BlockMask;

/// Strides in elements of a `[batch, seqlen, heads, head_dim]` tensor whose last dimension is
/// contiguous.
///
/// There is no `head_dim` stride: the last dimension is always contiguous (stride 1), as in
/// FlashAttention, because the kernels move each row in 16-byte vectors. Strides must be
/// non-negative and multiples of 8 elements (16 bytes); Q, K and V may repeat elements (zero
/// strides broadcast), the output may not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Strides {
    /// Between batches.
    pub batch: i64,
    /// Between sequence positions.
    pub row: i64,
    /// Between heads.
    pub head: i64,
}

impl Strides {
    /// Contiguous `[batch, seqlen, heads, head_dim]` (FlashAttention's layout); `None` when a
    /// stride overflows 64 bits.
    pub fn bshd(seqlen: usize, heads: usize, head_dim: usize) -> Option<Self> {
        let row = i64::try_from(heads).ok()?.checked_mul(i64::try_from(head_dim).ok()?)?;
        Some(Strides { batch: row.checked_mul(i64::try_from(seqlen).ok()?)?, row, head: head_dim as i64 })
    }

    /// Contiguous `[batch, heads, seqlen, head_dim]` (PyTorch's SDPA layout), viewed as
    /// `[batch, seqlen, heads, head_dim]`; `None` when a stride overflows 64 bits.
    pub fn bhsd(seqlen: usize, heads: usize, head_dim: usize) -> Option<Self> {
        let head = i64::try_from(seqlen).ok()?.checked_mul(i64::try_from(head_dim).ok()?)?;
        Some(Strides { batch: head.checked_mul(i64::try_from(heads).ok()?)?, row: head_dim as i64, head })
    }

    /// Elements a buffer needs to hold a tensor of `dims` (`[batch, seqlen, heads, head_dim]`)
    /// laid out with these strides: the highest offset plus one, 0 for an empty tensor; `None`
    /// when a stride is negative or the offset overflows.
    pub fn extent(&self, dims: [usize; 4]) -> Option<usize> {
        if dims.contains(&0) {
            return Some(0);
        }
        let reach = |n: usize, s: i64| i64::try_from(n - 1).ok()?.checked_mul(s).filter(|&x| x >= 0);
        let last = reach(dims[0], self.batch)?.checked_add(reach(dims[1], self.row)?)?.checked_add(reach(dims[2], self.head)?)?;
        usize::try_from(last).ok()?.checked_add(dims[3])
    }
}

/// The default strides of the four tensors (each can still be given explicitly).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DimOrder {
    /// Contiguous `[batch, seqlen, heads, head_dim]` (FlashAttention's).
    #[default]
    Bshd,
    /// Contiguous `[batch, heads, seqlen, head_dim]` (PyTorch's SDPA).
    Bhsd,
}

/// Which kernel family runs, by name (the command line's `--path`).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KernelPath {
    /// The fastest the GPU has for the call.
    #[default]
    Auto,
    /// FlashAttention-2-style `mma.sync` kernels (sm_80 and newer).
    MmaSync,
    /// FlashAttention-3-style kernels on TMA and `wgmma` (sm_90a: H100/H200).
    Wgmma,
}

impl KernelPath {
    /// The kernel choice of this family, the planner choosing within it.
    pub fn choice(self) -> KernelChoice {
        match self {
            KernelPath::Auto => KernelChoice::Auto,
            KernelPath::MmaSync => KernelChoice::MmaSync { config: None },
            KernelPath::Wgmma => KernelChoice::Wgmma { config: None, persistent: None },
        }
    }

    /// Name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            KernelPath::Auto => "auto",
            KernelPath::MmaSync => "mma.sync",
            KernelPath::Wgmma => "wgmma",
        }
    }
}

/// Which kernel runs: the planner's choice, or a kernel family with, for tuning, a tile
/// configuration of that family (so a Hopper configuration on the `mma.sync` path cannot be
/// asked for).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KernelChoice {
    /// The fastest kernel the target GPU has for the call: the Hopper kernels on sm_90a where
    /// they take the call (not paged, split-KV or GQA-packed decode calls, nor strides a tensor
    /// map cannot describe), else `mma.sync`.
    #[default]
    Auto,
    /// The `mma.sync` kernels.
    MmaSync {
        /// A configuration of [`flashrs_abi::tiles::CONFIGS`] to force (`None`: the planner's).
        /// Variant calls (variable-length, split, paged) take only their own table's
        /// ([`flashrs_abi::Variant::configs`]) for the call's head dimension.
        config: Option<TileConfig>,
    },
    /// The Hopper kernels (sm_90a only).
    Wgmma {
        /// A configuration of [`flashrs_abi::sm90::CONFIGS`] to force (`None`: the default for
        /// the head dimension).
        config: Option<HopperConfig>,
        /// Launch persistent (one CTA per SM claiming work tiles) or one CTA per tile (`None`:
        /// the planner's rule, see [`crate::plan`]).
        persistent: Option<bool>,
    },
}

impl KernelChoice {
    /// The kernel family asked for.
    pub fn path(&self) -> KernelPath {
        match self {
            KernelChoice::Auto => KernelPath::Auto,
            KernelChoice::MmaSync { .. } => KernelPath::MmaSync,
            KernelChoice::Wgmma { .. } => KernelPath::Wgmma,
        }
    }
}

/// Shape and options of one forward attention call, made with [`AttentionParams::builder`].
/// Nothing beyond the presence of the shape is checked until [`AttentionParams::plan`] or a
/// launch. `'a` is the lifetime of the GPU index arrays its [`Layout`] borrows (none for
/// fixed-length calls).
///
/// Zero sizes are valid. Zero `batch`, `heads_q` or `seqlen_q`: nothing to compute, the call
/// returns `Ok` without launching and no buffer is read or written. `seqlen_k == 0`: K and V
/// are never read, every output row is 0 and every log-sum-exp `-inf`, as for causal rows that
/// see no key.
///
/// Limits (checked, with typed errors, before anything runs): `seqlen_q`, `seqlen_k` and the
/// rows of a query block at most `i32::MAX / 2` (the kernels' masks are 32-bit), at most
/// `i32::MAX` CTAs, every field of the kernel parameters in its 32-bit range, and every element
/// offset and address within signed 64 bits.
///
/// The element type is not a parameter: it is the buffers' ([`crate::Buffers::dtype`], or the
/// element type of the typed entry point's buffers).
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionParams<'a> {
    /// Batch size (variable-length calls: the number of sequences).
    pub batch: usize,
    /// Query rows per sequence (variable-length calls: the longest sequence's).
    pub seqlen_q: usize,
    /// Key/value rows per sequence (variable-length and paged calls: the longest sequence's).
    pub seqlen_k: usize,
    /// Query (and output) heads.
    pub heads_q: usize,
    /// Key/value heads; `heads_q` must be a multiple (GQA/MQA).
    pub heads_kv: usize,
    /// Head dimension of Q and K: a multiple of 8, at most 256.
    pub head_dim: usize,
    /// Head dimension of V and the output when it differs from Q's and K's (DeepSeek's 192 /
    /// 128, for one): a multiple of 8, at most 256; `None`: `head_dim`. The method of the
    /// same name resolves it.
    pub head_dim_v: Option<usize>,
    /// Causal masking, aligned to the bottom-right corner.
    pub causal: bool,
    /// Scale applied to `Q K^T`; `None` means `1 / sqrt(head_dim)`. Must be positive, with
    /// `scale * log2(e)` finite.
    pub softmax_scale: Option<f32>,
    /// The default strides of the four tensors.
    pub dim_order: DimOrder,
    /// Q strides; `None`: [`AttentionParams::dim_order`]'s.
    pub q_strides: Option<Strides>,
    /// K strides; `None`: [`AttentionParams::dim_order`]'s (paged calls: contiguous pages).
    pub k_strides: Option<Strides>,
    /// V strides; `None`: [`AttentionParams::dim_order`]'s (paged calls: contiguous pages).
    pub v_strides: Option<Strides>,
    /// Output strides; `None`: [`AttentionParams::dim_order`]'s. No two output elements may
    /// share an address, and the output may not overlap the other tensors.
    pub o_strides: Option<Strides>,
    /// Which kernel runs.
    pub kernel: KernelChoice,
    /// Split-KV: CTAs each query block's key range is split across (1 to 32); `None` lets the
    /// planner choose for the target GPU (decode-shaped calls that would leave it underfilled
    /// split, see [`crate::plan`]).
    pub num_splits: Option<usize>,
    /// How the rows are stored and where K and V come from.
    pub layout: Layout<'a>,
    /// Backward pass: make every gradient bit-identical from run to run (default `false`).
    /// dK and dV always are; dQ sums every key block's part in f32 atomics, in whatever order
    /// the blocks finish unless this is set, when they take turns in key order, which costs
    /// some speed. The forward pass is always deterministic.
    pub deterministic: bool,
    /// Attention modifications: sliding window, softcap, ALiBi, sinks (see [`crate::mods`]).
    pub mods: Mods<'a>,
    /// FP8 inputs: the factors that dequantize K, V and Q (see [`crate::descale`]); none by
    /// default.
    pub descale: Descales<'a>,
}

/// Elements of each buffer of a call with contiguous tensors
/// ([`AttentionParams::contiguous_lens`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorLens {
    /// Q's elements.
    pub q: usize,
    /// K's elements.
    pub k: usize,
    /// V's elements (K's, unless V's head dimension differs).
    pub v: usize,
    /// The output's elements (Q's, unless V's head dimension differs).
    pub out: usize,
    /// The log-sum-exp's (f32) elements.
    pub lse: usize,
}

/// Builds [`AttentionParams`] with named setters ([`AttentionParams::builder`]).
///
/// Required: `batch`, `seqlen_q`, `seqlen_k`, `heads_q` and `head_dim` (or what sets them:
/// [`seqlen`](Self::seqlen) both lengths, [`varlen`](Self::varlen) the batch and lengths from
/// host offsets). Everything else has a default: `heads_kv = heads_q`, not causal, scale
/// `1 / sqrt(head_dim)`, contiguous `[batch, seqlen, heads, head_dim]` tensors, the planner's
/// kernel and split count, fixed-length rows from K/V tensors.
///
/// ```
/// use flashrs::AttentionParams;
/// let p = AttentionParams::builder().batch(2).seqlen(1024).heads_q(32).heads_kv(8).head_dim(128).causal(true).build()?;
/// assert_eq!((p.seqlen_q, p.seqlen_k, p.heads_kv), (1024, 1024, 8));
/// assert!(AttentionParams::builder().batch(2).heads_q(32).head_dim(128).build().is_err()); // no lengths
/// # Ok::<(), flashrs::Error>(())
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct AttentionParamsBuilder<'a> {
    batch: Option<usize>,
    seqlen_q: Option<usize>,
    seqlen_k: Option<usize>,
    heads_q: Option<usize>,
    heads_kv: Option<usize>,
    head_dim: Option<usize>,
    /// The options, with the shape fields unset (0).
    params: AttentionParams<'a>,
}

impl<'a> AttentionParams<'a> {
    /// Starts describing a call (see [`AttentionParamsBuilder`]).
    pub fn builder() -> AttentionParamsBuilder<'a> {
        AttentionParamsBuilder {
            batch: None,
            seqlen_q: None,
            seqlen_k: None,
            heads_q: None,
            heads_kv: None,
            head_dim: None,
            params: AttentionParams {
                batch: 0,
                seqlen_q: 0,
                seqlen_k: 0,
                heads_q: 0,
                heads_kv: 0,
                head_dim: 0,
                head_dim_v: None,
                causal: false,
                softmax_scale: None,
                dim_order: DimOrder::Bshd,
                q_strides: None,
                k_strides: None,
                v_strides: None,
                o_strides: None,
                kernel: KernelChoice::Auto,
                num_splits: None,
                layout: Layout::default(),
                deterministic: false,
                mods: Mods::default(),
                descale: Descales::default(),
            },
        }
    }

    /// A builder holding these parameters, to derive another call from them.
    pub fn to_builder(&self) -> AttentionParamsBuilder<'a> {
        let p = self.clone();
        AttentionParamsBuilder {
            batch: Some(p.batch),
            seqlen_q: Some(p.seqlen_q),
            seqlen_k: Some(p.seqlen_k),
            heads_q: Some(p.heads_q),
            heads_kv: Some(p.heads_kv),
            head_dim: Some(p.head_dim),
            params: p,
        }
    }
    /// Head dimension of V and the output: the field `head_dim_v`, else `head_dim`.
    pub fn head_dim_v(&self) -> usize {
        self.head_dim_v.unwrap_or(self.head_dim)
    }

    /// The scale actually applied.
    pub fn scale(&self) -> f32 {
        self.softmax_scale.unwrap_or(1.0 / (self.head_dim as f32).sqrt())
    }

    /// Rows of one Q (and output) and one K/V "batch" entry: the sequences', the packed totals
    /// of a variable-length call, a page of a paged cache.
    fn entry_rows(&self) -> (usize, usize) {
        let rows_q = match &self.layout.rows {
            Rows::Packed(o) => o.total_q(),
            Rows::Batched => self.seqlen_q,
        };
        let rows_k = match (&self.layout.kv, &self.layout.rows) {
            (Kv::Paged(pg), _) => pg.pages.page_size,
            (Kv::Tensors, Rows::Packed(o)) => o.total_k(),
            (Kv::Tensors, Rows::Batched) => self.seqlen_k,
        };
        (rows_q, rows_k)
    }

    /// Strides of Q, K, V and the output: the given ones, or [`AttentionParams::dim_order`]'s,
    /// computed in checked arithmetic (for packed rows `[total, heads, head_dim]`, or `[heads,
    /// total, head_dim]`). A paged call's K/V default to contiguous pages `[num_pages,
    /// page_size, heads_kv, head_dim]`.
    pub fn tensor_strides(&self) -> Result<[Strides; 4]> {
        let (dk, dv) = (self.head_dim, self.head_dim_v());
        let order = |tensor: &'static str, given: Option<Strides>, rows: usize, heads: usize, d: usize, paged: bool| {
            let default = match (self.dim_order, paged) {
                (DimOrder::Bhsd, false) => Strides::bhsd(rows, heads, d),
                _ => Strides::bshd(rows, heads, d),
            };
            given.or(default).ok_or_else(|| Error::InvalidStrides { tensor, reason: "element offsets overflow 64 bits".into() })
        };
        let paged = matches!(self.layout.kv, Kv::Paged(_));
        let (rows_q, rows_k) = self.entry_rows();
        Ok([
            order("q", self.q_strides, rows_q, self.heads_q, dk, false)?,
            order("k", self.k_strides, rows_k, self.heads_kv, dk, paged)?,
            order("v", self.v_strides, rows_k, self.heads_kv, dv, paged)?,
            order("out", self.o_strides, rows_q, self.heads_q, dv, false)?,
        ])
    }

    /// Floating-point operations of the call: `2 * batch * heads_q * seqlen_q * seqlen_k *
    /// (head_dim + head_dim_v)` (`Q K^T` and `P V`), halved under causal masking
    /// (FlashAttention's convention); with a sliding window, `2 * heads_q * (head_dim +
    /// head_dim_v)` times the (query, key) pairs it lets through, counted
    /// exactly. Variable-length calls count each sequence's own lengths where the host knows
    /// them ([`Offsets::lengths`]), else every sequence at the maxima (an upper bound).
    pub fn flops(&self) -> f64 {
        let lengths = match &self.layout.rows {
            Rows::Packed(o) => o.lengths(),
            Rows::Batched => None,
        };
        let windowed = self.mods.window != Window::default();
        let pairs = |q: usize, k: usize| if windowed { self.window_pairs(q, k) } else { q as f64 * k as f64 };
        let pairs = match lengths {
            Some(lens) => lens.iter().map(|&(q, k)| pairs(q, k)).sum::<f64>(),
            None => self.batch as f64 * pairs(self.seqlen_q, self.seqlen_k),
        };
        let f = 2.0 * self.heads_q as f64 * pairs * (self.head_dim + self.head_dim_v()) as f64;
        if self.causal && !windowed { f / 2.0 } else { f }
    }

    /// The (query, key) pairs of a sequence of `q` queries and `k` keys the sliding window (and
    /// causal masking) lets through.
    fn window_pairs(&self, q: usize, k: usize) -> f64 {
        let w = self.mods.window;
        let right = if self.causal { Some(0) } else { w.right };
        (0..q as i64)
            .map(|i| {
                let diag = i + k as i64 - q as i64;
                let lo = w.left.map_or(0, |l| diag.saturating_sub(l as i64)).clamp(0, k as i64);
                let hi = right.map_or(k as i64, |r| diag.saturating_add(r as i64).saturating_add(1)).clamp(0, k as i64);
                (hi - lo).max(0) as f64
            })
            .sum()
    }

    /// Elements each buffer must hold at least with contiguous tensors; for variable-length
    /// calls the packed totals, for paged calls whole caches. An error when a count overflows.
    pub fn contiguous_lens(&self) -> Result<TensorLens> {
        let overflow = || Error::InvalidShape { what: "sizes", reason: "element counts overflow".into() };
        let rows_q = match &self.layout.rows {
            Rows::Packed(o) => o.total_q(),
            Rows::Batched => self.batch.checked_mul(self.seqlen_q).ok_or_else(overflow)?,
        };
        let kv = |d: usize| -> Result<usize> {
            let per_row = self.heads_kv.checked_mul(d).ok_or_else(overflow)?;
            match (&self.layout.kv, &self.layout.rows) {
                (Kv::Paged(pg), _) => pg.pages.cache_len(self.heads_kv, d).ok_or_else(overflow),
                (Kv::Tensors, Rows::Packed(o)) => o.total_k().checked_mul(per_row).ok_or_else(overflow),
                (Kv::Tensors, Rows::Batched) => self.batch.checked_mul(self.seqlen_k).and_then(|r| r.checked_mul(per_row)).ok_or_else(overflow),
            }
        };
        let q_rows = |d: usize| rows_q.checked_mul(self.heads_q).and_then(|n| n.checked_mul(d)).ok_or_else(overflow);
        Ok(TensorLens {
            q: q_rows(self.head_dim)?,
            k: kv(self.head_dim)?,
            v: kv(self.head_dim_v())?,
            out: q_rows(self.head_dim_v())?,
            lse: rows_q.checked_mul(self.heads_q).ok_or_else(overflow)?,
        })
    }
}


impl<'a> AttentionParamsBuilder<'a> {
    /// The parameters; [`Error::MissingParam`] names a required field not set.
    pub fn build(self) -> Result<AttentionParams<'a>> {
        let need = |v: Option<usize>, name| v.ok_or(Error::MissingParam(name));
        let mut p = self.params;
        p.batch = need(self.batch, "batch")?;
        p.seqlen_q = need(self.seqlen_q, "seqlen_q")?;
        p.seqlen_k = need(self.seqlen_k, "seqlen_k")?;
        p.heads_q = need(self.heads_q, "heads_q")?;
        p.heads_kv = self.heads_kv.unwrap_or(p.heads_q);
        p.head_dim = need(self.head_dim, "head_dim")?;
        Ok(p)
    }

    /// Batch size (variable-length calls: the number of sequences).
    pub fn batch(mut self, batch: usize) -> Self {
        self.batch = Some(batch);
        self
    }
    /// Query rows per sequence (variable-length calls: the longest sequence's).
    pub fn seqlen_q(mut self, seqlen_q: usize) -> Self {
        self.seqlen_q = Some(seqlen_q);
        self
    }
    /// Key rows per sequence (variable-length and paged calls: the longest sequence's).
    pub fn seqlen_k(mut self, seqlen_k: usize) -> Self {
        self.seqlen_k = Some(seqlen_k);
        self
    }
    /// Sets `seqlen_q` and `seqlen_k` to `seqlen` (self-attention).
    pub fn seqlen(self, seqlen: usize) -> Self {
        self.seqlen_q(seqlen).seqlen_k(seqlen)
    }
    /// Query (and output) heads.
    pub fn heads_q(mut self, heads_q: usize) -> Self {
        self.heads_q = Some(heads_q);
        self
    }
    /// Key/value heads (grouped-query attention; default `heads_q`).
    pub fn heads_kv(mut self, heads_kv: usize) -> Self {
        self.heads_kv = Some(heads_kv);
        self
    }
    /// Head dimension.
    pub fn head_dim(mut self, head_dim: usize) -> Self {
        self.head_dim = Some(head_dim);
        self
    }
    /// Head dimension of V and the output, when it differs from Q's and K's (default
    /// `head_dim`).
    pub fn head_dim_v(mut self, head_dim_v: usize) -> Self {
        self.params.head_dim_v = Some(head_dim_v);
        self
    }
    /// Causal masking.
    pub fn causal(mut self, causal: bool) -> Self {
        self.params.causal = causal;
        self
    }
    /// The softmax scale (default `1 / sqrt(head_dim)`).
    pub fn softmax_scale(mut self, scale: f32) -> Self {
        self.params.softmax_scale = Some(scale);
        self
    }
    /// The default strides of all four tensors ([`DimOrder::Bhsd`]: PyTorch's `[batch, heads,
    /// seqlen, head_dim]`); explicit strides still win.
    pub fn dim_order(mut self, order: DimOrder) -> Self {
        self.params.dim_order = order;
        self
    }
    /// Q's strides.
    pub fn q_strides(mut self, s: Strides) -> Self {
        self.params.q_strides = Some(s);
        self
    }
    /// K's strides (a paged call: between pages, rows and heads of the cache).
    pub fn k_strides(mut self, s: Strides) -> Self {
        self.params.k_strides = Some(s);
        self
    }
    /// V's strides (a paged call: between pages, rows and heads of the cache).
    pub fn v_strides(mut self, s: Strides) -> Self {
        self.params.v_strides = Some(s);
        self
    }
    /// The output's strides.
    pub fn o_strides(mut self, s: Strides) -> Self {
        self.params.o_strides = Some(s);
        self
    }
    /// The kernel choice.
    pub fn kernel(mut self, kernel: KernelChoice) -> Self {
        self.params.kernel = kernel;
        self
    }
    /// A kernel family, the planner choosing within it.
    pub fn path(self, path: KernelPath) -> Self {
        self.kernel(path.choice())
    }
    /// Forces an `mma.sync` tile configuration (for tuning).
    pub fn config(self, config: TileConfig) -> Self {
        self.kernel(KernelChoice::MmaSync { config: Some(config) })
    }
    /// Splits each query block's keys across `num_splits` CTAs (1 to 32; default: the
    /// planner's choice for the GPU).
    pub fn num_splits(mut self, num_splits: usize) -> Self {
        self.params.num_splits = Some(num_splits);
        self
    }
    /// Backward pass: bit-identical gradients from run to run (see
    /// [`AttentionParams::deterministic`]).
    pub fn deterministic(mut self, deterministic: bool) -> Self {
        self.params.deterministic = deterministic;
        self
    }
    /// All attention modifications at once (see [`crate::mods`]).
    pub fn mods(mut self, mods: Mods<'a>) -> Self {
        self.params.mods = mods;
        self
    }
    /// A sliding window: each query row sees the `left` keys before its diagonal and the
    /// `right` keys after it (`None`: unbounded), as FlashAttention's `window_size`.
    pub fn window(mut self, left: Option<usize>, right: Option<usize>) -> Self {
        self.params.mods.window = Window { left, right };
        self
    }
    /// Softcapping: each scaled score `s` becomes `cap * tanh(s / cap)`.
    pub fn softcap(mut self, cap: f32) -> Self {
        self.params.mods.softcap = Some(cap);
        self
    }
    /// ALiBi with f32 slopes on the GPU, `[heads_q]` (or `[batch, heads_q]` with `per_batch`).
    pub fn alibi(mut self, slopes: DeviceArray<'a, f32>, per_batch: bool) -> Self {
        self.params.mods.alibi = Some(Alibi { slopes, per_batch });
        self
    }
    /// FP8 K/V caches ([`crate::E4m3`], [`crate::E5m2`]): K's and V's dequantization factors,
    /// as FlashAttention-3's `k_descale` / `v_descale` (see [`crate::descale`]).
    pub fn kv_descale(mut self, k: Descale<'a>, v: Descale<'a>) -> Self {
        self.params.descale.k = k;
        self.params.descale.v = v;
        self
    }
    /// FP8 queries ([`crate::Buffers::fp8_queries`], [`crate::QueryElement`]): Q's
    /// dequantization factor, as FlashAttention-3's `q_descale` (indexed by K/V head).
    pub fn q_descale(mut self, q: Descale<'a>) -> Self {
        self.params.descale.q = q;
        self
    }
    /// Learnable sinks: f32 logits on the GPU, `[heads_q]`, that join every row's softmax
    /// denominator.
    pub fn sinks(mut self, sinks: DeviceArray<'a, f32>) -> Self {
        self.params.mods.sinks = Some(sinks);
        self
    }
    /// Block sparsity: only the key blocks `mask` lists are computed (see [`crate::sparse`]).
    pub fn block_mask(mut self, mask: BlockMask<'a>) -> Self {
        self.params.mods.blocks = Some(mask);
        self
    }
    /// Data the caller's own modification kernels read, laid out as they define it (see
    /// [`crate::custom`]). Such a call launches through [`crate::Gpu::attention_forward_custom`]
    /// or [`crate::Gpu::launch_custom`]; the shipped kernels refuse it.
    pub fn user_data(mut self, data: DeviceArray<'a, f32>) -> Self {
        self.params.mods.user = Some(data);
        self
    }
    /// How the rows are stored.
    pub fn rows(mut self, rows: Rows<'a>) -> Self {
        self.params.layout.rows = rows;
        self
    }
    /// Reads K and V from a paged cache (`seqlen_k`: the longest sequence's key count).
    pub fn paged(mut self, paged: PagedKv<'a>) -> Self {
        self.params.layout.kv = Kv::Paged(paged);
        self
    }
    /// A variable-length batch with its offsets on the host ([`Offsets::Host`]): sets `batch`
    /// to `cu_seqlens_q.len() - 1` and `seqlen_q` / `seqlen_k` to the longest sequences (a
    /// paged call may pass no key offsets, `&[]`, and set `seqlen_k` itself).
    pub fn varlen(self, cu_seqlens_q: &[i32], cu_seqlens_k: &[i32]) -> Self {
        let longest = |c: &[i32]| c.windows(2).map(|w| (w[1] as i64 - w[0] as i64).max(0) as usize).max().unwrap_or(0);
        let offsets = Offsets::Host { cu_seqlens_q: cu_seqlens_q.to_vec(), cu_seqlens_k: cu_seqlens_k.to_vec() };
        let s = self.batch(cu_seqlens_q.len().saturating_sub(1)).seqlen_q(longest(cu_seqlens_q));
        let s = if cu_seqlens_k.is_empty() { s } else { s.seqlen_k(longest(cu_seqlens_k)) };
        s.rows(Rows::Packed(offsets))
    }
    /// A variable-length batch whose offsets are on the GPU ([`Offsets::Device`]), as
    /// `flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
    /// max_seqlen_k)` takes them; `batch`, `seqlen_q` (`max_seqlen_q`) and `seqlen_k`
    /// (`max_seqlen_k`) are still to be set.
    pub fn varlen_device(self, offsets: DeviceOffsets<'a>) -> Self {
        self.rows(Rows::Packed(Offsets::Device(offsets)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strides_and_lengths_are_checked() {
        assert_eq!(Strides::bshd(5, 3, 8), Some(Strides { batch: 120, row: 24, head: 8 }));
        assert_eq!(Strides::bhsd(5, 3, 8), Some(Strides { batch: 120, row: 8, head: 40 }));
        assert!(Strides::bshd(usize::MAX, 2, 8).is_none() && Strides::bhsd(1 << 40, 1 << 20, 256).is_none());
        assert_eq!(Strides::bshd(5, 3, 8).unwrap().extent([2, 5, 3, 8]), Some(240));
        assert_eq!(Strides { batch: -8, row: 8, head: 8 }.extent([2, 1, 1, 8]), None);
        assert_eq!(Strides { batch: i64::MAX / 2 + 1, row: 8, head: 8 }.extent([3, 1, 1, 8]), None);
        let huge = AttentionParams::builder().batch(1 << 40).seqlen(1 << 50).heads_q(1 << 10).head_dim(256).build().unwrap();
        assert!(huge.contiguous_lens().is_err());
        assert!(huge.to_builder().dim_order(DimOrder::Bhsd).build().unwrap().tensor_strides().is_err());
        assert!(matches!(huge.tensor_strides(), Err(Error::InvalidStrides { tensor: "q", .. })));
        let p = AttentionParams::builder().batch(2).seqlen_q(10).seqlen_k(20).heads_q(4).heads_kv(2).head_dim(64).build().unwrap();
        let (q, kv, lse) = (2 * 10 * 4 * 64, 2 * 20 * 2 * 64, 2 * 4 * 10);
        assert_eq!(p.contiguous_lens().unwrap(), TensorLens { q, k: kv, v: kv, out: q, lse });
        let bhsd = p.to_builder().dim_order(DimOrder::Bhsd).build().unwrap();
        assert_eq!(bhsd.tensor_strides().unwrap()[1], Strides { batch: 2 * 20 * 64, row: 64, head: 20 * 64 });
        // V (and the output) with a head dimension of their own.
        let dv = p.to_builder().head_dim(192).head_dim_v(128).build().unwrap();
        assert_eq!(dv.contiguous_lens().unwrap(), TensorLens { q: q * 3, k: kv * 3, v: kv * 2, out: q * 2, lse });
        let [qs, ks, vs, os] = dv.tensor_strides().unwrap();
        assert_eq!((qs.row, ks.row, vs.row, os.row), (4 * 192, 2 * 192, 2 * 128, 4 * 128));
        assert_eq!(dv.flops(), 2.0 * 4.0 * 2.0 * 10.0 * 20.0 * (192.0 + 128.0));
        let bhsd = dv.to_builder().dim_order(DimOrder::Bhsd).build().unwrap().tensor_strides().unwrap();
        assert_eq!((bhsd[2].head, bhsd[3].batch), (20 * 128, 4 * 10 * 128));
    }

    #[test]
    fn the_builder_names_what_is_missing() {
        let full = || AttentionParams::builder().batch(1).seqlen_q(2).seqlen_k(3).heads_q(4).head_dim(64);
        assert_eq!(full().build().unwrap().heads_kv, 4);
        assert!(matches!(AttentionParams::builder().seqlen(1).heads_q(1).head_dim(8).build(), Err(Error::MissingParam("batch"))));
        assert!(matches!(AttentionParams::builder().batch(1).seqlen_q(1).heads_q(1).head_dim(8).build(), Err(Error::MissingParam("seqlen_k"))));
        assert!(matches!(AttentionParams::builder().batch(1).seqlen(1).head_dim(8).build(), Err(Error::MissingParam("heads_q"))));
        assert!(matches!(AttentionParams::builder().batch(1).seqlen(1).heads_q(1).build(), Err(Error::MissingParam("head_dim"))));
        let v = AttentionParams::builder().varlen(&[0, 3, 10], &[0, 5, 6]).heads_q(2).head_dim(64).build().unwrap();
        assert_eq!((v.batch, v.seqlen_q, v.seqlen_k), (2, 7, 5));
    }
}
