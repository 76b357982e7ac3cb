//! What a call computes: [`AttentionParams`], its strides and its kernel choice.
//!
//! Semantics are those of FlashAttention-2's `flash_attn_func`: `out = softmax(scale * Q K^T +
//! mask) V` per (batch, head), tensors `[batch, seqlen, heads, head_dim]` with explicit strides,
//! grouped-query attention when `heads_q` is a multiple of `heads_kv`, and causal masking
//! aligned to the bottom-right corner when `seqlen_q != seqlen_k`.
use flashrs_abi::{HopperConfig, TileConfig};

use crate::element::DType;
use crate::error::{Error, Result};
use crate::layout::{DeviceOffsets, Kv, Layout, Offsets, PagedKv, Rows};

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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DimOrder {
    /// Contiguous `[batch, seqlen, heads, head_dim]` (FlashAttention's).
    #[default]
    Bshd,
    /// Contiguous `[batch, heads, seqlen, head_dim]` (PyTorch's SDPA).
    Bhsd,
}

/// Which kernel family runs, by name (the command line's `--path`).
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

/// Shape and options of one forward attention call: build with [`AttentionParams::new`] (or
/// the variable-length constructors) and the chained setters; nothing is checked until
/// [`AttentionParams::plan`] or a launch. `'a` is the lifetime of the GPU index arrays its
/// [`Layout`] borrows (none for fixed-length calls).
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
    /// Head dimension: a multiple of 8, at most 256.
    pub head_dim: usize,
    /// Causal masking, aligned to the bottom-right corner.
    pub causal: bool,
    /// Scale applied to `Q K^T`; `None` means `1 / sqrt(head_dim)`. Must be positive, with
    /// `scale * log2(e)` finite.
    pub softmax_scale: Option<f32>,
    /// Element type.
    pub dtype: DType,
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
}

impl<'a> AttentionParams<'a> {
    /// Plain multi-head attention (`heads_kv = heads_q`), f16, not causal, default scale,
    /// contiguous `[batch, seqlen, heads, head_dim]` tensors.
    pub fn new(batch: usize, seqlen_q: usize, seqlen_k: usize, heads_q: usize, head_dim: usize) -> Self {
        AttentionParams {
            batch,
            seqlen_q,
            seqlen_k,
            heads_q,
            heads_kv: heads_q,
            head_dim,
            causal: false,
            softmax_scale: None,
            dtype: DType::F16,
            dim_order: DimOrder::Bshd,
            q_strides: None,
            k_strides: None,
            v_strides: None,
            o_strides: None,
            kernel: KernelChoice::Auto,
            num_splits: None,
            layout: Layout::default(),
        }
    }

    /// A variable-length batch with its offsets on the host ([`Offsets::Host`]): `batch` is
    /// `cu_seqlens_q.len() - 1`, `seqlen_q` / `seqlen_k` the longest sequences; plain
    /// multi-head attention, f16, not causal, default scale, contiguous packed rows. Paged
    /// calls may pass no key offsets (`&[]`) and set [`AttentionParams::seqlen_k`] afterwards.
    pub fn new_varlen(cu_seqlens_q: &[i32], cu_seqlens_k: &[i32], heads_q: usize, head_dim: usize) -> Self {
        let longest = |c: &[i32]| c.windows(2).map(|w| (w[1] as i64 - w[0] as i64).max(0) as usize).max().unwrap_or(0);
        let batch = cu_seqlens_q.len().saturating_sub(1);
        let offsets = Offsets::Host { cu_seqlens_q: cu_seqlens_q.to_vec(), cu_seqlens_k: cu_seqlens_k.to_vec() };
        AttentionParams::new(batch, longest(cu_seqlens_q), longest(cu_seqlens_k), heads_q, head_dim).rows(Rows::Packed(offsets))
    }

    /// A variable-length batch whose offsets are on the GPU ([`Offsets::Device`]), as
    /// `flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
    /// max_seqlen_k)` takes them: `batch` sequences, the longest `max_seqlen_q` query and
    /// `max_seqlen_k` key rows; plain multi-head attention, f16, not causal, default scale,
    /// contiguous packed rows.
    pub fn new_varlen_device(batch: usize, max_seqlen_q: usize, max_seqlen_k: usize, offsets: DeviceOffsets<'a>, heads_q: usize, head_dim: usize) -> Self {
        AttentionParams::new(batch, max_seqlen_q, max_seqlen_k, heads_q, head_dim).rows(Rows::Packed(Offsets::Device(offsets)))
    }

