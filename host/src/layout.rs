//! The shape of a call: how its query rows are stored (a batch of equal-length sequences, or
//! packed variable-length sequences with their offsets on the host or the GPU) and where K and
//! V come from (tensors, or a paged cache read through a block table). [`Layout`] is the one
//! place a call says which, and it holds the index arrays that shape needs, so a paged call
//! without a block table, or offsets given to a fixed-length call, cannot be written.
use std::marker::PhantomData;

use crate::buffers::BufferRef;

/// An array of `T` on the GPU that a call reads (i32 sequence offsets, a block table or key
/// counts: [`DeviceIndex`]; f32 ALiBi slopes or sink logits), borrowed for `'a`: the safe
/// entry point can then rely on it staying allocated while it queues the kernel, as it does
/// for the tensors.
pub struct DeviceArray<'a, T> {
    buf: BufferRef,
    source: Source<'a>,
    element: PhantomData<&'a [T]>,
}

/// An i32 array on the GPU: sequence offsets, a block table, key counts.
pub type DeviceIndex<'a> = DeviceArray<'a, i32>;

/// Where a [`DeviceArray`] comes from, for crates that track accesses.
#[derive(Clone, Copy)]
pub(crate) enum Source<'a> {
    /// An address, or memory of a crate that tracks nothing (cust).
    Untracked(PhantomData<&'a ()>),
    /// A cudarc slice or view, whose reads the stream must record.
    #[cfg(feature = "cudarc")]
    Cudarc(&'a (dyn crate::backend::Tracked + 'a)),
}

/// Device memory of `T`s a call can borrow as a [`DeviceArray`]: cust's `DeviceSlice<T>` and
/// `DeviceBuffer<T>`, cudarc's `CudaSlice<T>` and `CudaView<T>`, for `T` i32 and f32.
///
/// # Safety
/// [`ArraySource::array`] gives the true address and capacity of memory usable in the GPU's
/// context that stays allocated while borrowed.
pub unsafe trait ArraySource<T> {
    /// The array.
    fn array(&self) -> DeviceArray<'_, T>;
}

/// The i32 arrays a call's layout borrows ([`DeviceIndex`]).
pub trait IndexSource: ArraySource<i32> {}
impl<M: ArraySource<i32> + ?Sized> IndexSource for M {}

impl<T> Clone for DeviceArray<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for DeviceArray<'_, T> {}

impl<'a, T> DeviceArray<'a, T> {
    /// The array `memory` holds.
    pub fn new<M: ArraySource<T> + ?Sized>(memory: &'a M) -> Self {
        memory.array()
    }

    /// An array given by address and length in elements, for the raw entry point
    /// ([`crate::Gpu::attention_forward_raw`]) and for planning.
    ///
    /// # Safety
    /// Launching a call that holds it (through any entry point) reads `len` values of `T` from
    /// `ptr`: they must lie in one live allocation usable in the GPU's context, untouched by
    /// other work until the stream has passed the kernel. Planning alone reads nothing.
    pub unsafe fn from_raw(ptr: u64, len: usize) -> DeviceArray<'static, T> {
        DeviceArray::untracked(BufferRef { ptr, len })
    }

    pub(crate) fn untracked(buf: BufferRef) -> Self {
        DeviceArray { buf, source: Source::Untracked(PhantomData), element: PhantomData }
    }

    #[cfg(feature = "cudarc")]
    pub(crate) fn tracked(buf: BufferRef, memory: &'a (dyn crate::backend::Tracked + 'a)) -> Self {
        DeviceArray { buf, source: Source::Cudarc(memory), element: PhantomData }
    }

    #[cfg_attr(not(feature = "cudarc"), allow(dead_code))]
    pub(crate) fn source(&self) -> Source<'a> {
        self.source
    }

    /// Device address and capacity (in elements).
    pub fn buffer(&self) -> BufferRef {
        self.buf
    }
}

