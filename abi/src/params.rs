//! Launch parameters of the forward kernels: the one `#[repr(C)]` struct every forward entry
//! point takes by value (the Hopper ones after their three tensor maps).

/// Everything one forward launch needs, passed by value as the kernel's only parameter.
///
/// Tensors are `[batch, seqlen, heads, head_dim]` with explicit strides in elements (the last
/// dimension contiguous). `lse`, when non-null, is f32 `[batch, heads_q, seqlen_q]`, contiguous.
///
/// Variable-length launches (`flash_fwd_varlen_*`) read each sequence's first row and length
/// from `cu_seqlens_q` / `cu_seqlens_k` (`batch + 1` i32 offsets into the packed rows; batch
/// strides unused), `seqlen_q`/`seqlen_k` are then the maxima, and `lse` is f32
/// `[heads_q, total_q]`. The offsets may come unchecked from the caller's device memory: the
/// kernels clamp every sequence into `0..total_q` / `0..total_k` and to the maxima (see
/// [`crate::grid::Extent::varlen`]), so no offset sends a read or write outside the packed
/// tensors. Split and paged variable-length launches (`flash_fwd_varlen_split_*`,
/// `flash_fwd_varlen_paged_*`) keep their split workspace rows at the longest sequence's
/// `seqlen_q` per (batch, head). Paged variable-length launches take only the query
/// rows from `cu_seqlens_q`; a sequence's key count comes from `seqused_k` when non-null, else
/// from `cu_seqlens_k` when non-null (`cu_seqlens_k[b + 1] - cu_seqlens_k[b]`), else it is
/// `seqlen_k`, and its keys from its block-table row. Split-KV launches (`flash_fwd_split_*`) run `num_splits` CTAs per
/// query block, each over `split_tiles` K/V tiles, and write f32 partial outputs
/// (`[num_splits, batch * heads_q, seqlen_q, D]`, `D` the kernel's padded V head dimension) and
/// their log-sum-exps (`[num_splits, batch * heads_q, seqlen_q]`) to `o_accum` / `lse_accum`;
/// the last split of each query block to finish (counted at `split_counters`) merges them into
/// `o` and `lse`. Paged launches (`flash_fwd_paged_*`,
/// split-capable: with `num_splits == 1` they write `o` and `lse` directly) read K and V from
/// `[num_pages, page_size, heads_kv, D]` caches (the batch strides are the page strides) through
/// the i32 block table `[batch, table_stride]`, and take each sequence's key count from
/// `seqused_k` when it is non-null. The plain kernels ignore these fields.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FwdParams {
    /// Device address of Q.
    pub q: u64,
    /// Device address of K.
    pub k: u64,
    /// Device address of V.
    pub v: u64,
    /// Device address of the output.
    pub o: u64,
    /// Device address of the log-sum-exp output, or 0 for none.
    pub lse: u64,
    /// Q strides (batch, row, head) in elements.
    pub q_strides: [i64; 3],
    /// K strides (batch, row, head) in elements.
    pub k_strides: [i64; 3],
    /// V strides (batch, row, head) in elements.
    pub v_strides: [i64; 3],
    /// Output strides (batch, row, head) in elements.
    pub o_strides: [i64; 3],
    /// Batch size.
    pub batch: u32,
    /// Query heads.
    pub heads_q: u32,
    /// Query heads per key/value head (GQA group size; 1 for plain multi-head attention).
    pub group: u32,
    /// Query rows per sequence.
    pub seqlen_q: u32,
    /// Key/value rows per sequence.
    pub seqlen_k: u32,
    /// Head dimension of Q and K actually present (a multiple of 8, at most the kernel's
    /// padded one).
    pub head_dim: u32,
    /// Softmax scale times log2(e): scores are exponentiated with `ex2`.
    pub scale_log2: f32,
    /// 1 for causal masking aligned to the bottom-right corner, 0 for none.
    pub causal: u32,
    /// Query-row blocks per (batch, head): the grid is `batch * heads_q * m_blocks` CTAs.
    pub m_blocks: u32,
    /// Split-KV: CTAs per query block (1 otherwise).
    pub num_splits: u32,
    /// Variable-length: device address of the `batch + 1` i32 query offsets (0 otherwise).
    pub cu_seqlens_q: u64,
    /// Variable-length: device address of the `batch + 1` i32 key offsets (0 otherwise).
    pub cu_seqlens_k: u64,
    /// Split-KV: device address of the f32 partial outputs (0 otherwise).
    pub o_accum: u64,
    /// Split-KV: device address of the f32 partial log-sum-exps (0 otherwise).
    pub lse_accum: u64,
    /// Split-KV: device address of one u32 arrival counter per query block (the grid's CTAs
    /// over `num_splits`), zero at launch (0 otherwise).
    pub split_counters: u64,
    /// Variable-length: total packed query rows (the row count of `lse`'s `[heads_q, total_q]`).
    pub total_q: u32,
    /// Variable-length: total packed key/value rows (paged: any value; the cache's pages bound
    /// the keys).
    pub total_k: u32,
    /// Split-KV: K/V tiles (of the kernel's block_n rows) each split covers.
    pub split_tiles: u32,
    /// Head dimension of V and the output actually present (a multiple of 8, at most the
    /// kernel's padded V dimension; `head_dim` unless V's heads differ from K's). The kernels
    /// zero-fill V's columns past it, as Q's and K's past `head_dim`, and write only these
    /// output columns.
    pub head_dim_v: u32,
    /// Paged: device address of the i32 block table `[batch, table_stride]` (0 otherwise).
    pub block_table: u64,
    /// Paged: device address of the i32 per-sequence key counts (`[batch]`), or 0 when every
    /// sequence has `seqlen_k` keys.
    pub seqused_k: u64,
    /// Paged: entries per block-table row.
    pub table_stride: u32,
    /// Paged: log2 of the rows per page.
    pub page_shift: u32,
    /// Paged: the last valid page index (`num_pages - 1`); table entries are clamped to it, so
    /// no table content can send a read outside the caches.
    pub last_page: u32,
    /// Causal launches: the query blocks of this many consecutive (batch, head) pairs share
    /// one heaviest-first order in the grid (0 or 1: each pair's blocks on their own; see
    /// [`crate::grid::tile_for_block`]).
    pub interleave: u32,
    /// Hopper persistent launches: device address of two u32 counters, zero at launch (the
    /// next work tile to claim, less the grid size, and the CTAs done claiming; the last CTA
    /// zeroes both again), so that CTAs take work tiles as they free up; 0: each CTA walks
    /// every grid-size-th tile (see the device crate's `hopper::scheduler`).
    pub tile_counter: u64,
    /// What the modification kernels (`flash_fwd_*mods_*`) compute beyond plain attention;
    /// the other kernels ignore it.
    pub mods: ModParams,
    /// FP8 kernels (`flash_fwd_*_e4m3_*`, `*_e5m2_*`): the dequantization factors of K, V and,
    /// where the queries are FP8 too, Q ([`Descales`]); the other kernels ignore it.
    pub descale: Descales,
}

