//! Forward attention: parameters, validation into a launch plan, and the launch.
//!
//! Semantics are those of FlashAttention-2's `flash_attn_func`: `out = softmax(scale * Q K^T
//! + mask) V` per (batch, head), tensors `[batch, seqlen, heads, head_dim]` with explicit
//! strides, grouped-query attention when `heads_q` is a multiple of `heads_kv`, and causal
//! masking aligned to the bottom-right corner when `seqlen_q != seqlen_k`.
//!
//! The flow: describe the call with [`AttentionParams`]; [`AttentionParams::plan`] validates
//! it against the buffers ([`Buffers`]) and returns a [`LaunchPlan`] (kernel, geometry,
//! [`FwdParams`]) without touching the GPU; [`Gpu::attention_forward`] (cust buffers and
//! stream) and [`Gpu::attention_forward_raw`] (raw device pointers and `CUstream`, for other
//! CUDA crates) plan and launch in one call; [`Gpu::launch_forward`] launches a plan.

use std::ffi::c_void;

use cust::memory::{DeviceCopy, DeviceMemory, DeviceSlice};
use cust::prelude::Stream;

use crate::device::Gpu;
use crate::error::{Error, Result};

#[path = "../../kernels-gpu/src/fwd/params.rs"]
mod params;
#[path = "../../kernels-gpu/src/fwd/config.rs"]
pub mod config;
/// The device's grid order, compiled here too so that its tests run without a GPU.
#[cfg(test)]
#[path = "../../kernels-gpu/src/fwd/scheduler.rs"]
mod scheduler;

pub use config::TileConfig;
pub use params::FwdParams;

/// Element type of Q, K, V and the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// IEEE binary16.
    F16,
    /// bfloat16.
    Bf16,
}

impl DType {
    /// Name used in kernel entry points and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
        }
    }
}

/// A 16-bit element type the kernels take.
pub trait Element: DeviceCopy + Copy + Default + Send + Sync + 'static {
    /// Its [`DType`].
    const DTYPE: DType;
    /// Rounds an f32 to this type.
    fn from_f32(v: f32) -> Self;
    /// Widens to f32.
    fn to_f32(self) -> f32;
}

impl Element for half::f16 {
    const DTYPE: DType = DType::F16;
    fn from_f32(v: f32) -> Self {
        half::f16::from_f32(v)
    }
    fn to_f32(self) -> f32 {
        half::f16::to_f32(self)
    }
}

impl Element for half::bf16 {
    const DTYPE: DType = DType::Bf16;
    fn from_f32(v: f32) -> Self {
        half::bf16::from_f32(v)
    }
    fn to_f32(self) -> f32 {
        half::bf16::to_f32(self)
    }
}

/// Strides in elements of a `[batch, seqlen, heads, head_dim]` tensor whose last dimension is
/// contiguous.
///
/// There is no `head_dim` stride: the last dimension is always contiguous (stride 1), as in
/// FlashAttention, because the kernels move each row in 16-byte vectors. A tensor with a
/// strided last dimension must be copied to a contiguous one first. Strides must be
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
    /// Contiguous `[batch, seqlen, heads, head_dim]` (FlashAttention's layout).
    pub fn bshd(seqlen: usize, heads: usize, head_dim: usize) -> Self {
        let (s, h, d) = (seqlen as i64, heads as i64, head_dim as i64);
        Strides { batch: s * h * d, row: h * d, head: d }
    }

    /// Contiguous `[batch, heads, seqlen, head_dim]` (PyTorch SDPA's layout), viewed as
    /// `[batch, seqlen, heads, head_dim]`.
    pub fn bhsd(seqlen: usize, heads: usize, head_dim: usize) -> Self {
        let (s, h, d) = (seqlen as i64, heads as i64, head_dim as i64);
        Strides { batch: h * s * d, row: d, head: s * d }
    }

    /// Elements a buffer needs to hold a tensor of `dims` (`[batch, seqlen, heads, head_dim]`)
    /// laid out with these strides: the highest offset plus one, 0 for an empty tensor.
    /// Unchecked arithmetic: for shapes [`AttentionParams::plan`] accepts.
    pub fn extent(&self, dims: [usize; 4]) -> usize {
        if dims.contains(&0) {
            return 0;
        }
        let reach = (dims[0] - 1) as i64 * self.batch + (dims[1] - 1) as i64 * self.row + (dims[2] - 1) as i64 * self.head;
        reach as usize + dims[3]
    }
}

/// Which kernel implementation runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KernelPath {
    /// The fastest path this GPU supports.
    #[default]
    Auto,
    /// FlashAttention-2-style `mma.sync` kernels (sm_80 and newer).
    MmaSync,
    /// FlashAttention-3-style kernels on TMA and `wgmma` (sm_90a: H100/H200); see
    /// [`crate::hopper`].
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

/// Shape and options of one forward attention call. Build with [`AttentionParams::new`] and
/// the chained setters; nothing is checked until [`AttentionParams::plan`] or a launch.
///
/// Zero sizes are valid. Zero `batch`, `heads_q` or `seqlen_q`: nothing to compute, the call
/// returns `Ok` without launching and no buffer is read or written (any buffers will do).
/// `seqlen_k == 0`: K and V are never read (any, even null, buffers will do), every output
/// row is 0 and every log-sum-exp `-inf`, as for causal rows that see no key.
///
/// Limits (checked, with typed errors, before anything runs): `seqlen_q` and `seqlen_k` at
/// most `i32::MAX / 2` (the kernels' masks are 32-bit), at most `i32::MAX` CTAs
/// (`batch * heads_q * ceil(seqlen_q / block_m)`: the grid is 1-D, so `batch * heads_q` may
/// exceed 65535), and every element offset and address within signed 64 bits.
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionParams {
    /// Batch size.
    pub batch: usize,
    /// Query rows per sequence.
    pub seqlen_q: usize,
    /// Key/value rows per sequence.
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
    /// Q strides; `None` means contiguous `[batch, seqlen_q, heads_q, head_dim]`.
    pub q_strides: Option<Strides>,
    /// K strides; `None` means contiguous `[batch, seqlen_k, heads_kv, head_dim]`.
    pub k_strides: Option<Strides>,
    /// V strides; `None` means contiguous `[batch, seqlen_k, heads_kv, head_dim]`.
    pub v_strides: Option<Strides>,
    /// Output strides; `None` means contiguous `[batch, seqlen_q, heads_q, head_dim]`. No two
    /// output elements may share an address, and the output may not overlap the other tensors.
    pub o_strides: Option<Strides>,
    /// Kernel path.
    pub path: KernelPath,
    /// Tile configuration override (for tuning); `None` picks the default for `head_dim`.
    /// Variable-length calls take their own configuration ([`config::VARLEN_CONFIGS`]) and
    /// refuse any other; split-KV and paged calls take one of [`config::SPLIT_CONFIGS`] (a
    /// forced one from that list, else the first for the head dimension) and refuse others.
    pub config: Option<TileConfig>,
    /// Variable-length batch (as `flash_attn_varlen_func`); see [`Varlen`].
    pub varlen: Option<Varlen>,
    /// Split-KV: CTAs each query block's key range is split across (1 to 32). `None` lets
    /// [`Gpu::plan_forward`] (and so [`Gpu::attention_forward`] and
    /// [`Gpu::attention_forward_raw`]) choose from this GPU's SM count (see
    /// [`auto_num_splits`]); [`AttentionParams::plan`], which does not know the GPU, then never
    /// splits. `Some(n)` with `n > 1` forces `n` splits (fewer when there are fewer K/V tiles),
    /// on the mma.sync path.
    pub num_splits: Option<usize>,
    /// Paged K/V cache (as `flash_attn_with_kvcache` with a block table); see [`PagedKv`].
    pub paged: Option<PagedKv>,
}

/// The shape of a paged K/V cache, as serving engines keep it (vLLM, FlashAttention-2's
/// `flash_attn_with_kvcache(block_table=...)`): K and V each `[num_pages, page_size, heads_kv,
/// head_dim]`, and sequence `b`'s key row `r` in page `block_table[b][r / page_size]` at row `r %
/// page_size`. Q and the output stay `[batch, seqlen_q, heads_q, head_dim]`.
///
/// In a paged call [`AttentionParams::seqlen_k`] is the longest sequence's key count (at most
/// `pages_per_seq * page_size`), the K/V strides' `batch` fields are the strides between pages
/// (`None`: contiguous pages), and the device buffers come in [`PagedBuffers`]: the i32 block
/// table `[batch, pages_per_seq]` and, optionally, each sequence's own key count (`seqused_k`,
/// FlashAttention's `cache_seqlens`; without it every sequence has `seqlen_k` keys). Causal
/// masking aligns to each sequence's own bottom-right corner.
///
/// Table entries and key counts live on the GPU, so the planner cannot read them; the kernel
/// clamps them instead (page indices to `0..num_pages`, counts to `0..=seqlen_k`), so no
/// content can make it read outside the caches or the table: a wrong entry gives wrong
/// numbers, never a fault. Paged calls run on the mma.sync path, split-KV included (chosen as
/// for unpaged decode), and not with [`AttentionParams::varlen`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PagedKv {
    /// Rows (tokens) per page: a power of two, at least 16.
    pub page_size: usize,
    /// Pages in each of the K and V caches.
    pub num_pages: usize,
    /// Entries per block-table row: the most pages one sequence may hold.
    pub pages_per_seq: usize,
}

impl PagedKv {
    /// Caches sized for `batch` sequences of up to `seqlen_k` keys each: `ceil(seqlen_k /
    /// page_size)` pages per sequence (at least one), `batch` times that many pages.
    pub fn for_batch(batch: usize, seqlen_k: usize, page_size: usize) -> Self {
        let pages_per_seq = seqlen_k.div_ceil(page_size.max(1)).max(1);
        PagedKv { page_size, num_pages: batch * pages_per_seq, pages_per_seq }
    }
}