impl<T> std::fmt::Debug for DeviceArray<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceArray").field("ptr", &format_args!("{:#x}", self.buf.ptr)).field("len", &self.buf.len).finish()
    }
}

/// Two arrays are equal when they are the same memory.
impl<T> PartialEq for DeviceArray<'_, T> {
    fn eq(&self, other: &Self) -> bool {
        self.buf == other.buf
    }
}

impl<T> Eq for DeviceArray<'_, T> {}

/// How a call's query rows (and, for tensors, key rows) are stored.
#[non_exhaustive]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Rows<'a> {
    /// `batch` sequences of `seqlen_q` query and `seqlen_k` key rows each, in `[batch, seqlen,
    /// heads, head_dim]` tensors.
    #[default]
    Batched,
    /// Variable-length sequences packed into `[total, heads, head_dim]` tensors, as
    /// `flash_attn_varlen_func` takes them; see [`Offsets`].
    Packed(Offsets<'a>),
}

/// The sequence offsets of a variable-length call: sequence `b` owns query rows
/// `cu_seqlens_q[b]..cu_seqlens_q[b + 1]` and key rows `cu_seqlens_k[b]..cu_seqlens_k[b + 1]`
/// of the packed tensors.
///
/// In a variable-length call [`AttentionParams::batch`](crate::AttentionParams::batch) is the
/// number of sequences and `seqlen_q` / `seqlen_k` are `max_seqlen_q` / `max_seqlen_k` (the grid
/// covers `batch * heads_q * ceil(max_seqlen_q / block_m)` CTAs; those past their sequence exit
/// at once), the strides' `batch` fields are ignored, causal masking aligns to each sequence's
/// own bottom-right corner, and the log-sum-exp is f32 `[heads_q, total_q]`
/// (FlashAttention-2's varlen layout).
///
/// With a paged K/V cache ([`Kv::Paged`]) only the query rows are packed: a sequence's key
/// count is its `seqused_k` entry when the cache has one, else `cu_seqlens_k[b + 1] -
/// cu_seqlens_k[b]` when key offsets are given, else `seqlen_k`.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Offsets<'a> {
    /// Offsets on the host: the planner validates them (`batch + 1` entries each, starting at
    /// 0, non-decreasing, no sequence longer than the maxima, the totals within the buffers)
    /// and each launch uploads them itself (in a small kernel's launch parameters, so the
    /// launch neither waits for the stream nor breaks a graph capture).
    Host {
        /// `batch + 1` query row offsets: `0, len_0, len_0 + len_1, ..., total_q`.
        cu_seqlens_q: Vec<i32>,
        /// `batch + 1` key row offsets (paged calls: empty, or the sequences' key counts as
        /// differences).
        cu_seqlens_k: Vec<i32>,
    },
    /// Offsets already on the GPU (as serving engines keep them). The planner cannot read
    /// them, so the kernels clamp each sequence into the packed rows (`start <= end <= total`)
    /// and to the maxima: wrong offsets give wrong rows (or rows left unwritten), never an
    /// access outside the buffers.
    Device(DeviceOffsets<'a>),
}

/// Offsets on the GPU ([`Offsets::Device`]), as `flash_attn_varlen_func(q, k, v, cu_seqlens_q,
/// cu_seqlens_k, ...)` takes them: [`DeviceOffsets::new`] with the query offsets, then
/// [`DeviceOffsets::keys`] (paged calls may leave the keys out).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceOffsets<'a> {
    /// i32 `[batch + 1]` query row offsets.
    pub cu_seqlens_q: DeviceIndex<'a>,
    /// i32 `[batch + 1]` key row offsets; `None` only in paged calls.
    pub cu_seqlens_k: Option<DeviceIndex<'a>>,
    /// Packed query rows: the row count of Q, the output and the log-sum-exp (`q.shape[0]`).
    pub total_q: usize,
    /// Packed key/value rows (`k.shape[0]`); ignored by paged calls.
    pub total_k: usize,
}

