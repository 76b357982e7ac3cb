//! Block sparsity: the key blocks a query block visits, read from a block mask in
//! FlexAttention's form ([`BlockSparse`]) rather than derived from the mask's key span.
//!
//! A block-sparse kernel (its mask has [`crate::mods::MaskMod::BLOCKS`]) walks, for a launch
//! with a block mask, the blocks of its query block's lists, each [`SPARSE_BLOCK`] keys in
//! `SPARSE_BLOCK / BN` key tiles. The lists are the caller's device arrays, unchecked: counts
//! clamp to `0..=kv_blocks` and indices to `kv_blocks` (a negative one, as u32, too), which
//! the host makes at least the sequences' key blocks: an index past them lands on a block
//! past every key, which every row's bounds mask whole (its rows are zeros from TMA, or the
//! next sequence's, or not copied at all). Duplicate indices count their keys twice, as
//! FlexAttention's would.
//!
//! A [`KeyBlocks`] holds only the query block's place in the arrays and its counts; the
//! array addresses and `kv_blocks` stay in the launch parameters (constant memory), so that
//! the Hopper producer's thread, with few registers, walks the lists.
use flashrs_abi::params::{BlockSparse, SPARSE_BLOCK};

/// The key blocks one query block visits: its partial blocks, then its full ones.
#[derive(Clone, Copy)]
pub struct KeyBlocks {
    /// The query block's first index entry in either index array.
    first: u32,
    n_partial: u32,
    /// Partial and full blocks together.
    n: u32,
}

impl KeyBlocks {
    /// The lists of query block `q_block` of (`batch`, query head `head`) in block mask `b`.
    #[inline(always)]
    pub fn new(b: &BlockSparse, batch: u32, head: u32, q_block: u32) -> Self {
        Self::of_row(b, batch * b.batch_stride + head * b.head_stride + q_block)
    }

    /// The lists of row `row` of block mask `b`'s count arrays.
    #[inline(always)]
    pub fn of_row(b: &BlockSparse, row: u32) -> Self {
        // SAFETY: the host sized the count arrays for every (batch, head, query block) of the
        // launch through these strides. (`max`/`min` rather than `clamp`, whose panic on
        // reversed bounds formats them.)
        let count = |a: u64| if a == 0 { 0 } else { (unsafe { *(a as *const i32).add(row as usize) }.max(0) as u32).min(b.kv_blocks) };
        let n_partial = count(b.counts);
        KeyBlocks { first: row * b.kv_blocks, n_partial, n: n_partial + count(b.full_counts) }
    }

    /// Key blocks visited (partial and full).
    #[inline(always)]
    pub fn len(&self) -> u32 {
        self.n
    }

    /// Key tiles of `BN` keys visited.
    #[inline(always)]
    pub fn tiles<const BN: usize>(&self) -> u32 {
        self.n * (SPARSE_BLOCK / BN as u32)
    }

    /// The key block of visit `j` (`< n`) of block mask `b` (the one this was made from),
    /// clamped to `kv_blocks` (see the module docs).
    #[inline(always)]
    pub fn block(&self, b: &BlockSparse, j: u32) -> u32 {
        let (list, j) = if j < self.n_partial { (b.indices, j) } else { (b.full_indices, j - self.n_partial) };
        // SAFETY: `j` is below the list's count, at most its `kv_blocks` entries.
        let idx = unsafe { *(list as *const i32).add((self.first + j) as usize) };
        (idx as u32).min(b.kv_blocks)
    }

    /// First key of key tile `t` (`< tiles`) of `BN` keys: tile `t % (SPARSE_BLOCK / BN)` of
    /// the block of visit `t / (SPARSE_BLOCK / BN)`.
    #[inline(always)]
    pub fn key0<const BN: usize>(&self, b: &BlockSparse, t: u32) -> u32 {
        const { assert!(BN > 0 && SPARSE_BLOCK as usize % BN == 0) };
        let sub = SPARSE_BLOCK / BN as u32;
        self.block(b, t / sub) * SPARSE_BLOCK + (t % sub) * BN as u32
    }
}