impl FwdParams {
    /// Paged launches: sequence `batch`'s block-table row (`table_stride` i32 entries).
    #[inline(always)]
    pub fn table_row(&self, batch: u32) -> *const i32 {
        (self.block_table as *const i32).wrapping_add(batch as usize * self.table_stride as usize)
    }

    /// Paged launches: the page a block-table entry names, clamped to the last page (a
    /// negative entry wraps to a huge index, which the clamp catches like any other), so that
    /// no table content sends a read outside the caches.
    #[inline(always)]
    pub fn page_of(&self, entry: i32) -> u32 {
        (entry as u32).min(self.last_page)
    }
}

/// The factors that turn FP8 tensors' stored values into K's, V's and Q's (as
/// FlashAttention-3's `k_descale` / `v_descale` / `q_descale`): for each (sequence, K/V head),
/// `scale[i]` (0: K, 1: V, 2: Q) times the f32 at `ptrs[i] + batch * batch_strides[i] +
/// head_kv` when `ptrs[i]` is non-zero.
///
/// The kernels fold K's and Q's factors into the softmax scale and V's into the output, so a
/// factor costs nothing per element; each is uniform over a (sequence, K/V head).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Descales {
    /// Device addresses of the f32 per-(sequence, head) factors of K, V and Q, or 0 for none.
    pub ptrs: [u64; 3],
    /// Factors of K, V and Q for every (sequence, head), multiplied into the per-head ones.
    pub scale: [f32; 3],
    /// Entries between sequences in each array: `heads_kv` for `[batch, heads_kv]` factors, 0
    /// for one per head shared by every sequence.
    pub batch_strides: [u32; 3],
}