/// The sequence offsets of a variable-length batch, as `flash_attn_varlen_func` takes them:
/// Q (and the output) are packed `[total_q, heads_q, head_dim]`, K and V `[total_k, heads_kv,
/// head_dim]`, sequence `b` owning query rows `cu_seqlens_q[b]..cu_seqlens_q[b + 1]` and key
/// rows `cu_seqlens_k[b]..cu_seqlens_k[b + 1]`.
///
/// In a variable-length call [`AttentionParams::batch`] is the number of sequences,
/// [`AttentionParams::seqlen_q`] / [`AttentionParams::seqlen_k`] are `max_seqlen_q` /
/// `max_seqlen_k` (the grid covers `batch * heads_q * ceil(max_seqlen_q / block_m)` CTAs, those
/// past their sequence exit at once), the strides' `batch` fields are ignored (only `row` and
/// `head` are used; `None` means contiguous packed rows), causal masking is aligned to each
/// sequence's own bottom-right corner, and the log-sum-exp is f32 `[heads_q, total_q]`
/// (FlashAttention-2's varlen layout). Variable-length calls run on the Hopper kernels where
/// the path allows (see [`crate::hopper`]), else on mma.sync. Decode-shaped ones (at most 16
/// query rows per sequence) split their key ranges across CTAs where the grid would leave the
/// GPU underfilled, as fixed-length decode does ([`auto_num_splits`]; on mma.sync, without
/// packing a GQA group's heads into one query block), and paged ones run on mma.sync.
///
/// The offsets come one of two ways:
///
/// * [`Varlen::Host`] (built by [`AttentionParams::new_varlen`]): the planner validates them
///   (`batch + 1` entries each, starting at 0, non-decreasing, no sequence longer than the
///   maxima, the totals within the buffers), and each launch uploads exactly these offsets
///   itself (a small kernel carries them in its launch parameters into the stream's
///   workspace, so the launch neither waits for the stream nor breaks a graph capture).
/// * [`Varlen::Device`] (built by [`AttentionParams::new_varlen_device`]): the offsets are
///   already on the GPU, in [`Buffers::varlen`] (as serving engines keep them, computed on the
///   GPU or uploaded once for many layers), and no upload happens. The planner cannot read
///   them, so the kernels clamp instead: each sequence to the packed rows (`start <= end <=
///   total`) and to the maxima. Offsets that are wrong give wrong rows (or rows left
///   unwritten: query rows past `max_seqlen_q` are not computed), never an access outside the
///   buffers.
///
/// With a paged K/V cache ([`AttentionParams::paged`]) only the query rows are packed: K and V
/// come from each sequence's block-table row, and a sequence's key count is its `seqused_k`
/// entry when [`PagedBuffers::seqused_k`] is given, else `cu_seqlens_k[b + 1] -
/// cu_seqlens_k[b]` when key offsets are given (their starts are not used), else
/// [`AttentionParams::seqlen_k`]. Paged calls may leave the key offsets out: an empty
/// `cu_seqlens_k` ([`Varlen::Host`]) or [`VarlenBuffers::cu_seqlens_k`] `None`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Varlen {
    /// Offsets on the host, validated by the planner and uploaded by each launch.
    Host {
        /// `batch + 1` query row offsets: `0, len_0, len_0 + len_1, ..., total_q`.
        cu_seqlens_q: Vec<i32>,
        /// `batch + 1` key/value row offsets: `0, ..., total_k` (paged calls: empty, or the
        /// sequences' key counts as differences).
        cu_seqlens_k: Vec<i32>,
    },
    /// Offsets on the GPU, in [`Buffers::varlen`]; the kernels clamp them.
    Device {
        /// Packed query rows: the row count of Q, the output and the log-sum-exp
        /// (FlashAttention's `q.shape[0]`).
        total_q: usize,
        /// Packed key/value rows (`k.shape[0]`); ignored by paged calls.
        total_k: usize,
    },
}

impl Varlen {
    /// Total packed query rows (host offsets: the last one; 0 when there are none).
    pub fn total_q(&self) -> usize {
        match self {
            Varlen::Host { cu_seqlens_q, .. } => cu_seqlens_q.last().map_or(0, |&x| x.max(0) as usize),
            Varlen::Device { total_q, .. } => *total_q,
        }
    }
    /// Total packed key/value rows.
    pub fn total_k(&self) -> usize {
        match self {
            Varlen::Host { cu_seqlens_k, .. } => cu_seqlens_k.last().map_or(0, |&x| x.max(0) as usize),
            Varlen::Device { total_k, .. } => *total_k,
        }
    }
    /// Each sequence's (query rows, key rows) where the host knows them: host offsets with key
    /// offsets; `None` for device offsets.
    pub fn lengths(&self) -> Option<Vec<(usize, usize)>> {
        let Varlen::Host { cu_seqlens_q, cu_seqlens_k } = self else { return None };
        let d = |c: &[i32]| c.windows(2).map(|w| (w[1] as i64 - w[0] as i64).max(0) as usize).collect::<Vec<_>>();
        (cu_seqlens_k.len() == cu_seqlens_q.len()).then(|| d(cu_seqlens_q).into_iter().zip(d(cu_seqlens_k)).collect())
    }
}

/// The device buffers of a variable-length call whose offsets are on the GPU
/// ([`Varlen::Device`]), capacities in i32 elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VarlenBuffers {
    /// i32 `[batch + 1]` query row offsets.
    pub cu_seqlens_q: BufferRef,
    /// i32 `[batch + 1]` key row offsets; `None` only in paged calls (see [`Varlen`]).
    pub cu_seqlens_k: Option<BufferRef>,
}

impl AttentionParams {
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
            q_strides: None,
            k_strides: None,
            v_strides: None,
            o_strides: None,
            path: KernelPath::Auto,
            config: None,
            varlen: None,
            num_splits: None,
            paged: None,
        }
    }

    /// A variable-length batch (see [`Varlen`]): `batch` is `cu_seqlens_q.len() - 1`,
    /// `seqlen_q` / `seqlen_k` the longest sequences; plain multi-head attention, f16, not
    /// causal, default scale, contiguous packed rows.
    ///
    /// Paged calls may pass no key offsets (`&[]`): set [`AttentionParams::seqlen_k`] (the
    /// longest sequence's keys) afterwards, as it cannot be derived then.
    pub fn new_varlen(cu_seqlens_q: &[i32], cu_seqlens_k: &[i32], heads_q: usize, head_dim: usize) -> Self {
        let longest = |c: &[i32]| c.windows(2).map(|w| (w[1] as i64 - w[0] as i64).max(0) as usize).max().unwrap_or(0);
        let mut p = AttentionParams::new(cu_seqlens_q.len().saturating_sub(1), longest(cu_seqlens_q), longest(cu_seqlens_k), heads_q, head_dim);
        p.varlen = Some(Varlen::Host { cu_seqlens_q: cu_seqlens_q.to_vec(), cu_seqlens_k: cu_seqlens_k.to_vec() });
        p
    }

    /// A variable-length batch whose offsets are already on the GPU ([`Varlen::Device`], as
    /// `flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
    /// max_seqlen_k)` takes them): `batch` sequences, the longest `max_seqlen_q` query and
    /// `max_seqlen_k` key rows, packed into `total_q` query and `total_k` key rows. The offsets'
    /// device buffers go in [`Buffers::varlen`]. Plain multi-head attention, f16, not causal,
    /// default scale, contiguous packed rows.
    pub fn new_varlen_device(
        batch: usize,
        max_seqlen_q: usize,
        max_seqlen_k: usize,
        total_q: usize,
        total_k: usize,
        heads_q: usize,
        head_dim: usize,
    ) -> Self {
        let mut p = AttentionParams::new(batch, max_seqlen_q, max_seqlen_k, heads_q, head_dim);
        p.varlen = Some(Varlen::Device { total_q, total_k });
        p
    }

    /// Sets the split-KV count (see [`AttentionParams::num_splits`]).
    pub fn num_splits(mut self, num_splits: Option<usize>) -> Self {
        self.num_splits = num_splits;
        self
    }

    /// Reads K and V from a paged cache (see [`PagedKv`]); `seqlen_k` stays the longest
    /// sequence's key count.
    pub fn paged(mut self, paged: PagedKv) -> Self {
        self.paged = Some(paged);
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
    /// Sets the strides of all four tensors to PyTorch's `[batch, heads, seqlen, head_dim]`.
    pub fn layout_bhsd(mut self) -> Self {
        self.q_strides = Some(Strides::bhsd(self.seqlen_q, self.heads_q, self.head_dim));
        self.k_strides = Some(Strides::bhsd(self.seqlen_k, self.heads_kv, self.head_dim));
        self.v_strides = Some(Strides::bhsd(self.seqlen_k, self.heads_kv, self.head_dim));
        self.o_strides = Some(Strides::bhsd(self.seqlen_q, self.heads_q, self.head_dim));
        self
    }
    /// Sets explicit strides for Q, K, V and the output.
    pub fn strides(mut self, q: Strides, k: Strides, v: Strides, o: Strides) -> Self {
        (self.q_strides, self.k_strides, self.v_strides, self.o_strides) = (Some(q), Some(k), Some(v), Some(o));
        self
    }
    /// Forces a kernel path.
    pub fn path(mut self, path: KernelPath) -> Self {
        self.path = path;
        self
    }
    /// Forces a tile configuration (one of [`config::CONFIGS`]).
    pub fn config(mut self, config: TileConfig) -> Self {
        self.config = Some(config);
        self
    }

    /// Strides of Q, K, V and the output: the given ones, or the contiguous `[batch, seqlen,
    /// heads, head_dim]` defaults. Unchecked arithmetic: for shapes [`AttentionParams::plan`]
    /// accepts (the planner resolves them with overflow checks).
    pub fn tensor_strides(&self) -> [Strides; 4] {
        let d = self.head_dim;
        [
            self.q_strides.unwrap_or_else(|| Strides::bshd(self.seqlen_q, self.heads_q, d)),
            self.k_strides.unwrap_or_else(|| Strides::bshd(self.kv_rows(), self.heads_kv, d)),
            self.v_strides.unwrap_or_else(|| Strides::bshd(self.kv_rows(), self.heads_kv, d)),
            self.o_strides.unwrap_or_else(|| Strides::bshd(self.seqlen_q, self.heads_q, d)),
        ]
    }

    /// Rows of one K/V "batch" entry: a page of a paged cache, else `seqlen_k`.
    fn kv_rows(&self) -> usize {
        self.paged.map_or(self.seqlen_k, |pg| pg.page_size)
    }

    /// The scale actually applied.
    pub fn scale(&self) -> f32 {
        self.softmax_scale.unwrap_or(1.0 / (self.head_dim as f32).sqrt())
    }

    /// Floating-point operations of the call: `4 * batch * heads_q * seqlen_q * seqlen_k *
    /// head_dim`, halved under causal masking (FlashAttention's convention).
    /// Variable-length calls count each sequence's own lengths where the host knows them
    /// ([`Varlen::lengths`]), else every sequence at the maxima (an upper bound).
    pub fn flops(&self) -> f64 {
        let pairs = match self.varlen.as_ref().and_then(Varlen::lengths) {
            Some(lens) => lens.iter().map(|&(q, k)| q as f64 * k as f64).sum::<f64>(),
            None => self.batch as f64 * self.seqlen_q as f64 * self.seqlen_k as f64,
        };
        let f = 4.0 * self.heads_q as f64 * pairs * self.head_dim as f64;
        if self.causal { f / 2.0 } else { f }
    }

    /// Elements each tensor's buffer must hold at least, for contiguous layouts:
    /// (q and out, k and v, lse); for variable-length calls the packed totals, for paged calls
    /// whole caches.
    pub fn contiguous_lens(&self) -> (usize, usize, usize) {
        if let Some(pg) = &self.paged {
            let rows_q = self.varlen.as_ref().map_or(self.batch * self.seqlen_q, Varlen::total_q);
            return (rows_q * self.heads_q * self.head_dim, pg.num_pages * pg.page_size * self.heads_kv * self.head_dim, self.heads_q * rows_q);
        }
        if let Some(v) = &self.varlen {
            let (tq, tk) = (v.total_q(), v.total_k());
            return (tq * self.heads_q * self.head_dim, tk * self.heads_kv * self.head_dim, self.heads_q * tq);
        }
        (
            self.batch * self.seqlen_q * self.heads_q * self.head_dim,
            self.batch * self.seqlen_k * self.heads_kv * self.head_dim,
            self.batch * self.heads_q * self.seqlen_q,
        )
    }

    /// Validates the shape and the buffers (given as device addresses and lengths in elements)
    /// and returns what a launch needs. Pure host code: it never touches the GPU. Without a GPU
    /// to size it for, it splits the key range only when [`AttentionParams::num_splits`] asks
    /// to; [`Gpu::plan_forward`] also chooses automatically.
    pub fn plan(&self, bufs: &Buffers) -> Result<LaunchPlan> {
        plan(self, bufs, None)
    }

    /// [`AttentionParams::plan`] for a GPU of `sm_count` SMs: with `num_splits: None`, a
    /// decode-shaped call is split automatically ([`auto_num_splits`]).
    pub fn plan_for_sms(&self, bufs: &Buffers, sm_count: u32) -> Result<LaunchPlan> {
        plan(self, bufs, Some(&estimated_slots(sm_count)))
    }
}