    /// Sets how the rows are stored.
    pub fn rows(mut self, rows: Rows<'a>) -> Self {
        self.layout.rows = rows;
        self
    }
    /// Reads K and V from a paged cache; `seqlen_k` stays the longest sequence's key count.
    pub fn paged(mut self, paged: PagedKv<'a>) -> Self {
        self.layout.kv = Kv::Paged(paged);
        self
    }
    /// Sets the split-KV count (see [`AttentionParams::num_splits`]).
    pub fn num_splits(mut self, num_splits: Option<usize>) -> Self {
        self.num_splits = num_splits;
        self
    }
    /// Sets the number of key/value heads (grouped-query attention).
    pub fn heads_kv(mut self, heads_kv: usize) -> Self {
        self.heads_kv = heads_kv;
        self
    }
    /// Sets causal masking.
    pub fn causal(mut self, causal: bool) -> Self {
        self.causal = causal;
        self
    }
    /// Sets the softmax scale.
    pub fn softmax_scale(mut self, scale: f32) -> Self {
        self.softmax_scale = Some(scale);
        self
    }
    /// Sets the element type.
    pub fn dtype(mut self, dtype: DType) -> Self {
        self.dtype = dtype;
        self
    }
    /// Makes PyTorch's `[batch, heads, seqlen, head_dim]` the default strides of all four
    /// tensors (explicit strides still win).
    pub fn layout_bhsd(mut self) -> Self {
        self.dim_order = DimOrder::Bhsd;
        self
    }
    /// Sets explicit strides for Q, K, V and the output.
    pub fn strides(mut self, q: Strides, k: Strides, v: Strides, o: Strides) -> Self {
        (self.q_strides, self.k_strides, self.v_strides, self.o_strides) = (Some(q), Some(k), Some(v), Some(o));
        self
    }
    /// Sets the kernel choice.
    pub fn kernel(mut self, kernel: KernelChoice) -> Self {
        self.kernel = kernel;
        self
    }
    /// Asks for a kernel family, the planner choosing within it.
    pub fn path(self, path: KernelPath) -> Self {
        self.kernel(match path {
            KernelPath::Auto => KernelChoice::Auto,
            KernelPath::MmaSync => KernelChoice::MmaSync { config: None },
            KernelPath::Wgmma => KernelChoice::Wgmma { config: None, persistent: None },
        })
    }
    /// Forces an `mma.sync` tile configuration (for tuning).
    pub fn config(self, config: TileConfig) -> Self {
        self.kernel(KernelChoice::MmaSync { config: Some(config) })
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
        let d = self.head_dim;
        let order = |tensor: &'static str, given: Option<Strides>, rows: usize, heads: usize, paged: bool| {
            let default = match (self.dim_order, paged) {
                (DimOrder::Bhsd, false) => Strides::bhsd(rows, heads, d),
                _ => Strides::bshd(rows, heads, d),
            };
            given.or(default).ok_or_else(|| Error::InvalidStrides { tensor, reason: "element offsets overflow 64 bits".into() })
        };
        let paged = matches!(self.layout.kv, Kv::Paged(_));
        let (rows_q, rows_k) = self.entry_rows();
        Ok([
            order("q", self.q_strides, rows_q, self.heads_q, false)?,
            order("k", self.k_strides, rows_k, self.heads_kv, paged)?,
            order("v", self.v_strides, rows_k, self.heads_kv, paged)?,
            order("out", self.o_strides, rows_q, self.heads_q, false)?,
        ])
    }

    /// Floating-point operations of the call: `4 * batch * heads_q * seqlen_q * seqlen_k *
    /// head_dim`, halved under causal masking (FlashAttention's convention). Variable-length
    /// calls count each sequence's own lengths where the host knows them ([`Offsets::lengths`]),
    /// else every sequence at the maxima (an upper bound).
    pub fn flops(&self) -> f64 {
        let lengths = match &self.layout.rows {
            Rows::Packed(o) => o.lengths(),
            Rows::Batched => None,
        };
        let pairs = match lengths {
            Some(lens) => lens.iter().map(|&(q, k)| q as f64 * k as f64).sum::<f64>(),
            None => self.batch as f64 * self.seqlen_q as f64 * self.seqlen_k as f64,
        };
        let f = 4.0 * self.heads_q as f64 * pairs * self.head_dim as f64;
        if self.causal { f / 2.0 } else { f }
    }

    /// Elements each buffer must hold at least with contiguous tensors: (Q and the output, K
    /// and V, log-sum-exp); for variable-length calls the packed totals, for paged calls whole
    /// caches. An error when a count overflows.
    pub fn contiguous_lens(&self) -> Result<(usize, usize, usize)> {
        let overflow = || Error::InvalidShape { what: "sizes", reason: "element counts overflow".into() };
        let rows_q = match &self.layout.rows {
            Rows::Packed(o) => o.total_q(),
            Rows::Batched => self.batch.checked_mul(self.seqlen_q).ok_or_else(overflow)?,
        };
        let per_row = |heads: usize| heads.checked_mul(self.head_dim).ok_or_else(overflow);
        let kv = match (&self.layout.kv, &self.layout.rows) {
            (Kv::Paged(pg), _) => pg.pages.cache_len(self.heads_kv, self.head_dim).ok_or_else(overflow)?,
            (Kv::Tensors, Rows::Packed(o)) => o.total_k().checked_mul(per_row(self.heads_kv)?).ok_or_else(overflow)?,
            (Kv::Tensors, Rows::Batched) => self.batch.checked_mul(self.seqlen_k).and_then(|r| r.checked_mul(per_row(self.heads_kv).ok()?)).ok_or_else(overflow)?,
        };
        let q = rows_q.checked_mul(per_row(self.heads_q)?).ok_or_else(overflow)?;
        let lse = rows_q.checked_mul(self.heads_q).ok_or_else(overflow)?;
        Ok((q, kv, lse))
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
        let huge = AttentionParams::new(1 << 40, 1 << 50, 1 << 50, 1 << 10, 256);
        assert!(huge.contiguous_lens().is_err());
        assert!(huge.clone().layout_bhsd().tensor_strides().is_err());
        assert!(matches!(huge.tensor_strides(), Err(Error::InvalidStrides { tensor: "q", .. })));
        let p = AttentionParams::new(2, 10, 20, 4, 64).heads_kv(2);
        assert_eq!(p.contiguous_lens().unwrap(), (2 * 10 * 4 * 64, 2 * 20 * 2 * 64, 2 * 4 * 10));
        assert_eq!(p.clone().layout_bhsd().tensor_strides().unwrap()[1], Strides { batch: 2 * 20 * 64, row: 64, head: 20 * 64 });
    }
}