impl<'a> DeviceOffsets<'a> {
    /// `cu_seqlens_q` (i32 `[batch + 1]`) and `total_q`, the packed query rows (`q.shape[0]`);
    /// no key offsets.
    pub fn new(cu_seqlens_q: DeviceIndex<'a>, total_q: usize) -> Self {
        DeviceOffsets { cu_seqlens_q, cu_seqlens_k: None, total_q, total_k: 0 }
    }

    /// Adds `cu_seqlens_k` (i32 `[batch + 1]`) and `total_k`, the packed key rows (`k.shape[0]`).
    pub fn keys(mut self, cu_seqlens_k: DeviceIndex<'a>, total_k: usize) -> Self {
        self.cu_seqlens_k = Some(cu_seqlens_k);
        self.total_k = total_k;
        self
    }
}

impl Offsets<'_> {
    /// Total packed query rows (host offsets: the last one, 0 when there are none).
    pub fn total_q(&self) -> usize {
        match self {
            Offsets::Host { cu_seqlens_q, .. } => cu_seqlens_q.last().map_or(0, |&x| x.max(0) as usize),
            Offsets::Device(d) => d.total_q,
        }
    }

    /// Total packed key/value rows.
    pub fn total_k(&self) -> usize {
        match self {
            Offsets::Host { cu_seqlens_k, .. } => cu_seqlens_k.last().map_or(0, |&x| x.max(0) as usize),
            Offsets::Device(d) => d.total_k,
        }
    }

    /// Each sequence's (query rows, key rows) where the host knows them: host offsets with key
    /// offsets of the same count; `None` otherwise.
    pub fn lengths(&self) -> Option<Vec<(usize, usize)>> {
        let Offsets::Host { cu_seqlens_q, cu_seqlens_k } = self else { return None };
        let d = |c: &[i32]| c.windows(2).map(|w| (w[1] as i64 - w[0] as i64).max(0) as usize).collect::<Vec<_>>();
        (cu_seqlens_k.len() == cu_seqlens_q.len()).then(|| d(cu_seqlens_q).into_iter().zip(d(cu_seqlens_k)).collect())
    }
}

/// Where K and V come from.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Kv<'a> {
    /// `[batch, seqlen_k, heads_kv, head_dim]` tensors (packed `[total_k, heads_kv, head_dim]`
    /// in a variable-length call).
    #[default]
    Tensors,
    /// A paged cache; see [`PagedKv`].
    Paged(PagedKv<'a>),
}

/// The page geometry of a paged K/V cache: K and V each `[num_pages, page_size, heads_kv,
/// head_dim]`, sequence `b`'s key row `r` in page `block_table[b][r / page_size]` at row `r %
/// page_size`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pages {
    /// Rows (tokens) per page: a power of two from 16 to 2^20.
    pub page_size: usize,
    /// Pages in each of the K and V caches.
    pub num_pages: usize,
    /// Entries per block-table row: the most pages one sequence may hold.
    pub pages_per_seq: usize,
}

impl Pages {
    /// Caches sized for `batch` sequences of up to `seqlen_k` keys each: `ceil(seqlen_k /
    /// page_size)` pages per sequence (at least one), `batch` times that many pages; `None`
    /// when `page_size` is 0 or the count overflows.
    pub fn for_batch(batch: usize, seqlen_k: usize, page_size: usize) -> Option<Self> {
        if page_size == 0 {
            return None;
        }
        let pages_per_seq = seqlen_k.div_ceil(page_size).max(1);
        Some(Pages { page_size, num_pages: batch.checked_mul(pages_per_seq)?, pages_per_seq })
    }

    /// Elements each of the K and V caches holds, contiguous: `num_pages * page_size * heads_kv
    /// * head_dim` (`None` on overflow).
    pub fn cache_len(&self, heads_kv: usize, head_dim: usize) -> Option<usize> {
        self.num_pages.checked_mul(self.page_size)?.checked_mul(heads_kv)?.checked_mul(head_dim)
    }
}