impl Descales {
    /// Stored values are K's, V's and Q's.
    pub const NONE: Descales = Descales { ptrs: [0; 3], scale: [1.0; 3], batch_strides: [0; 3] };

    /// The factor of tensor `i` (0: K, 1: V, 2: Q) for sequence `batch`, K/V head `head_kv`
    /// (one load where an array is present).
    ///
    /// # Safety
    /// A non-zero address holds the entry this (sequence, head) reads.
    #[inline(always)]
    pub unsafe fn factor(&self, i: usize, batch: u32, head_kv: u32) -> f32 {
        let at = batch as usize * self.batch_strides[i] as usize + head_kv as usize;
        if self.ptrs[i] == 0 { self.scale[i] } else { self.scale[i] * unsafe { *(self.ptrs[i] as *const f32).add(at) } }
    }

    /// The factors of K and V for sequence `batch`, K/V head `head_kv`.
    ///
    /// # Safety
    /// As [`Descales::factor`].
    #[inline(always)]
    pub unsafe fn factors(&self, batch: u32, head_kv: u32) -> [f32; 2] {
        unsafe { [self.factor(0, batch, head_kv), self.factor(1, batch, head_kv)] }
    }
}

impl Default for Descales {
    fn default() -> Self {
        Descales::NONE
    }
}

/// The attention modifications a `mods` kernel applies: a sliding window, a softcap, ALiBi
/// and sinks, each off at its neutral value, so that one kernel serves every combination.
///
/// Scores stay in raw units (`q . k`, before the softmax scale) through the kernels, so the
/// host folds the scale into each modification: the kernels compute
/// `s' = softcap_post * tanh(scale * s / cap) - alibi_scale * slope * |diag - key|` (the tanh
/// as `1 - 2 / (2^(softcap_pre * s) + 1)`) and mask keys outside the window, where
/// `diag = row + seqlen_k - seqlen_q` is the row's bottom-right-aligned diagonal.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModParams {
    /// Device address of the f32 ALiBi slopes (per query head, or per (batch, head): see
    /// [`ModParams::alibi_batch_stride`]), or 0 for none.
    pub alibi: u64,
    /// Device address of the f32 sink logits, one per query head (natural-log units of the
    /// scaled scores), or 0 for none.
    pub sinks: u64,
    /// Keys before the diagonal a row sees, at most [`WINDOW_UNBOUNDED`] (which bounds nothing).
    pub window_left: i32,
    /// Keys after the diagonal a row sees (0 under causal masking, which the host folds in
    /// here), at most [`WINDOW_UNBOUNDED`].
    pub window_right: i32,
    /// `2 log2(e) scale / cap`: the raw score's factor in the exponent of the softcap's tanh; 0
    /// for no softcap.
    pub softcap_pre: f32,
    /// `cap / scale`: the tanh's factor, back in raw units.
    pub softcap_post: f32,
    /// `1 / scale`: turns a slope (in scaled units) into raw units.
    pub alibi_scale: f32,
    /// Slopes between batch entries: `heads_q` for `[batch, heads_q]` slopes, 0 for one per
    /// head.
    pub alibi_batch_stride: u32,
    /// Block sparsity: the key blocks each query block visits ([`BlockSparse::NONE`]: all
    /// those the window lets through).
    pub blocks: BlockSparse,
    /// Device address of the data a caller's own modification reads (a kernel built on the
    /// device crate's bodies with its own `ScoreMod` or `MaskMod`), or 0. The shipped kernels
    /// never read it.
    pub user: u64,
}

/// Rows and keys of one block of a block mask: a query block is the modification kernels'
/// query tile, and a key block a whole number of their key tiles.
pub const SPARSE_BLOCK: u32 = 128;