/// A buffer as the planner sees it: device address and capacity in elements.
///
/// The capacity counts elements of the tensor's own type: [`AttentionParams::dtype`] (2 bytes)
/// for Q, K, V and the output, `f32` for the log-sum-exp. The planner checks every element the
/// kernel will touch against it, so it must be the allocation's true size (from `ptr` on),
/// never more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferRef {
    /// Device address.
    pub ptr: u64,
    /// Capacity in elements.
    pub len: usize,
}

impl BufferRef {
    /// A cust slice's address and length (its true capacity).
    pub(crate) fn of<T: DeviceCopy>(s: &DeviceSlice<T>) -> Self {
        BufferRef { ptr: s.as_raw_ptr(), len: s.len() }
    }
}

/// The buffers of one call, as device addresses and capacities.
///
/// Built by [`Gpu::attention_forward`] from cust slices, or by the caller for
/// [`Gpu::attention_forward_raw`] and [`AttentionParams::plan`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buffers {
    /// Queries.
    pub q: BufferRef,
    /// Keys.
    pub k: BufferRef,
    /// Values.
    pub v: BufferRef,
    /// Output.
    pub o: BufferRef,
    /// Log-sum-exp output (f32 `[batch, heads_q, seqlen_q]`), if wanted.
    pub lse: Option<BufferRef>,
    /// Paged calls ([`AttentionParams::paged`]): the block table and key counts.
    pub paged: Option<PagedBuffers>,
    /// Variable-length calls with offsets on the GPU ([`Varlen::Device`]): the offsets.
    pub varlen: Option<VarlenBuffers>,
}

/// The device buffers of a paged call (see [`PagedKv`]), capacities in i32 elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PagedBuffers {
    /// i32 `[batch, pages_per_seq]`: sequence `b`'s `i`-th page.
    pub block_table: BufferRef,
    /// i32 `[batch]`: each sequence's key count (clamped to `seqlen_k`); `None` gives every
    /// sequence `seqlen_k` keys.
    pub seqused_k: Option<BufferRef>,
}

/// The K/V side of a paged call on cust slices ([`Gpu::attention_forward_paged`]).
#[derive(Clone, Copy, Debug)]
pub struct PagedCache<'a, T: DeviceCopy> {
    /// K cache, `[num_pages, page_size, heads_kv, head_dim]` (strides from the params).
    pub k: &'a DeviceSlice<T>,
    /// V cache, laid out like K.
    pub v: &'a DeviceSlice<T>,
    /// i32 `[batch, pages_per_seq]` block table.
    pub block_table: &'a DeviceSlice<i32>,
    /// i32 `[batch]` key counts, or `None` for `seqlen_k` keys in every sequence.
    pub seqused_k: Option<&'a DeviceSlice<i32>>,
}

impl<T: DeviceCopy> PagedCache<'_, T> {
    /// The block table and key counts as the planner takes them.
    fn buffers(&self) -> PagedBuffers {
        PagedBuffers { block_table: BufferRef::of(self.block_table), seqused_k: self.seqused_k.map(BufferRef::of) }
    }
}

/// The K/V side of [`Gpu::attention_forward_varlen`].
#[derive(Clone, Copy, Debug)]
pub enum KvSlices<'a, T: DeviceCopy> {
    /// Packed K and V, `[total_k, heads_kv, head_dim]` (strides from the params).
    Tensors {
        /// Keys.
        k: &'a DeviceSlice<T>,
        /// Values.
        v: &'a DeviceSlice<T>,
    },
    /// A paged cache (see [`PagedKv`]).
    Paged(PagedCache<'a, T>),
}

/// The offsets of [`Gpu::attention_forward_varlen`], on the GPU.
#[derive(Clone, Copy, Debug)]
pub struct VarlenOffsets<'a> {
    /// i32 `[batch + 1]` query row offsets.
    pub cu_seqlens_q: &'a DeviceSlice<i32>,
    /// i32 `[batch + 1]` key row offsets; `None` only in paged calls (see [`Varlen`]).
    pub cu_seqlens_k: Option<&'a DeviceSlice<i32>>,
}

/// A validated launch: kernel, geometry and parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchPlan {
    /// Kernel entry point.
    pub kernel: String,
    /// Tile configuration.
    pub config: TileConfig,
    /// CTAs (1-D grid).
    pub grid: u32,
    /// Threads per CTA.
    pub block: u32,
    /// Dynamic shared memory per CTA, bytes.
    pub smem: u32,
    /// The kernel parameters.
    pub params: FwdParams,
    /// The Hopper launch, where the call can take the wgmma path: the plan itself for
    /// [`KernelPath::Wgmma`], an alternative sm_90a GPUs run for [`KernelPath::Auto`] (see
    /// [`crate::hopper`]).
    pub wgmma: Option<crate::hopper::WgmmaPlan>,
    /// Variable-length calls with offsets on the host ([`Varlen::Host`]): the validated
    /// offsets (`cu_seqlens_q`, then `cu_seqlens_k` unless a paged call left them out, `batch +
    /// 1` each) that [`Gpu::launch_forward`] uploads and points the kernel at. `None` for
    /// device offsets, which [`LaunchPlan::params`] already points at.
    pub varlen_offsets: Option<Vec<i32>>,
    /// Split-KV calls: the workspace.
    pub split: Option<SplitPlan>,
}

/// The split-KV part of a plan: [`LaunchPlan::kernel`] writes `num_splits` f32 partial
/// outputs and log-sum-exps into a workspace, and the last split of each query block to finish
/// merges them into the output and log-sum-exp, counting arrivals in the workspace's zeroed
/// counters. [`Gpu::launch_forward`] takes the workspace its stream keeps
/// ([`crate::workspace`]), or where it keeps none allocates one per launch (stream-ordered,
/// from the library's own memory pool, freed with `cuMemFreeAsync` after the kernel).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitPlan {
    /// CTAs per query block.
    pub num_splits: u32,
    /// u32 arrival counters: one per query block (`grid / num_splits`).
    pub counters_len: usize,
    /// f32 elements of the partial outputs (`num_splits * batch * heads_q * seqlen_q * D`).
    pub o_accum_len: usize,
    /// f32 elements of the partial log-sum-exps (`num_splits * batch * heads_q * seqlen_q`).
    pub lse_accum_len: usize,
}

/// Device addresses of a launch's workspace ([`Gpu::with_workspace`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct WorkspaceAddrs {
    /// Where a host-offset plan's offsets were uploaded ([`LaunchPlan::varlen_offsets`]); see
    /// [`point_at_offsets`].
    pub offsets: Option<u64>,
    /// The u32 counters (zero at launch).
    pub counters: u64,
    /// The scratch bytes after them.
    pub partials: u64,
}

/// Points `params` at a host-offset plan's `count` offsets uploaded to `base`: the query
/// offsets, then the key offsets where the plan has them (`count` covers both).
pub(crate) fn point_at_offsets(params: &mut FwdParams, base: u64, count: usize) {
    let per_array = params.batch as u64 + 1;
    params.cu_seqlens_q = base;
    params.cu_seqlens_k = if count as u64 > per_array { base + 4 * per_array } else { 0 };
}

/// The split-KV count [`Gpu::plan_forward`] picks when [`AttentionParams::num_splits`] is
/// `None`, for a GPU with `sm_count` SMs: 1 (no split) unless the call is decode-shaped
/// (`seqlen_q <= 16`, for variable-length calls the longest sequence's; no configuration
/// override outside
/// [`config::SPLIT_CONFIGS`], not forced onto the wgmma path) and its `batch * heads_q *
/// m_blocks` CTAs (`m_blocks` of the split configuration) fill fewer than four waves of the
/// GPU's CTA slots (SMs times the split kernel's CTAs per SM). Then it picks the fewest splits
/// whose CTAs fill their waves to 95% (else the fewest within 0.5% of the best fill), keeping
/// at least two K/V tiles per split and at most 32 splits: a partly filled last wave costs as
/// much time as a full one (measured on the H200 at batch 8, 8 KV heads, 8k-128k keys: 4
/// splits, one wave of 256 CTAs, 3.6-4.6 TB/s; 9 splits, 2.2 waves, 2.9-3.9 TB/s).
/// [`Gpu::plan_forward`] counts the slots with the driver's occupancy calculator; this
/// function, without a GPU, estimates them from shared memory and threads.
///
/// CTAs are counted as the GPU plan launches them: with one query row and GQA, the query heads
/// of a K/V group share one query block ([`packs_gqa`]).
pub fn auto_num_splits(p: &AttentionParams, sm_count: u32) -> usize {
    auto_splits(p, &estimated_slots(sm_count))
}

/// CTA slots of `sm_count` SMs estimated without the GPU ([`resident_ctas`]).
fn estimated_slots(sm_count: u32) -> impl Fn(&TileConfig) -> usize {
    move |c| sm_count.max(1) as usize * resident_ctas(c)
}

/// What a GPU plan knows of its GPU: the CTA slots (SMs times CTAs per SM) of the split-KV
/// kernel of a configuration.
type Slots<'a> = &'a dyn Fn(&TileConfig) -> usize;