/// A paged K/V cache (as `flash_attn_with_kvcache` with a block table, and vLLM): its pages and
/// the index arrays the kernels read.
///
/// In a paged call [`AttentionParams::seqlen_k`](crate::AttentionParams::seqlen_k) is the longest
/// sequence's key count (at most `pages_per_seq * page_size`), the K/V strides' `batch` fields
/// are the strides between pages, and causal masking aligns to each sequence's own
/// bottom-right corner. Table entries and key counts live on the GPU, so the kernel clamps them
/// (page indices to `0..num_pages`, counts to `0..=seqlen_k`): a wrong entry gives wrong
/// numbers, never an access outside the caches or the table. A page's rows past its
/// sequence's key count never reach the output, whatever they hold (NaN included). Decode
/// calls (and split ones) run on the `mma.sync` kernels; on an H100/H200 prefill chunks run on
/// the Hopper kernels, which read pages in TMA boxes. Made with [`PagedKv::new`].
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PagedKv<'a> {
    /// The page geometry.
    pub pages: Pages,
    /// i32 `[batch, pages_per_seq]`: sequence `b`'s `i`-th page.
    pub block_table: DeviceIndex<'a>,
    /// i32 `[batch]`: each sequence's key count (FlashAttention's `cache_seqlens`), or `None`
    /// for `seqlen_k` keys in every sequence.
    pub seqused_k: Option<DeviceIndex<'a>>,
}

impl<'a> PagedKv<'a> {
    /// A cache of `pages` read through `block_table` (i32 `[batch, pages_per_seq]`), every
    /// sequence holding `seqlen_k` keys.
    pub fn new(pages: Pages, block_table: DeviceIndex<'a>) -> Self {
        PagedKv { pages, block_table, seqused_k: None }
    }

    /// Each sequence's key count (i32 `[batch]`, FlashAttention's `cache_seqlens`).
    pub fn seqused_k(mut self, seqused_k: DeviceIndex<'a>) -> Self {
        self.seqused_k = Some(seqused_k);
        self
    }
}

/// The shape of a call: its rows and its K/V source (see the module docs).
#[non_exhaustive]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout<'a> {
    /// How the query rows are stored.
    pub rows: Rows<'a>,
    /// Where K and V come from.
    pub kv: Kv<'a>,
}

impl<'a> Layout<'a> {
    /// The GPU index arrays the kernel reads: device offsets, a block table, key counts.
    pub fn device_indices(&self) -> impl Iterator<Item = DeviceIndex<'a>> {
        let offsets = match &self.rows {
            Rows::Packed(Offsets::Device(d)) => [Some(d.cu_seqlens_q), d.cu_seqlens_k],
            _ => [None, None],
        };
        let pages = match &self.kv {
            Kv::Paged(p) => [Some(p.block_table), p.seqused_k],
            Kv::Tensors => [None, None],
        };
        offsets.into_iter().chain(pages).flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_for_a_batch_hold_every_key_and_refuse_overflow() {
        let p = Pages::for_batch(3, 100, 16).unwrap();
        assert_eq!((p.pages_per_seq, p.num_pages), (7, 21));
        assert_eq!(Pages::for_batch(2, 0, 16).unwrap().pages_per_seq, 1);
        assert_eq!(Pages::for_batch(2, 16, 16).unwrap().pages_per_seq, 1);
        assert_eq!(Pages::for_batch(2, 17, 16).unwrap().pages_per_seq, 2);
        assert_eq!(Pages::for_batch(1, 5, 16).unwrap().pages_per_seq, 1);
        assert!(Pages::for_batch(2, 10, 0).is_none());
        assert!(Pages::for_batch(usize::MAX, 100, 16).is_none());
        assert_eq!(p.cache_len(4, 128), Some(21 * 16 * 4 * 128));
        assert!(Pages { page_size: 1 << 20, num_pages: usize::MAX / 2, pages_per_seq: 1 }.cache_len(8, 8).is_none());
    }
}