/// A block mask in FlexAttention's form: for each (batch entry, query head, query block of
/// [`SPARSE_BLOCK`] rows), the count and the indices of the key blocks ([`SPARSE_BLOCK`] keys)
/// it visits, as two lists: partial blocks, then full ones. Each list is an i32 count array
/// (one entry per query block) and an i32 index array (`kv_blocks` entries per query block, the
/// first `count` used). A kernel visits the partial blocks, then the full ones, and masks every
/// visited block by the window (and causal masking, and the sequence's end) as it would
/// without a block mask: the lists decide which blocks are computed, the element masks which
/// of their scores count.
///
/// The arrays may come unchecked from the caller's device memory: the kernels clamp counts
/// to `0..=kv_blocks` and indices to `kv_blocks`, which must be at least the key blocks of the
/// longest sequence and at most `i32::MAX / SPARSE_BLOCK` (an index past a sequence's blocks,
/// or negative, visits a block of no key), so no entry sends a read outside the arrays or the
/// tensors.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockSparse {
    /// Device address of the partial blocks' counts, or 0 for no block mask (a block-sparse
    /// kernel then visits every key tile the window lets through).
    pub counts: u64,
    /// Device address of the partial blocks' indices.
    pub indices: u64,
    /// Device address of the full blocks' counts, or 0 for no full blocks.
    pub full_counts: u64,
    /// Device address of the full blocks' indices.
    pub full_indices: u64,
    /// Query blocks between batch entries in the count arrays (0: one mask for every entry).
    pub batch_stride: u32,
    /// Query blocks between query heads in the count arrays (0: one mask for every head).
    pub head_stride: u32,
    /// Index entries per query block.
    pub kv_blocks: u32,
    /// Unused (keeps the struct's size a multiple of its alignment without implicit padding).
    pub _pad: u32,
}

impl BlockSparse {
    /// No block mask.
    pub const NONE: BlockSparse =
        BlockSparse { counts: 0, indices: 0, full_counts: 0, full_indices: 0, batch_stride: 0, head_stride: 0, kv_blocks: 0, _pad: 0 };
}

/// Threads of the device crate's `block_mask_from_dense` CTA.
pub const DENSE_BLOCK_MASK_THREADS: u32 = 256;

/// The parameters of the device crate's `block_mask_from_dense` kernel, which builds a block
/// mask ([`BlockSparse`]'s lists, both of them) from a dense boolean mask on the GPU: one CTA
/// of [`DENSE_BLOCK_MASK_THREADS`] per (batch entry, head, query block), `rows` of them in all.
/// A block of [`SPARSE_BLOCK`] rows and keys with no set byte is skipped, one with every byte
/// set (of the rows and keys that exist) is full, others partial; each list ascends, its
/// unused entries 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DenseBlockMask {
    /// Device address of the dense mask, `[rows / q_blocks, seqlen_q, seqlen_k]` bytes
    /// (batch entries and heads flattened; nonzero: the row sees the key).
    pub dense: u64,
    /// Device address of the partial blocks' counts, `[rows]` i32.
    pub counts: u64,
    /// Device address of the partial blocks' indices, `[rows, kv_blocks]` i32.
    pub indices: u64,
    /// Device address of the full blocks' counts.
    pub full_counts: u64,
    /// Device address of the full blocks' indices.
    pub full_indices: u64,
    /// Query rows per (batch entry, head).
    pub seqlen_q: u32,
    /// Keys per (batch entry, head).
    pub seqlen_k: u32,
    /// Query blocks per (batch entry, head): `max(1, ceil(seqlen_q / SPARSE_BLOCK))`.
    pub q_blocks: u32,
    /// Key blocks, and index entries per query block: `max(1, ceil(seqlen_k / SPARSE_BLOCK))`.
    pub kv_blocks: u32,
}

/// A window side that bounds nothing: no row reaches this far (sequences are at most
/// `i32::MAX / 2` rows), and `row + seqlen_k + WINDOW_UNBOUNDED` stays within 32 bits.
pub const WINDOW_UNBOUNDED: i32 = i32::MAX / 2;

impl Default for ModParams {
    fn default() -> Self {
        ModParams::NONE
    }
}

impl ModParams {
    /// Plain attention: no window, softcap, ALiBi or sinks.
    pub const NONE: ModParams = ModParams {
        alibi: 0,
        sinks: 0,
        window_left: WINDOW_UNBOUNDED,
        window_right: WINDOW_UNBOUNDED,
        softcap_pre: 0.0,
        softcap_post: 0.0,
        alibi_scale: 0.0,
        alibi_batch_stride: 0,
        blocks: BlockSparse::NONE,
        user: 0,
    };
}