/// [`auto_num_splits`] with the GPU's CTA slots per configuration.
fn auto_splits(p: &AttentionParams, slots_for: Slots) -> usize {
    let plain_config = p.config.is_some_and(|c| !config::SPLIT_CONFIGS.contains(&c));
    if plain_config || p.path == KernelPath::Wgmma || p.seqlen_q == 0 || p.seqlen_q > 16 {
        return 1;
    }
    let Some(c) = split_config_for(p, decode_rows(p)) else { return 1 };
    let (heads, rows) = if packs_gqa(p) { (p.heads_kv, p.heads_q / p.heads_kv) } else { (p.heads_q, p.seqlen_q) };
    let ctas = p.batch.saturating_mul(heads).saturating_mul(rows.div_ceil(c.block_m));
    let slots = slots_for(&c).max(1);
    if ctas == 0 || ctas >= 4 * slots {
        return 1;
    }
    let most = (p.seqlen_k.div_ceil(c.block_n) / 2).clamp(1, MAX_SPLITS);
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

/// CTAs of configuration `c` one SM holds, estimated without the GPU (its occupancy calculator
/// knows the registers; see [`Gpu::resident_ctas`]): shared memory allows `228 KB / (smem + 1
/// KB)`, and registers (most kernels use more than 128 per thread) at most 65536 / (threads *
/// 256).
fn resident_ctas(c: &TileConfig) -> usize {
    const SMEM_PER_SM: usize = 228 * 1024;
    let by_smem = SMEM_PER_SM / (c.smem_bytes() + 1024);
    let by_regs = 65536 / (c.threads() * 256);
    by_smem.min(by_regs).max(1)
}

/// True when [`Gpu::plan_forward`] packs the query heads of each K/V group into the rows of
/// one query block (as FlashAttention does for decode): one query row per sequence
/// (`seqlen_q == 1`), GQA/MQA (`heads_q > heads_kv`), not variable-length, not forced onto the
/// wgmma path. The packed plan runs on the mma.sync path; [`AttentionParams::plan`] never
/// packs (its plan is the literal call).
pub fn packs_gqa(p: &AttentionParams) -> bool {
    p.seqlen_q == 1 && p.heads_kv > 0 && p.heads_q > p.heads_kv && p.varlen.is_none() && p.path != KernelPath::Wgmma
}

/// Rows per (batch, head) the GPU plan's kernel sees: `heads_q / heads_kv` when
/// [`packs_gqa`], else `seqlen_q`.
fn decode_rows(p: &AttentionParams) -> usize {
    if packs_gqa(p) { p.heads_q / p.heads_kv } else { p.seqlen_q }
}

pub use config::MAX_SPLITS;

/// CTAs of one interleaved group of a causal grid ([`interleave`]): about two waves of a
/// one-CTA-per-SM Hopper kernel on an H100's 132 SMs.
const GROUP_CTAS: usize = 256;

/// [`FwdParams::interleave`] for a grid of `pairs` (batch, head) pairs of `m_blocks` query
/// blocks: 1 unless `causal`, else the pairs whose blocks make about [`GROUP_CTAS`] CTAs.
/// Heaviest-first within a head alone ends a causal launch on a mix of heavy and light blocks
/// of its last heads; groups of heads end it on light blocks only, and spread the CTAs running
/// together over more heads. Measured on the H200 (wgmma path, causal, seqlen 2k/4k/8k, groups
/// of 1, 4, 16, 64 and 512 pairs): head_dim 64 was fastest with 16 (3-4% over 1), head_dim
/// 128 and 256 with 16 at 2k and 4 at 4k/8k (up to 8% over 1); 64 and more lost again.
pub(crate) fn interleave(causal: bool, pairs: usize, m_blocks: usize) -> u32 {
    if !causal || m_blocks == 0 {
        return 1;
    }
    ((GROUP_CTAS + m_blocks / 2) / m_blocks).clamp(1, pairs.max(1)) as u32
}

/// The default split-KV (and paged) configuration for `head_dim` and query blocks of `rows`
/// rows: of [`config::SPLIT_CONFIGS`] for the padded head dimension, the smallest block that
/// holds every row (fewest padding rows in the MMAs), else the largest; the first listed among
/// equals.
fn split_config(head_dim: usize, rows: usize) -> Option<TileConfig> {
    let padded = config::padded_head_dim(head_dim)?;
    let mut fits: Vec<&TileConfig> = config::SPLIT_CONFIGS.iter().filter(|c| c.head_dim == padded).collect();
    // Blocks that hold every row first, smallest first; then the others, largest first.
    // Stable: equal blocks keep their listed order.
    fits.sort_by_key(|c| if c.block_m >= rows { c.block_m } else { usize::MAX - c.block_m });
    fits.first().map(|&&c| c)
}

/// The split-KV (and paged) configuration of a call with `rows` rows per query block: the
/// forced one when it is one of [`config::SPLIT_CONFIGS`] for the call's padded head dimension,
/// else the default.
fn split_config_for(p: &AttentionParams, rows: usize) -> Option<TileConfig> {
    let padded = config::padded_head_dim(p.head_dim)?;
    match p.config {
        Some(c) if c.head_dim == padded && config::SPLIT_CONFIGS.contains(&c) => Some(c),
        _ => split_config(p.head_dim, rows),
    }
}

fn varlen_config(head_dim: usize) -> Option<TileConfig> {
    config::HEAD_DIMS.iter().position(|&d| head_dim <= d).map(|i| config::VARLEN_CONFIGS[i])
}

/// Entry-point name of a variable-length (`flash_fwd_varlen_...`), split-KV
/// (`flash_fwd_split_...`), paged (`flash_fwd_paged_...`), split variable-length
/// (`flash_fwd_varlen_split_...`) or paged variable-length (`flash_fwd_varlen_paged_...`)
/// kernel: `variant` is `"varlen"`, `"split"`, `"paged"`, `"varlen_split"` or `"varlen_paged"`.
pub fn variant_kernel_name(variant: &str, dtype: DType, config: &TileConfig) -> String {
    kernel_name(dtype, config).replacen("flash_fwd_", &format!("flash_fwd_{variant}_"), 1)
}

/// Names of every variable-length, split-KV, paged, split variable-length and paged
/// variable-length kernel (both dtypes), all in both PTX modules.
pub fn variant_kernel_names() -> Vec<String> {
    let mut v = Vec::new();
    for dtype in [DType::F16, DType::Bf16] {
        v.extend(config::VARLEN_CONFIGS.iter().map(|c| variant_kernel_name("varlen", dtype, c)));
        v.extend(config::SPLIT_CONFIGS.iter().map(|c| variant_kernel_name("split", dtype, c)));
        v.extend(config::SPLIT_CONFIGS.iter().map(|c| variant_kernel_name("paged", dtype, c)));
        v.extend(config::SPLIT_CONFIGS.iter().map(|c| variant_kernel_name("varlen_split", dtype, c)));
        v.extend(config::SPLIT_CONFIGS.iter().map(|c| variant_kernel_name("varlen_paged", dtype, c)));
    }
    v
}

impl LaunchPlan {
    /// True when the call has nothing to compute (zero batch, heads or query rows, or a
    /// variable-length call with no packed query rows).
    pub fn is_empty(&self) -> bool {
        self.grid == 0
    }
}

/// Entry-point name of the forward kernel for `dtype` and `config`:
/// `flash_fwd_<dtype>_d<D>_<BM>x<BN>w<warps>s<stages>`.
///
/// ```
/// use flashrs::attention::{config, kernel_name};
/// let c = config::default_config(128).unwrap();
/// assert!(kernel_name(flashrs::DType::F16, &c).starts_with("flash_fwd_f16_d128_"));
/// ```
pub fn kernel_name(dtype: DType, config: &TileConfig) -> String {
    format!(
        "flash_fwd_{}_d{}_{}x{}w{}s{}",
        dtype.name(),
        config.head_dim,
        config.block_m,
        config.block_n,
        config.warps,
        config.stages
    )
}

/// Names of every forward (mma.sync) kernel: each of [`config::CONFIGS`] for f16, then for
/// bf16. Both [`PTX_SM80`](crate::ptx::PTX_SM80) and [`PTX_SM90A`](crate::ptx::PTX_SM90A)
/// hold all of them; see [`crate::ptx`] for their ABI.
pub fn forward_kernel_names() -> Vec<String> {
    [DType::F16, DType::Bf16]
        .into_iter()
        .flat_map(|dtype| config::CONFIGS.iter().map(move |c| kernel_name(dtype, c)))
        .collect()
}

fn shape_err(what: &'static str, reason: impl Into<String>) -> Error {
    Error::InvalidShape { what, reason: reason.into() }
}

/// Checks one tensor's address, strides, alignment and extent; returns its strides and the end
/// (exclusive) of the bytes it spans.
fn check_tensor(
    tensor: &'static str,
    buf: BufferRef,
    strides: Strides,
    dims: [usize; 4],
    elem_bytes: u64,
) -> Result<([i64; 3], u64)> {
    let s = [strides.batch, strides.row, strides.head];
    if buf.ptr == 0 {
        return Err(Error::InvalidBuffer { tensor, reason: "null address".into() });
    }
    if s.iter().any(|&x| x < 0) {
        return Err(Error::InvalidStrides { tensor, reason: format!("negative stride in {s:?}") });
    }
    // The kernels move 16-byte chunks: 8 elements of every row must be one aligned vector.
    if buf.ptr % 16 != 0 {
        return Err(Error::Misaligned { tensor, reason: format!("base address {:#x} is not 16-byte aligned", buf.ptr) });
    }
    if let Some(bad) = s.iter().find(|&&x| (x as u64 * elem_bytes) % 16 != 0) {
        return Err(Error::Misaligned { tensor, reason: format!("stride {bad} elements is not a multiple of 16 bytes") });
    }
    // Highest element offset reached, in checked 64-bit arithmetic.
    let reach = |n: usize, stride: i64| (n as i64 - 1).checked_mul(stride);
    let overflow = || Error::InvalidStrides { tensor, reason: "element offsets overflow 64 bits".into() };
    let last = [reach(dims[0], s[0]), reach(dims[1], s[1]), reach(dims[2], s[2])]
        .into_iter()
        .try_fold(dims[3] as i64, |acc, x| x.and_then(|x| acc.checked_add(x)))
        .ok_or_else(overflow)?;
    // Byte offsets must fit in signed 64 bits too (the kernels form addresses as base +
    // offset * 2), and so must the addresses.
    let end = last.checked_mul(elem_bytes as i64).and_then(|b| buf.ptr.checked_add(b as u64)).ok_or_else(overflow)?;
    if last as u64 > buf.len as u64 {
        return Err(Error::BufferTooSmall { tensor, needed: last as u64, len: buf.len as u64 });
    }
    Ok((s, end))
}

/// True when no two elements of a `dims` tensor with strides `s` share memory, by the usual
/// sufficient test: taken by increasing stride, each dimension of extent > 1 steps over all
/// the dimensions inside it. Only the output needs it: inputs may alias themselves (broadcast).
fn no_self_overlap(s: Strides, dims: [usize; 4]) -> bool {
    let mut by_stride = [(s.batch, dims[0]), (s.row, dims[1]), (s.head, dims[2])];
    by_stride.sort_unstable();
    let mut span = dims[3] as i64;
    by_stride.iter().filter(|&&(_, n)| n > 1).all(|&(stride, n)| {
        let clears = stride >= span;
        span += stride * (n as i64 - 1); // no overflow: check_tensor bounded the whole sum
        clears
    })
}

/// Checks a variable-length call's offsets (host ones) or their buffers' presence (device
/// ones; their extents are checked with the other buffers); returns (total_q, total_k).
fn check_varlen(p: &AttentionParams, v: &Varlen, bufs: &Buffers) -> Result<(usize, usize)> {
    let device_offsets = |reason: &str| Error::InvalidBuffer { tensor: "cu_seqlens_q", reason: reason.into() };
    match v {
        Varlen::Host { cu_seqlens_q, cu_seqlens_k } => {
            if bufs.varlen.is_some() {
                return Err(device_offsets("Buffers::varlen given for offsets on the host (Varlen::Host)"));
            }
            let keys = (!(cu_seqlens_k.is_empty() && p.paged.is_some())).then_some(("cu_seqlens_k", cu_seqlens_k, p.seqlen_k));
            for (what, cu, max) in std::iter::once(("cu_seqlens_q", cu_seqlens_q, p.seqlen_q)).chain(keys) {
                // `batch + 1` in u128: any usize batch, however hostile, is an error, not a wrap.
                if cu.len() as u128 != p.batch as u128 + 1 {
                    return Err(shape_err(what, format!("has {} offsets, batch {} needs {}", cu.len(), p.batch, p.batch as u128 + 1)));
                }
                if cu[0] != 0 {
                    return Err(shape_err(what, format!("starts at {}, not 0", cu[0])));
                }
                if let Some(w) = cu.windows(2).find(|w| w[1] < w[0]) {
                    return Err(shape_err(what, format!("decreases ({} then {})", w[0], w[1])));
                }
                if let Some(w) = cu.windows(2).find(|w| (w[1] - w[0]) as usize > max) {
                    let name = if what == "cu_seqlens_q" { "seqlen_q (max_seqlen_q)" } else { "seqlen_k (max_seqlen_k)" };
                    return Err(shape_err(what, format!("a sequence of {} rows exceeds {name} = {max}", w[1] - w[0])));
                }
            }
        }
        Varlen::Device { total_q, total_k } => {
            let Some(vb) = bufs.varlen else {
                return Err(device_offsets("offsets on the GPU (Varlen::Device) need Buffers::varlen"));
            };
            if vb.cu_seqlens_k.is_none() && p.paged.is_none() {
                let reason = "unpaged variable-length calls need key offsets".into();
                return Err(Error::InvalidBuffer { tensor: "cu_seqlens_k", reason });
            }
            // Row indices (and the kernels' clamps) are 32-bit.
            for (what, n) in [("total_q", total_q), ("total_k", total_k)] {
                if *n > i32::MAX as usize {
                    return Err(shape_err(what, format!("{n} exceeds {}", i32::MAX)));
                }
            }
        }
    }
    Ok((v.total_q(), v.total_k()))
}

/// Checks a paged call's shape (not its buffers, which need the non-empty plan).
fn check_paged_shape(p: &AttentionParams, pg: &PagedKv, bufs: &Buffers) -> Result<()> {
    if p.path == KernelPath::Wgmma {
        return Err(shape_err("wgmma path", "paged calls run on the mma.sync path"));
    }
    if !pg.page_size.is_power_of_two() || pg.page_size < 16 || pg.page_size > 1 << 20 {
        return Err(shape_err("page_size", format!("{} is not a power of two from 16 to 2^20", pg.page_size)));
    }
    if pg.num_pages == 0 || pg.num_pages > i32::MAX as usize {
        return Err(shape_err("num_pages", format!("{} is not between 1 and {}", pg.num_pages, i32::MAX)));
    }
    if pg.pages_per_seq == 0 || pg.pages_per_seq > i32::MAX as usize {
        return Err(shape_err("pages_per_seq", format!("{} is not between 1 and {}", pg.pages_per_seq, i32::MAX)));
    }
    if p.seqlen_k > pg.pages_per_seq.saturating_mul(pg.page_size) {
        let reason = format!("{} keys do not fit {} pages of {} rows", p.seqlen_k, pg.pages_per_seq, pg.page_size);
        return Err(shape_err("seqlen_k", reason));
    }
    if bufs.paged.is_none() {
        return Err(Error::InvalidBuffer { tensor: "block_table", reason: "a paged call needs Buffers::paged".into() });
    }
    Ok(())
}

/// Checks an i32 buffer of `needed` elements the kernel reads; returns its byte span.
fn check_i32(tensor: &'static str, buf: BufferRef, needed: usize) -> Result<(&'static str, u64, u64)> {
    if buf.ptr == 0 {
        return Err(Error::InvalidBuffer { tensor, reason: "null address".into() });
    }
    if buf.ptr % 4 != 0 {
        return Err(Error::Misaligned { tensor, reason: format!("base address {:#x} is not 4-byte aligned", buf.ptr) });
    }
    if buf.len < needed {
        return Err(Error::BufferTooSmall { tensor, needed: needed as u64, len: buf.len as u64 });
    }
    let end = buf.ptr.checked_add(needed as u64 * 4).ok_or_else(|| Error::InvalidBuffer { tensor, reason: "addresses overflow 64 bits".into() })?;
    Ok((tensor, buf.ptr, end))
}

/// Plans `p`; `gpu` (GPU plans only) gives the CTA slots of the split-KV kernels.
fn plan(p: &AttentionParams, bufs: &Buffers, gpu: Option<Slots>) -> Result<LaunchPlan> {
    let gpu_plan = gpu.is_some();
    if p.head_dim == 0 || p.head_dim % 8 != 0 || p.head_dim > 256 {
        return Err(Error::UnsupportedHeadDim(p.head_dim));
    }
    if p.heads_kv == 0 && p.heads_q > 0 {
        return Err(shape_err("heads_kv", "must be at least 1"));
    }
    if p.heads_kv > 0 && p.heads_q % p.heads_kv != 0 {
        return Err(Error::GqaRatio { heads_q: p.heads_q, heads_kv: p.heads_kv });
    }
    // Masks and row indices are 32-bit in the kernels.
    for (what, n) in [("seqlen_q", p.seqlen_q), ("seqlen_k", p.seqlen_k)] {
        if n > i32::MAX as usize / 2 {
            return Err(shape_err(what, format!("{n} exceeds {}", i32::MAX / 2)));
        }
    }
    let scale = p.scale();
    // The kernels track the running max of raw scores and scale inside exp2, which is right
    // only for a positive scale (zero makes `-inf * 0` NaN), with `scale * log2(e)` finite.
    if !(scale > 0.0 && (scale * std::f32::consts::LOG2_E).is_finite()) {
        return Err(shape_err("softmax_scale", format!("{scale} is not positive and finite (times log2 e)")));
    }
    let varlen = match &p.varlen {
        Some(v) => Some(check_varlen(p, v, bufs)?),
        None if bufs.varlen.is_some() => {
            return Err(Error::InvalidBuffer { tensor: "cu_seqlens_q", reason: "given for a call that is not variable-length".into() });
        }
        None => None,
    };
    match (&p.paged, &bufs.paged) {
        (Some(pg), _) => check_paged_shape(p, pg, bufs)?,
        (None, Some(_)) => return Err(Error::InvalidBuffer { tensor: "block_table", reason: "given for a call that is not paged".into() }),
        (None, None) => {}
    }
    let num_splits = match p.num_splits {
        Some(0) | None if !gpu_plan => 1,
        None => gpu.map_or(1, |slots| auto_splits(p, slots)),
        Some(n) if n > MAX_SPLITS => return Err(shape_err("num_splits", format!("{n} exceeds {MAX_SPLITS}"))),
        Some(n) => n.max(1),
    };
    // At least one K/V tile per split, and no split without tiles: `n` splits of
    // `ceil(tiles / n)` tiles may need fewer CTAs than `n`.
    // Rows per query block: GPU plans pack a GQA group's heads into the rows of one block.
    let block_rows = if gpu_plan { decode_rows(p) } else { p.seqlen_q };
    let split_cfg = split_config_for(p, block_rows);
    let num_splits = match split_cfg {
        Some(c) if num_splits > 1 => {
            let tiles = p.seqlen_k.div_ceil(c.block_n);
            if tiles < 2 { 1 } else { tiles.div_ceil(tiles.div_ceil(num_splits.min(tiles))) }
        }
        _ => 1,
    };
    if num_splits > 1 && p.path == KernelPath::Wgmma {
        return Err(shape_err("wgmma path", "split-KV runs on the mma.sync path"));
    }
    // The variant kernels come in one configuration per head dimension.
    // Variable-length calls that split (decode-shaped ones, whose grid alone would leave SMs
    // idle) and paged ones take the split kernels' configurations, decode tiles included.
    // GPU plans of decode-shaped calls take them unsplit too: a decode tile (16 rows) holds a
    // sequence's few rows, where a variable-length kernel's 128-row block is mostly padding.
    // (Not when the wgmma path is forced: it has its own variable-length kernels.)
    let decode_tile = gpu_plan && p.path != KernelPath::Wgmma && split_cfg.is_some_and(|c| block_rows <= c.block_m && c.block_m <= 16);
    let variant = match (&varlen, num_splits > 1) {
        (Some(_), _) if p.paged.is_some() => Some(("varlen_paged", split_cfg)),
        (Some(_), true) => Some(("varlen_split", split_cfg)),
        (Some(_), false) if decode_tile => Some(("varlen_split", split_cfg)),
        (Some(_), false) => Some(("varlen", varlen_config(p.head_dim))),
        _ if p.paged.is_some() => Some(("paged", split_cfg)),
        (None, true) => Some(("split", split_cfg)),
        (None, false) => None,
    };
    if let Some((what, Some(c))) = variant
        && matches!(p.config, Some(given) if given != c)
    {
        return Err(shape_err("config", format!("{what} calls take {c:?}")));
    }
    let config = match p.config {
        _ if variant.is_some() => variant.and_then(|v| v.1).ok_or(Error::UnsupportedHeadDim(p.head_dim))?,
        Some(c) => {
            if !config::CONFIGS.contains(&c) {
                return Err(shape_err("config", format!("{c:?} is not an instantiated configuration")));
            }
            if c.head_dim < p.head_dim {
                return Err(shape_err("config", format!("head_dim {} does not fit config for {}", p.head_dim, c.head_dim)));
            }
            c
        }
        None => {
            let default = config::default_config(p.head_dim).ok_or(Error::UnsupportedHeadDim(p.head_dim))?;
            // GPU plans of decode-shaped calls (few query rows, or packed GQA heads) take the
            // split-KV kernels' decode tiles where one is smaller than the default's (16 or 64
            // rows instead of mostly padding rows).
            match split_config(p.head_dim, block_rows) {
                Some(c) if gpu_plan && block_rows <= c.block_m && c.block_m < default.block_m => c,
                _ => default,
            }
        }
    };
    let kernel = match variant {
        Some((v, _)) => variant_kernel_name(v, p.dtype, &config),
        None => kernel_name(p.dtype, &config),
    };
    // GQA decode packing (GPU plans only): one query row per sequence, so the `group` query
    // heads that share a K/V head become the rows of one query block: a CTA reads its K/V once
    // for all of them. The kernel sees `heads_kv` heads of `group` rows, the rows `head` strides
    // apart; output and log-sum-exp land exactly where the unpacked call puts them.
    let group = p.heads_q.checked_div(p.heads_kv).unwrap_or(1);
    let pack = gpu_plan && packs_gqa(p);
    let (k_heads, k_rows) = if pack { (p.heads_kv, group) } else { (p.heads_q, p.seqlen_q) };
    let m_blocks = k_rows.div_ceil(config.block_m);
    // Split-KV: each split's share of the K/V tiles (the kernel clips the last one).
    let split_tiles = p.seqlen_k.div_ceil(config.block_n).div_ceil(num_splits).max(1);
    // Checked: a wrapped product could pass for a small (or empty) grid.
    let ctas = (p.batch as u64)
        .checked_mul(k_heads as u64)
        .and_then(|x| x.checked_mul(m_blocks as u64))
        .and_then(|x| x.checked_mul(num_splits as u64))
        .unwrap_or(u64::MAX);
    if ctas > i32::MAX as u64 {
        return Err(Error::LaunchLimit(format!("{ctas} CTAs exceed the grid limit of {}", i32::MAX)));
    }
    // No packed query rows: every sequence is empty.
    let empty = ctas == 0 || varlen.is_some_and(|(tq, _)| tq == 0);
    let mut params = FwdParams::default();
    if !empty {
        let d = p.head_dim;
        // Contiguous defaults in checked arithmetic: a wrapped stride could pass the extent check.
        let or_bshd = |tensor, given: Option<Strides>, s: usize, h: usize| match given {
            Some(st) => Ok(st),
            None => (h as i64)
                .checked_mul(d as i64)
                .and_then(|row| Some(Strides { batch: row.checked_mul(s as i64)?, row, head: d as i64 }))
                .ok_or_else(|| Error::InvalidStrides { tensor, reason: "element offsets overflow 64 bits".into() }),
        };
        // Variable-length: one packed "batch" of total rows, batch strides unused.
        let (nb, rows_q, rows_k) = match varlen {
            Some((tq, tk)) => (1, tq, tk),
            None => (p.batch, p.seqlen_q, p.seqlen_k),
        };
        let packed = |st: Strides| if varlen.is_some() { Strides { batch: 0, ..st } } else { st };
        let q_s = packed(or_bshd("q", p.q_strides, rows_q, p.heads_q)?);
        // Paged caches: `[num_pages, page_size, heads_kv, D]`, pages in the batch dimension
        // (also in variable-length calls, whose packing is the queries' only).
        let ((kv_batch, kv_rows), packed_kv) = match p.paged {
            Some(pg) => ((pg.num_pages, pg.page_size), None),
            None => ((nb, rows_k), varlen),
        };
        let packed_kv = |st: Strides| if packed_kv.is_some() { Strides { batch: 0, ..st } } else { st };
        let k_s = packed_kv(or_bshd("k", p.k_strides, kv_rows, p.heads_kv)?);
        let v_s = packed_kv(or_bshd("v", p.v_strides, kv_rows, p.heads_kv)?);
        let o_s = packed(or_bshd("out", p.o_strides, rows_q, p.heads_q)?);
        let q_end;
        let o_end;
        (params.q_strides, q_end) = check_tensor("q", bufs.q, q_s, [nb, rows_q, p.heads_q, d], 2)?;
        (params.o_strides, o_end) = check_tensor("out", bufs.o, o_s, [nb, rows_q, p.heads_q, d], 2)?;
        if !no_self_overlap(o_s, [nb, rows_q, p.heads_q, d]) {
            let reason = format!("{o_s:?} put distinct output elements at the same address");
            return Err(Error::InvalidStrides { tensor: "out", reason });
        }
        // Address ranges [start, end) of everything the kernel touches, written ones first.
        let mut spans = vec![("out", bufs.o.ptr, o_end), ("q", bufs.q.ptr, q_end)];
        // With no keys, K and V are never read: any (even null) buffer will do.
        let reads_kv = if p.paged.is_some() { p.seqlen_k > 0 } else { rows_k > 0 };
        if reads_kv {
            let (k_end, v_end);
            (params.k_strides, k_end) = check_tensor("k", bufs.k, k_s, [kv_batch, kv_rows, p.heads_kv, d], 2)?;
            (params.v_strides, v_end) = check_tensor("v", bufs.v, v_s, [kv_batch, kv_rows, p.heads_kv, d], 2)?;
            spans.extend([("k", bufs.k.ptr, k_end), ("v", bufs.v.ptr, v_end)]);
        }
        if let (Some(pg), Some(pb)) = (p.paged, bufs.paged) {
            // The kernel reads every table row it is launched for (up to `pages_per_seq`
            // entries) and a count per sequence.
            spans.push(check_i32("block_table", pb.block_table, p.batch * pg.pages_per_seq)?);
            if let Some(used) = pb.seqused_k {
                spans.push(check_i32("seqused_k", used, p.batch)?);
            }
            params.block_table = pb.block_table.ptr;
            params.seqused_k = pb.seqused_k.map_or(0, |u| u.ptr);
            params.table_stride = pg.pages_per_seq as u32;
            params.page_shift = pg.page_size.trailing_zeros();
            params.last_page = (pg.num_pages - 1) as u32;
        }
        if let (Some(Varlen::Device { .. }), Some(vb)) = (&p.varlen, bufs.varlen) {
            // The kernels read `batch + 1` offsets of each.
            spans.push(check_i32("cu_seqlens_q", vb.cu_seqlens_q, p.batch + 1)?);
            params.cu_seqlens_q = vb.cu_seqlens_q.ptr;
            if let Some(k) = vb.cu_seqlens_k {
                spans.push(check_i32("cu_seqlens_k", k, p.batch + 1)?);
                params.cu_seqlens_k = k.ptr;
            }
        }
        if let Some(lse) = bufs.lse {
            // `[batch, heads_q, seqlen_q]`, or `[heads_q, total_q]` for variable-length calls.
            let needed = (nb * p.heads_q * rows_q) as u64;
            if (lse.len as u64) < needed {
                return Err(Error::BufferTooSmall { tensor: "lse", needed, len: lse.len as u64 });
            }
            if lse.ptr % 4 != 0 {
                return Err(Error::Misaligned { tensor: "lse", reason: format!("base address {:#x} is not 4-byte aligned", lse.ptr) });
            }
            // A null address would make the kernel skip the log-sum-exp silently.
            if lse.ptr == 0 {
                return Err(Error::InvalidBuffer { tensor: "lse", reason: "null address".into() });
            }
            let overflow = || Error::InvalidStrides { tensor: "lse", reason: "addresses overflow 64 bits".into() };
            spans.insert(1, ("lse", lse.ptr, lse.ptr.checked_add(needed * 4).ok_or_else(overflow)?));
        }
        // What the kernel writes must not share memory with anything else it touches, or the
        // result depends on CTA timing. Checked on ranges: an output interleaved with the inputs
        // in one allocation is refused even where no element is shared.
        let written = 1 + bufs.lse.is_some() as usize;
        for (i, &(w, w0, w1)) in spans[..written].iter().enumerate() {
            if let Some(&(other, ..)) = spans[i + 1..].iter().find(|&&(_, s0, s1)| w0 < s1 && s0 < w1) {
                return Err(Error::InvalidBuffer { tensor: w, reason: format!("overlaps {other}") });
            }
        }
        params = FwdParams {
            q: bufs.q.ptr,
            k: bufs.k.ptr,
            v: bufs.v.ptr,
            o: bufs.o.ptr,
            lse: bufs.lse.map_or(0, |l| l.ptr),
            batch: p.batch as u32,
            heads_q: k_heads as u32,
            group: if pack { 1 } else { group as u32 },
            seqlen_q: k_rows as u32,
            seqlen_k: p.seqlen_k as u32,
            head_dim: p.head_dim as u32,
            scale_log2: scale * std::f32::consts::LOG2_E,
            // One query row sees every key under bottom-right causal masking too.
            causal: (p.causal && !pack) as u32,
            m_blocks: m_blocks as u32,
            interleave: interleave(p.causal && !pack && varlen.is_none() && num_splits == 1, p.batch * k_heads, m_blocks),
            num_splits: num_splits as u32,
            total_q: rows_q as u32,
            // Paged key offsets only count keys: any start is in range.
            total_k: if p.paged.is_some() { i32::MAX as u32 } else { rows_k as u32 },
            split_tiles: split_tiles as u32,
            ..params
        };
        if pack {
            // Row r of packed head g is query head g * group + r (its only query row).
            let g = group as i64;
            let [qb, _, qh] = params.q_strides;
            let [ob, _, oh] = params.o_strides;
            params.q_strides = [qb, qh, qh * g];
            params.o_strides = [ob, oh, oh * g];
        }
    }
    let split = if num_splits > 1 && !empty {
        let rows = p.batch * k_heads * k_rows;
        // The kernels index the workspace with 32-bit `split * rows + row`.
        if (num_splits as u64) * (rows as u64) > u32::MAX as u64 {
            return Err(Error::LaunchLimit(format!("{num_splits} splits of {rows} rows exceed the split workspace's index range")));
        }
        Some(SplitPlan {
            num_splits: num_splits as u32,
            counters_len: (ctas / num_splits as u64) as usize,
            o_accum_len: num_splits * rows * config.head_dim,
            lse_accum_len: num_splits * rows,
        })
    } else {
        None
    };
    let plan = LaunchPlan {
        kernel,
        config,
        grid: if empty { 0 } else { ctas as u32 },
        block: config.threads() as u32,
        smem: config.smem_bytes() as u32,
        params,
        wgmma: None,
        varlen_offsets: match &p.varlen {
            Some(Varlen::Host { cu_seqlens_q, cu_seqlens_k }) if !empty => Some([&cu_seqlens_q[..], &cu_seqlens_k[..]].concat()),
            _ => None,
        },
        split,
    };
    if plan.split.is_some() || p.paged.is_some() || pack {
        // Split-KV, paged and packed-GQA decode calls stay on the mma.sync path (Auto included).
        return crate::hopper::finish_plan(&p.clone().path(KernelPath::MmaSync), plan);
    }
    crate::hopper::finish_plan(p, plan)
}

// SAFETY: plain `repr(C)` data of integers and floats.
unsafe impl DeviceCopy for FwdParams {}

impl Gpu {
    /// Launches forward attention on `stream` (asynchronously) after validating every input.
    ///
    /// `q`, `k`, `v` and `out` hold `[batch, seqlen, heads, head_dim]` tensors with the strides
    /// of `params` (contiguous by default); `lse`, if given, receives the f32 log-sum-exp of
    /// each (batch, head, query row), `-inf` for rows that see no key (whose output is 0).
    /// A call with zero batch, heads or query rows does nothing and returns `Ok`.
    ///
    /// `T` must match [`AttentionParams::dtype`]. This GPU's context must be current on the
    /// calling thread (it is on the thread that created the `Gpu`; elsewhere call
    /// [`Gpu::make_current`]), and `stream` must belong to it.
    ///
    /// Returns the first validation error ([`AttentionParams::plan`]) without launching
    /// anything. `Ok` means the kernel was queued: errors while it runs surface at the next
    /// synchronisation (e.g. `stream.synchronize()`).
    pub fn attention_forward<T: Element>(
        &self,
        stream: &Stream,
        params: &AttentionParams,
        q: &DeviceSlice<T>,
        k: &DeviceSlice<T>,
        v: &DeviceSlice<T>,
        out: &mut DeviceSlice<T>,
        lse: Option<&mut DeviceSlice<f32>>,
    ) -> Result<()> {
        if params.paged.is_some() {
            return Err(shape_err("paged", "paged calls go through attention_forward_paged"));
        }
        self.forward_slices(stream, params, [q, k, v], out, lse, None, None)
    }

    /// [`Gpu::attention_forward`] for a paged call ([`AttentionParams::paged`]): K and V are
    /// the `[num_pages, page_size, heads_kv, head_dim]` caches of `cache`, read through its
    /// block table (see [`PagedKv`] for the layout and for what the kernel does with
    /// out-of-range table entries and key counts).
    pub fn attention_forward_paged<T: Element>(
        &self,
        stream: &Stream,
        params: &AttentionParams,
        q: &DeviceSlice<T>,
        cache: PagedCache<'_, T>,
        out: &mut DeviceSlice<T>,
        lse: Option<&mut DeviceSlice<f32>>,
    ) -> Result<()> {
        if params.paged.is_none() {
            return Err(shape_err("paged", "attention_forward_paged needs AttentionParams::paged"));
        }
        self.forward_slices(stream, params, [q, cache.k, cache.v], out, lse, Some(cache.buffers()), None)
    }

    /// [`Gpu::attention_forward`] for a variable-length call whose offsets are on the GPU
    /// ([`Varlen::Device`], from [`AttentionParams::new_varlen_device`]), as serving engines
    /// call `flash_attn_varlen_func`: Q and the output packed `[total_q, heads_q, head_dim]`,
    /// K and V either packed tensors ([`KvSlices::Tensors`], `[total_k, heads_kv, head_dim]`)
    /// or a paged cache ([`KvSlices::Paged`], with [`AttentionParams::paged`]); `lse`, if
    /// given, is f32 `[heads_q, total_q]`. See [`Varlen`] for what the kernels do with offsets
    /// that are out of range.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_forward_varlen<T: Element>(
        &self,
        stream: &Stream,
        params: &AttentionParams,
        q: &DeviceSlice<T>,
        kv: KvSlices<'_, T>,
        offsets: VarlenOffsets<'_>,
        out: &mut DeviceSlice<T>,
        lse: Option<&mut DeviceSlice<f32>>,
    ) -> Result<()> {
        if !matches!(params.varlen, Some(Varlen::Device { .. })) {
            return Err(shape_err("varlen", "attention_forward_varlen needs offsets on the GPU (AttentionParams::new_varlen_device)"));
        }
        let varlen = VarlenBuffers { cu_seqlens_q: BufferRef::of(offsets.cu_seqlens_q), cu_seqlens_k: offsets.cu_seqlens_k.map(BufferRef::of) };
        let (k, v, paged) = match kv {
            KvSlices::Tensors { k, v } => (k, v, None),
            KvSlices::Paged(cache) => (cache.k, cache.v, Some(cache.buffers())),
        };
        if params.paged.is_some() != paged.is_some() {
            return Err(shape_err("paged", "KvSlices::Paged goes with AttentionParams::paged, and only with it"));
        }
        self.forward_slices(stream, params, [q, k, v], out, lse, paged, Some(varlen))
    }

    /// Plans and launches a call on cust slices (the safe entries).
    #[allow(clippy::too_many_arguments)]
    fn forward_slices<T: Element>(
        &self,
        stream: &Stream,
        params: &AttentionParams,
        [q, k, v]: [&DeviceSlice<T>; 3],
        out: &mut DeviceSlice<T>,
        lse: Option<&mut DeviceSlice<f32>>,
        paged: Option<PagedBuffers>,
        varlen: Option<VarlenBuffers>,
    ) -> Result<()> {
        if params.dtype != T::DTYPE {
            return Err(shape_err("dtype", format!("params say {:?}, buffers hold {:?}", params.dtype, T::DTYPE)));
        }
        let bufs = Buffers {
            q: BufferRef::of(q),
            k: BufferRef::of(k),
            v: BufferRef::of(v),
            o: BufferRef::of(out),
            lse: lse.map(|l| BufferRef::of(l)),
            paged,
            varlen,
        };
        let plan = self.plan_forward(params, &bufs)?;
        // SAFETY: the plan checked that every address the kernel forms lies in these buffers.
        unsafe { self.launch_forward(stream.as_inner() as *mut c_void, params.path, &plan) }
    }

    /// Launches forward attention on a raw `CUstream`, with the tensors given as device
    /// addresses and capacities: the entry point for projects whose buffers and streams come
    /// from another CUDA crate (cudarc, candle, a runtime-API library).
    ///
    /// It is [`Gpu::attention_forward`] without the cust types: `bufs` holds each tensor's
    /// device address and capacity **in elements** (of [`AttentionParams::dtype`] for Q, K, V
    /// and the output, of `f32` for the log-sum-exp), and the same [`AttentionParams::plan`]
    /// validates shape, strides, alignment and extents before anything is launched. The
    /// element type is taken from `params.dtype`. `stream` is any crate's `CUstream` handle
    /// cast to a pointer (for example `cudarc_stream.cu_stream() as *mut c_void`); null
    /// means the context's legacy default stream.
    ///
    /// Before launching, this GPU's context is made current on the calling thread if it is
    /// not already (as cudarc does before its own calls). That context is the device's
    /// **primary context** ([`Gpu::new`] retains it), the one cudarc's
    /// `CudaContext::new(ordinal)`, candle's `CudaDevice` and the CUDA runtime (PyTorch and
    /// every runtime-API library) use: memory and streams from them are valid here as they
    /// are, provided the `Gpu` was opened with the same device ordinal.
    ///
    /// A call with zero batch, heads or query rows does nothing and returns `Ok`; with
    /// `seqlen_k == 0`, K and V are never read (any address will do) and every output row is
    /// 0 with log-sum-exp `-inf`. `Ok` means the kernel was queued; errors while it runs
    /// surface at the next synchronisation of the stream.
    ///
    /// # Safety
    ///
    /// The planner checks every address the kernel will form against the given capacities,
    /// and refuses null addresses and outputs that overlap each other or the inputs; the
    /// caller vouches for the capacities themselves and for the lifetime of the memory:
    ///
    /// * Each `BufferRef` describes device memory usable in this GPU's context (allocated in
    ///   the primary context of this device, by any crate, or otherwise mapped into it), and
    ///   its `len` elements from `ptr` on lie within one live allocation: `len` is a true
    ///   capacity, never more than what was allocated.
    /// * The memory stays allocated, and nothing else (no host code, no kernel or copy on any
    ///   stream) writes Q, K or V or reads or writes the output or log-sum-exp, from this
    ///   call until the stream has passed the kernel. Freeing in stream order on the same
    ///   stream after the call is fine.
    /// * `stream` is null or a live stream created in this GPU's context (the device's
    ///   primary context), and stays alive until the kernel has been queued (this call's
    ///   return).
    pub unsafe fn attention_forward_raw(&self, stream: *mut c_void, params: &AttentionParams, bufs: &Buffers) -> Result<()> {
        let plan = self.plan_forward(params, bufs)?;
        if plan.is_empty() {
            return Ok(());
        }
        use cust::sys::{CUcontext, cuCtxGetCurrent, cuCtxSetCurrent};
        let mut current: CUcontext = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        crate::error::check_driver("cuCtxGetCurrent", unsafe { cuCtxGetCurrent(&mut current) })?;
        if current != self.raw_context() {
            // SAFETY: this GPU's context, alive as long as `self`.
            crate::error::check_driver("cuCtxSetCurrent", unsafe { cuCtxSetCurrent(self.raw_context()) })?;
        }
        // SAFETY: the plan checked every address against the capacities, which the caller
        // vouches for, as for the stream and the buffers' lifetimes.
        unsafe { self.launch_forward(stream, params.path, &plan) }
    }

    /// [`AttentionParams::plan`] for this GPU: with [`AttentionParams::num_splits`] `None`,
    /// decode-shaped calls are split across CTAs as [`auto_num_splits`] decides for this GPU's
    /// SM count. Pure host code, like `plan`.
    pub fn plan_forward(&self, params: &AttentionParams, bufs: &Buffers) -> Result<LaunchPlan> {
        let variant = match (params.varlen.is_some(), params.paged.is_some()) {
            (true, true) => "varlen_paged",
            (true, false) => "varlen_split",
            (false, true) => "paged",
            (false, false) => "split",
        };
        let slots = |c: &TileConfig| {
            let name = variant_kernel_name(variant, params.dtype, c);
            let per_sm = self.resident_ctas(&name, c.threads() as u32, c.smem_bytes() as u32).map_or(resident_ctas(c), |n| n as usize);
            self.sm_count() as usize * per_sm.max(1)
        };
        plan(params, bufs, Some(&slots))
    }

    /// Launches one kernel of this GPU's module with a by-value [`FwdParams`].
    ///
    /// # Safety
    /// As for [`Gpu::launch_forward`]: `params` must be valid for `name`'s launch geometry.
    unsafe fn launch_kernel(&self, stream: *mut c_void, name: &str, (grid, block, smem): (u32, u32, u32), params: &FwdParams) -> Result<()> {
        let raw = self.kernel_function(name, smem)?;
        let mut params = *params;
        let mut args = [&mut params as *mut FwdParams as *mut c_void];
        // SAFETY: one argument matching the kernel's single by-value `FwdParams` parameter.
        let r = unsafe { cust::sys::cuLaunchKernel(raw, grid, 1, 1, block, 1, 1, smem, stream as _, args.as_mut_ptr(), std::ptr::null_mut()) };
        crate::error::check_driver("cuLaunchKernel", r)
    }

    /// Variable-length and split-KV launches: the forward kernel with its workspace
    /// ([`Gpu::with_workspace`]: the offsets, the split counters and partials).
    ///
    /// # Safety
    /// As for [`Gpu::launch_forward`].
    unsafe fn launch_variant(&self, stream: *mut c_void, plan: &LaunchPlan) -> Result<()> {
        let offsets = plan.varlen_offsets.as_deref().unwrap_or(&[]);
        let (counters, partial_bytes) = plan.split.as_ref().map_or((0, 0), |s| (s.counters_len, (s.o_accum_len + s.lse_accum_len) * 4));
        let launch = |ws: WorkspaceAddrs| {
            let mut params = plan.params;
            if let Some(base) = ws.offsets {
                point_at_offsets(&mut params, base, offsets.len());
            }
            if let Some(s) = &plan.split {
                // Partials: O, then lse.
                params.split_counters = ws.counters;
                params.o_accum = ws.partials;
                params.lse_accum = ws.partials + (s.o_accum_len * 4) as u64;
            }
            // SAFETY: the plan was validated; the workspace is set up for this launch.
            unsafe { self.launch_kernel(stream, &plan.kernel, (plan.grid, plan.block, plan.smem), &params) }
        };
        // SAFETY: as for this function; `launch` enqueues on `stream` only.
        unsafe { self.with_workspace(stream, offsets, counters, partial_bytes, launch) }
    }

    /// Calls `launch` (which enqueues one kernel on `stream`) with a workspace holding
    /// `offsets` (a host-offset plan's [`LaunchPlan::varlen_offsets`]), `counters` u32
    /// counters that are zero when the kernel starts and that it leaves at zero, and
    /// `partial_bytes` bytes of scratch: the stream's kept workspace where it can have one
    /// ([`crate::workspace`]), otherwise one stream-ordered allocation from the library's pool
    /// on `stream`, its counters zeroed before the launch and freed with `cuMemFreeAsync`
    /// after it. The offsets (from the validated host copy) are stored at the front of the
    /// scratch by [`crate::workspace::upload_i32`], in stream order, so launches on one stream
    /// can share the kept workspace.
    ///
    /// # Safety
    /// `stream` is a valid stream of this GPU's context, which is current.
    pub(crate) unsafe fn with_workspace(
        &self,
        stream: *mut c_void,
        offsets: &[i32],
        counters: usize,
        partial_bytes: usize,
        launch: impl Fn(WorkspaceAddrs) -> Result<()>,
    ) -> Result<()> {
        use cust::sys::{cuMemFreeAsync, cuMemsetD32Async};
        // The scratch: offsets (4-byte items padded to 16 bytes), then the partials.
        let off_bytes = (offsets.len() * 4).next_multiple_of(16);
        let with_offsets = |counters: u64, scratch: u64| -> Result<()> {
            let mut ws = WorkspaceAddrs { offsets: None, counters, partials: scratch + off_bytes as u64 };
            if !offsets.is_empty() {
                // In launch parameters, not a pageable copy (which would wait for the stream).
                // SAFETY: the scratch holds `off_bytes` bytes for them, ordered on `stream`.
                unsafe { crate::workspace::upload_i32(self.kernel_function("upload_i32", 0)?, stream, scratch, offsets)? };
                ws.offsets = Some(scratch);
            }
            launch(ws)
        };
        // SAFETY: as for this function; `with_offsets` enqueues on `stream` only.
        if let Some(launched) = unsafe { self.workspaces.with(stream, self.workspace_pool(), counters, off_bytes + partial_bytes, with_offsets) } {
            return launched;
        }
        // One allocation: the counters, then the scratch.
        let counter_bytes = crate::workspace::counter_bytes(counters);
        let bytes = counter_bytes + off_bytes + partial_bytes;
        // SAFETY: `stream` is valid per this function's contract.
        let base = unsafe { crate::workspace::alloc_async(stream, self.workspace_pool(), bytes.max(16))? };
        let run = || -> Result<()> {
            if counters > 0 {
                // SAFETY: the counters lie in the allocation just made, ordered on `stream`.
                crate::error::check_driver("cuMemsetD32Async", unsafe { cuMemsetD32Async(base, 0, counters, stream as _) })?;
            }
            with_offsets(base, base + counter_bytes as u64)
        };
        let result = run();
        // SAFETY: `base` came from a stream-ordered allocation; freed after the kernel in order.
        let freed = crate::error::check_driver("cuMemFreeAsync", unsafe { cuMemFreeAsync(base, stream as _) });
        result.and(freed)
    }

    /// Launches a validated plan on a raw `CUstream`: sets the kernel's dynamic shared memory
    /// opt-in and launches it with the plan's geometry (see [`crate::ptx`] for the ABI). Does
    /// nothing for an empty plan; fails with [`Error::LaunchLimit`] if the plan needs more
    /// shared memory than this GPU allows. Useful to re-launch one plan many times (the
    /// benchmark does) without validating again; unlike [`Gpu::attention_forward_raw`] it does
    /// not make the context current.
    ///
    /// Split-KV plans ([`LaunchPlan::split`]) use a workspace the GPU keeps for `stream`
    /// ([`crate::workspace`]: counters the kernel leaves at zero, room for the partials), or,
    /// where a stream keeps none, one stream-ordered allocation per launch like
    /// variable-length plans ([`LaunchPlan::varlen_offsets`]): from the library's pool on
    /// `stream`, freed with `cuMemFreeAsync` after the kernel, holding the offsets copied from
    /// the plan (the validated host copy) or the zeroed split counters and the partials.
    ///
    /// # Safety
    /// The plan's buffers must be live device allocations of this GPU's context, not freed or
    /// written by anything else until the stream reaches the kernel's end, and `stream` must
    /// be a valid stream of this context (or null for the legacy default stream).
    /// The plan must come unchanged from [`AttentionParams::plan`] with true capacities (its
    /// fields are public, and a plan edited by hand is not checked again), and this GPU's
    /// context must be current on the calling thread.
    pub unsafe fn launch_forward(&self, stream: *mut c_void, path: KernelPath, plan: &LaunchPlan) -> Result<()> {
        if let Some(wgmma) = crate::hopper::select(self, path, plan)? {
            // SAFETY: as for this function.
            return unsafe { crate::hopper::launch(self, stream, wgmma, plan.varlen_offsets.as_deref().unwrap_or(&[])) };
        }
        if plan.is_empty() {
            return Ok(());
        }
        if plan.smem > self.max_shared_memory_per_block() {
            return Err(Error::LaunchLimit(format!(
                "{} needs {} bytes of shared memory, the GPU allows {}",
                plan.kernel,
                plan.smem,
                self.max_shared_memory_per_block()
            )));
        }
        if plan.varlen_offsets.is_some() || plan.split.is_some() {
            // SAFETY: as for this function.
            return unsafe { self.launch_variant(stream, plan) };
        }
        // SAFETY: as for this function.
        unsafe { self.launch_kernel(stream, &plan.kernel, (plan.grid, plan.block, plan.smem), &plan.params) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Launch parameters of a variable-length launch over `cq` / `ck` (host arrays standing in
    /// for device memory): maxima `seqlen`, packed rows `total`.
    fn varlen_params(cq: &[i32], ck: &[i32], heads_q: u32, [seqlen_q, seqlen_k]: [u32; 2], [total_q, total_k]: [u32; 2]) -> FwdParams {
        FwdParams {
            batch: cq.len() as u32 - 1,
            heads_q,
            seqlen_q,
            seqlen_k,
            total_q,
            total_k,
            cu_seqlens_q: cq.as_ptr() as u64,
            cu_seqlens_k: ck.as_ptr() as u64,
            ..Default::default()
        }
    }

    /// Split and paged calls take the smallest decode tile that holds their rows, and rows
    /// that no tile holds (prefill) the largest: 16-row tiles for a 2k-row prefill would do
    /// 4x the tiles' fixed work.
    #[test]
    fn split_configs_hold_the_rows_or_are_the_largest() {
        let bm = |d: usize, rows: usize| split_config(d, rows).unwrap().block_m;
        assert_eq!([bm(128, 1), bm(128, 16), bm(128, 17), bm(128, 64), bm(128, 65), bm(128, 2048)], [16, 16, 64, 64, 64, 64]);
        assert_eq!([bm(64, 4), bm(64, 100), bm(64, 5000)], [16, 128, 128]);
        assert_eq!([bm(256, 1), bm(256, 300)], [128, 128]);
        // Among equal blocks the first listed: head_dim 128's 16x128 before 16x64.
        assert_eq!(split_config(128, 8).unwrap().block_n, 128);
    }

    /// A sequence's extent comes from the offsets in a variable-length launch (read here from
    /// host memory, as the kernels read device memory), and its log-sum-exp rows sit at
    /// `head * total_q + q_start`; fixed-length launches use their own lengths.
    #[test]
    fn sequence_extents_and_lse_rows_follow_the_offsets() {
        let (cq, ck) = ([0i32, 3, 3, 10], [0i32, 5, 7, 20]);
        let p = varlen_params(&cq, &ck, 4, [7, 13], [10, 20]);
        // SAFETY: both arrays hold batch + 1 offsets.
        let e = unsafe { scheduler::Extent::varlen(&p, 2) };
        assert_eq!((e.seqlen_q, e.seqlen_k, e.q_start, e.k_start), (7, 13, 3, 7));
        assert_eq!(e.lse_first(&p, 2, 1, true), 10 + 3);
        let empty = unsafe { scheduler::Extent::varlen(&p, 1) };
        assert_eq!((empty.seqlen_q, empty.seqlen_k), (0, 2));
        let f = scheduler::Extent::fixed(&p);
        assert_eq!((f.seqlen_q, f.seqlen_k, f.q_start, f.k_start), (7, 13, 0, 0));
        assert_eq!(f.lse_first(&p, 2, 1, false), (2 * 4 + 1) * 7);
    }

    /// Offsets read from the caller's device memory are clamped into the packed rows and to
    /// the maxima, whatever they hold, so a kernel's rows (`q_start + row < q_start + seqlen_q
    /// <= total_q`, likewise for keys) stay inside the tensors; paged launches take their key
    /// counts from `seqused_k` (clamped) or, without key offsets, `seqlen_k`.
    #[test]
    fn device_offsets_are_clamped_into_the_packed_rows() {
        let (cq, ck) = ([5i32, -4, 9, 100, i32::MIN, i32::MAX, 3], [0i32, 30, 2, -1, 7, 7, 8]);
        let p = varlen_params(&cq, &ck, 1, [4, 13], [10, 20]);
        let extents: Vec<_> = (0..6)
            .map(|b| {
                // SAFETY: both arrays hold batch + 1 offsets.
                let e = unsafe { scheduler::Extent::varlen(&p, b) };
                assert!(e.q_start + e.seqlen_q <= p.total_q && e.k_start + e.seqlen_k <= p.total_k, "{b}");
                (e.q_start, e.seqlen_q, e.k_start, e.seqlen_k)
            })
            .collect();
        // Decreasing, negative, past the totals, longer than the maxima.
        let want = [(5, 0, 0, 13), (0, 4, 20, 0), (9, 1, 2, 0), (10, 0, 0, 7), (0, 4, 7, 0), (10, 0, 7, 1)];
        assert_eq!(extents, want);

        // Paged: no key offsets, then seqused_k overriding (clamped to 0..=seqlen_k).
        let used = [-3i32, 2, 1000, 13, 0, 7];
        let paged = FwdParams { cu_seqlens_k: 0, ..p };
        let counts: Vec<u32> = (0..6).map(|b| unsafe { scheduler::Extent::varlen(&paged, b) }.seqlen_k).collect();
        assert_eq!(counts, [13; 6]);
        let with_used = FwdParams { seqused_k: used.as_ptr() as u64, ..paged };
        // SAFETY: `used` holds a count per sequence.
        let counts: Vec<u32> = (0..6).map(|b| unsafe { scheduler::Extent::varlen(&with_used, b).with_seqused_k(&with_used, b) }.seqlen_k).collect();
        assert_eq!(counts, [0, 2, 13, 13, 0, 7]);
        let fixed = unsafe { scheduler::Extent::fixed(&paged).with_seqused_k(&paged, 3) };
        assert_eq!(fixed.seqlen_k, 13, "no seqused_k: every sequence has seqlen_k keys");
    }

    /// The grid order of `interleave` groups visits every (batch, head, query block) once, and
    /// the launch ends on query block 0 (the lightest causal one) of a whole group.
    #[test]
    fn interleaved_grid_order_is_a_permutation_ending_on_light_blocks() {
        for (batch, heads, m_blocks) in [(1, 7, 60), (8, 32, 11), (2, 3, 5), (1, 1, 9), (3, 5, 1)] {
            let pairs = batch * heads;
            for g in [1, 2, 4, interleave(true, pairs as usize, m_blocks as usize), pairs] {
                let p = FwdParams { batch, heads_q: heads, m_blocks, interleave: g, ..Default::default() };
                let grid = pairs * m_blocks;
                let mut seen = vec![false; grid as usize];
                for block in 0..grid {
                    let t = scheduler::tile_for_block(&p, block);
                    assert!(t.batch < batch && t.head < heads && t.m_block < m_blocks, "{p:?} block {block}");
                    let i = ((t.batch * heads + t.head) * m_blocks + t.m_block) as usize;
                    assert!(!std::mem::replace(&mut seen[i], true), "{p:?}: block {block} repeats a tile");
                }
                // Every block of the last whole group's last round is a query block 0.
                let last_round = g.min(pairs);
                for block in grid - last_round..grid {
                    assert_eq!(scheduler::tile_for_block(&p, block).m_block, 0, "{p:?} block {block}");
                }
            }
        }
    }
}
