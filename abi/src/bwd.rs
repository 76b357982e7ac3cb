//! The backward pass's contract: its launch parameters ([`BwdParams`]) and the tile
//! configurations its `mma.sync` kernel is instantiated for ([`BwdConfig`], [`BWD_CONFIGS`]).
//!
//! A backward call is three launches on one stream, each taking [`BwdParams`] by value:
//!
//! 1. `flash_bwd_prep_*`: per (query row, head), `dsum = dot(dO, O)` (f32, the log-sum-exp's
//!    layout), and zeroes the row's f32 dQ accumulator and, in deterministic mode, the dQ
//!    semaphores.
//! 2. `flash_bwd_*` (the main kernel): one CTA per (batch, K/V head, key block). It keeps its
//!    keys' dK and dV in registers while walking every query block of every query head of its
//!    GQA group, recomputing `P = exp(scale * Q K^T - lse)`; it adds `dS K` to the dQ
//!    accumulator (f32 atomics; in deterministic mode in key-block order, see
//!    [`BwdParams::dq_semaphore`]) and writes dK and dV at the end: summed over the group
//!    without copies of K or V, and deterministic by construction.
//! 3. `flash_bwd_dq_*`: dQ = scale * accumulator, rounded to the element type; and, when asked
//!    for ([`BwdParams::dsinks`]), the gradient of the sink logits.
//!
//! On sm_90a the main kernel may be the Hopper one (`flash_bwd_sm90_*`, [`BwdSm90Config`]),
//! which keeps its dQ accumulator in wgmma fragment order ([`AccumLayout::Fragments`]) and is
//! followed by its own dQ kernel (`flash_bwd_dq_frag_*`).
use crate::params::FwdParams;

/// Everything one backward launch needs, passed by value as each backward kernel's only
/// parameter.
///
/// `fwd` describes the forward call whose gradients are taken, exactly as the forward kernels
/// saw it (Q, K, V, O, the log-sum-exp, strides, lengths, scale, masking, variable-length
/// offsets); its `o` is O and its `lse` the forward's log-sum-exp, both read here. The
/// gradients have their own strides (in elements, `(batch, row, head)`, the last dimension
/// contiguous): dO is laid out like O, dQ like Q, dK and dV like K and V.
///
/// The workspace holds the f32 dQ accumulator ([`BwdParams::accum_len`] values, in one of two
/// layouts, see [`AccumLayout`]), then the per-row statistics the prep kernel writes (the f32
/// `dsum`, laid out as the accumulator layout says); and in deterministic mode one u32
/// semaphore per (batch, query head, query block).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BwdParams {
    /// The forward call (see above).
    pub fwd: FwdParams,
    /// Device address of dO, the loss's gradient with respect to the output.
    pub dout: u64,
    /// Device address of dQ (written).
    pub dq: u64,
    /// Device address of dK (written).
    pub dk: u64,
    /// Device address of dV (written).
    pub dv: u64,
    /// dO strides (batch, row, head) in elements.
    pub dout_strides: [i64; 3],
    /// dQ strides (batch, row, head) in elements.
    pub dq_strides: [i64; 3],
    /// dK strides (batch, row, head) in elements.
    pub dk_strides: [i64; 3],
    /// dV strides (batch, row, head) in elements.
    pub dv_strides: [i64; 3],
    /// Device address of the f32 dQ accumulator (see [`AccumLayout`]).
    pub dq_accum: u64,
    /// Values in the dQ accumulator (the prep kernel zeroes them all).
    pub accum_len: u64,
    /// Device address of the per-row statistics: the f32 `dot(dO, O)` of each log-sum-exp row,
    /// and with [`AccumLayout::Fragments`] beside it the row's log-sum-exp base (see there).
    pub dsum: u64,
    /// Deterministic mode: device address of one u32 per (batch, query head, query block),
    /// `[batch * heads_q, m_blocks]` (with [`AccumLayout::Fragments`], one per
    /// [`FragmentBlocks`] block), zeroed by the prep kernel; each key block adds its dQ
    /// part to a query block only after the key blocks before it have (and counts itself), so
    /// the accumulator sums in one order every run. 0: atomics in any order.
    pub dq_semaphore: u64,
    /// The softmax scale itself (dQ and dK are scaled by it).
    pub scale: f32,
    /// The main kernel's padded head dimension: the dQ accumulator's row length.
    pub accum_dim: u32,
    /// Key blocks per (batch, K/V head): the main kernel's grid is `batch * heads_kv *
    /// n_blocks` CTAs, key blocks fastest.
    pub n_blocks: u32,
    /// Query rows the prep and dQ kernels cover per head ([`BwdParams::row_lanes`] lanes per
    /// (row, head)): with [`AccumLayout::Rows`] `batch * seqlen_q`, or `total_q` for variable-length
    /// launches; with [`AccumLayout::Fragments`] `batch * m_blocks * block_m`, each sequence's
    /// rows padded to the longest's steps.
    pub rows: u32,
    /// Device address of the f32 gradient of the sink logits (`[heads_q]`, written by the dQ
    /// kernel: `-sum over the head's rows of exp(sink - lse) * dot(dO, O)`), or 0 when not
    /// asked for. Needs [`FwdParams::mods`]' sinks. The main kernels need nothing for sinks:
    /// the log-sum-exp they recompute probabilities with already counts them.
    pub dsinks: u64,
    /// Block-sparse calls: the main kernel's walk, built from the block mask
    /// ([`crate::FwdParams::mods`]' `blocks`) by the two launches before it.
    pub lists: QueryLists,
}

impl BwdParams {
    /// Lanes the prep and dQ kernels give a (query row, head): [`bwd_row_lanes`] of the wider of
    /// the row's two widths, dQ's `head_dim` and dO's and O's `head_dim_v`.
    pub const fn row_lanes(&self) -> u32 {
        let (d, dv) = (self.fwd.head_dim, self.fwd.head_dim_v);
        bwd_row_lanes(if d > dv { d } else { dv })
    }
}

/// Threads of the `flash_bwd_sparse_lists_*` CTA: one warp.
pub const SPARSE_LISTS_THREADS: usize = 32;

/// A backward main kernel (`mma.sync` or Hopper) walks, for its key block, the query blocks
/// whose rows see it; a block mask lists the opposite way (per query block, its key blocks), so block-sparse calls
/// first turn the lists around, in two launches, into this workspace:
///
/// 1. `flash_bwd_sparse_bits_*`, one CTA per row of the mask's count arrays (a batch entry,
///    head and query block of it): the row's partial and full lists as one bitmap of `words`
///    u32 over its key blocks (bit `kb % 32` of word `kb / 32`; an index clamped to the
///    mask's `kv_blocks`, or listed twice, sets no bit or the same one).
/// 2. `flash_bwd_sparse_lists_*`, one CTA per (batch entry, K/V head, 32 key blocks of
///    [`crate::params::SPARSE_BLOCK`] keys): for each key block, the main kernel's query steps
///    of `block_m` rows that see it, over the group's query heads, as `(g << 16) | m` (query
///    head `h_kv * group + g`, step `m` of the sequence: its rows `m * block_m ..`), ordered by
///    `(g, m)`; only steps with rows in the sequence. In deterministic mode also each step's
///    turn: the key blocks before this one its query block's row lists.
///
/// A bitmap deduplicates, so a key block a row lists twice is visited once (the forward
/// counts its keys twice; the host's checks refuse such lists).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueryLists {
    /// Device address of the bitmaps (u32), `words` per row of the mask's count arrays.
    pub bits: u64,
    /// Device address of the step counts (u32), `[batch, heads_kv, kv_blocks]`; 0 when the
    /// call has no block mask.
    pub counts: u64,
    /// Device address of the steps (u32), `per_list` per count.
    pub entries: u64,
    /// Deterministic mode: device address of each step's turn (u32, as `entries`), or 0.
    pub turns: u64,
    /// u32 per bitmap: `ceil(kv_blocks / 32)` of the mask's `kv_blocks`.
    pub words: u32,
    /// Entries per list: the group's query heads times the main kernel's query steps.
    pub per_list: u32,
    /// Lists per (batch entry, K/V head): key blocks of the longest sequence.
    pub kv_blocks: u32,
    /// The main kernel's query rows per step, which divides `SPARSE_BLOCK`.
    pub block_m: u32,
}

impl QueryLists {
    /// Bound (exclusive) of each field of an entry: a query head's steps, and the query heads
    /// (the Hopper kernel's stage slots pack the head itself).
    pub const FIELD_END: u32 = 1 << 16;

    /// The list of (batch entry, K/V head) `bh`'s key block holding key `key0`: the index of its
    /// count; its entries start `per_list` times further.
    #[inline(always)]
    pub const fn list(&self, bh: u32, key0: u32) -> u32 {
        bh * self.kv_blocks + key0 / crate::params::SPARSE_BLOCK
    }

    /// The entry of step `m` of the group's query head `g` (each below [`Self::FIELD_END`]).
    #[inline(always)]
    pub const fn entry(g: u32, m: u32) -> u32 {
        g << 16 | m
    }

    /// `(g, m)` of an [`Self::entry`].
    #[inline(always)]
    pub const fn step(e: u32) -> (u32, u32) {
        (e >> 16, e & 0xffff)
    }

    /// Deterministic mode: the CTAs of `block_n` keys that add to a listed step's query block
    /// before the CTA of key block `key_block` (in units of `block_n`): those of the `listed`
    /// blocks of the mask before its own (the entry's turn), and of its own block the ones of
    /// lower keys.
    #[inline(always)]
    pub const fn turn(listed: u32, key_block: u32, block_n: u32) -> u32 {
        let per_block = crate::params::SPARSE_BLOCK / block_n;
        listed * per_block + key_block % per_block
    }
}

/// Dynamic shared memory of the dQ kernel when it writes [`BwdParams::dsinks`]: a slot per
/// warp of its CTA for the warps' partial sums.
pub const DSINKS_SMEM: usize = 4 * BWD_ROW_THREADS / 32;

/// How the f32 dQ accumulator is laid out; the dQ kernel that reads it matches the main kernel
/// that fills it.
///
/// * `Rows` (`mma.sync` kernels before sm_90a, and at head_dim 256): `accum_dim` values per
///   log-sum-exp row, in its order.
/// * `Fragments` (Hopper kernels, and sm_90a's `mma.sync` ones up to head_dim 128): per
///   64-row block of a (batch, query head)'s sequence ([`FragmentBlocks`]: padded per
///   sequence) and 64-column group of `accum_dim`, a chunk of 64 x 64 values in the order a
///   consumer warpgroup's `m64n64` wgmma accumulator holds them (which is also four 16-row
///   `mma.sync` tiles' order), so that a thread adds its four values of a 16 x 8 tile with one
///   16-byte reduction and a warp 512 contiguous bytes: value (row `r`,
///   column `c`) of a chunk is at `(x / 4) * 512 + thread * 4 + x % 4`, where `thread =
///   32 (r / 16) + 4 (r % 8) + (c % 8) / 2` and `x = 4 (c / 8) + 2 ((r / 8) % 2) + c % 2`
///   ([`AccumLayout::fragment_index`]); chunks are ordered as [`AccumLayout::fragment_chunk`]
///   says.
///
/// After the launch's blocks, `Fragments` has one padding block of accumulator chunks, which
/// the `mma.sync` kernel's 128-row steps add their rows past a sequence to (zeros; nothing
/// reads them), where another sequence's or head's block would lie.
///
/// The layout also sets where the prep kernel leaves each row's statistics ([`BwdParams::dsum`]):
/// with `Rows` the `dsum` in the log-sum-exp's order (`[batch, heads_q, seqlen_q]`, or
/// `[heads_q, total_q]` for variable-length launches); with `Fragments` per block
/// ([`FragmentBlocks`]) 128 f32, the rows' `-lse * log2 e` (`-inf` for a row that saw no key) and then
/// their `dsum`, with the block's rows past `seqlen_q` at `-inf` and 0
/// ([`AccumLayout::fragment_stats`]), and after the launch's blocks one padding block (all
/// `-inf` and 0): 512 aligned bytes per 64 rows of a step, which the Hopper kernel's producer
/// copies into shared memory beside the step's Q and dO, and whose padding makes the padding
/// rows' probabilities 0 without a bounds check (a 128-row step's second 64 rows past the
/// sequence read the padding block).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AccumLayout {
    /// One row per log-sum-exp row.
    Rows,
    /// wgmma fragment order in 64 x 64 chunks.
    Fragments,
}

impl AccumLayout {
    /// Values in a `Fragments` chunk (64 rows x 64 columns).
    pub const CHUNK: usize = 64 * 64;

    /// Index of the `Fragments` chunk holding column `col` of 64-row block `block` (see
    /// [`FragmentBlocks`]) of an accumulator of `accum_dim` columns: chunks are ordered
    /// `[block, accum_dim / 64]`. Its first value is [`Self::CHUNK`] times this into the
    /// accumulator.
    pub const fn fragment_chunk(block: u32, accum_dim: usize, col: usize) -> usize {
        block as usize * (accum_dim / 64) + col / 64
    }

    /// f32 of `Fragments` statistics per 64-row block: 64 log-sum-exp bases, 64 dsums.
    pub const STATS: usize = 128;

    /// Index of the log-sum-exp base of row `row` (its offset in the block is `row % 64`) of
    /// 64-row block `block` in the `Fragments` statistics; its dsum is 64 further.
    pub const fn fragment_stats(block: u32, row: u32) -> usize {
        block as usize * Self::STATS + (row % 64) as usize
    }

    /// Index of value (`row`, `col`) within a `Fragments` chunk (`row`, `col` < 64).
    pub const fn fragment_index(row: usize, col: usize) -> usize {
        let thread = 32 * (row / 16) + 4 * (row % 8) + (col % 8) / 2;
        let x = 4 * (col / 8) + 2 * ((row / 8) % 2) + col % 2;
        (x / 4) * 512 + thread * 4 + x % 4
    }
}

/// Where the 64-row blocks of one batch entry's query heads lie among a `Fragments` launch's
/// blocks (each block: a row of dQ accumulator chunks, [`AccumLayout::fragment_chunk`], one
/// statistics block, [`AccumLayout::fragment_stats`], and in deterministic mode one counter):
/// block `m` of query head `h` is `first + h * per_head + m`.
///
/// Fixed-length launches order blocks `[batch, heads_q, ceil(seqlen_q / 64)]`. Variable-length
/// launches order them `[heads_q, total_q / 64 + batch]`, each sequence padded to whole
/// blocks: sequence `b`, whose rows start at packed row `q_start`, starts at block
/// `(q_start + 64 b) / 64`. As `q_start` grows by the previous sequence's length at least,
/// that is past the previous sequence's last block; and a sequence ending at `q_end <=
/// total_q` ends by block `ceil((q_end + 64 (batch - 1)) / 64) <= total_q / 64 + batch`, so
/// the closed form needs no table, and clamped offsets ([`crate::grid::Extent::varlen`]) stay
/// inside the blocks whatever the caller's offsets hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FragmentBlocks {
    /// Block 0 of query head 0.
    pub first: u32,
    /// Blocks between one query head's block 0 and the next's.
    pub per_head: u32,
}

impl FragmentBlocks {
    /// Batch entry `batch` of fixed-length launch `f`.
    #[inline(always)]
    pub const fn fixed(f: &FwdParams, batch: u32) -> Self {
        let per_head = f.seqlen_q.div_ceil(64);
        FragmentBlocks { first: batch * f.heads_q * per_head, per_head }
    }

    /// Batch entry `batch` of variable-length launch `f`, whose query rows start at packed row
    /// `q_start`.
    #[inline(always)]
    pub const fn varlen(f: &FwdParams, batch: u32, q_start: u32) -> Self {
        FragmentBlocks { first: (q_start + 64 * batch) / 64, per_head: f.total_q / 64 + f.batch }
    }

    /// The block of query head `head` holding its sequence's row `row`.
    #[inline(always)]
    pub const fn block(self, head: u32, row: u32) -> u32 {
        self.first + head * self.per_head + row / 64
    }

    /// Blocks of the whole launch `f` (`varlen`: a variable-length one), computed wide (the
    /// host checks it against the kernels' 32-bit range before it launches).
    pub const fn count(f: &FwdParams, varlen: bool) -> u128 {
        if varlen {
            f.heads_q as u128 * ((f.total_q / 64) as u128 + f.batch as u128)
        } else {
            f.batch as u128 * f.heads_q as u128 * f.seqlen_q.div_ceil(64) as u128
        }
    }
}

/// How a Hopper backward CTA's two consumer warpgroups share each step's work
/// ([`BwdSm90Config::split`]); the register budget decides: a warpgroup keeps its dK and dV in
/// registers for the whole walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BwdSm90Split {
    /// Head dim 128: each warpgroup owns 64 of the CTA's 128 keys (scores, dK, dV); the step's
    /// dQ is split by columns, 64 each, over all 128 keys.
    Columns,
    /// Head dim 64, 128-row steps: each warpgroup owns 64 of the CTA's 128 keys (scores, dK,
    /// dV); the step's 128 x 64 dQ is split by query rows, 64 each, over all 128 keys. With
    /// 64-row steps the warpgroups split a 64 x 64 dQ by keys, and both added a part over 64
    /// keys to the same chunk every step: twice the accumulator traffic per key, and 6-11%
    /// slower on the H100.
    Rows,
    /// Head dim 256: a 64 x 256 dK and dV do not fit one warpgroup's registers beside its
    /// scores, so both warpgroups work on all of the CTA's 64 keys: the scores split by query
    /// rows (32 each, through shared memory), dK, dV and dQ by head-dim halves (128 each, dQ
    /// added from registers).
    HeadDim,
}

/// Tile shape of one Hopper (sm_90a) backward kernel instantiation: FlashAttention-3 style,
/// one producer warpgroup (TMA) and two consumer warpgroups (wgmma) sharing the CTA's
/// [`BwdSm90Config::block_n`] keys as [`BwdSm90Config::split`] says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BwdSm90Config {
    /// Padded head dimension (64, 128 or 256).
    pub head_dim: usize,
    /// Query rows per step: 128 at head_dim 64 ([`BwdSm90Split::Rows`]), else 64.
    pub block_m: usize,
    /// Stages of the query-side ring (Q and dO tiles).
    pub stages: usize,
}

impl BwdSm90Config {
    /// How the consumer warpgroups share a step (set by the head dimension).
    pub const fn split(&self) -> BwdSm90Split {
        match self.head_dim {
            0..=64 => BwdSm90Split::Rows,
            65..=128 => BwdSm90Split::Columns,
            _ => BwdSm90Split::HeadDim,
        }
    }
    /// Keys per CTA: 64 per consumer warpgroup, or 64 shared by both ([`BwdSm90Split::HeadDim`]).
    pub const fn block_n(&self) -> usize {
        match self.split() {
            BwdSm90Split::HeadDim => 64,
            _ => 128,
        }
    }
    /// Threads per CTA: the producer warpgroup and two consumers.
    pub const fn threads(&self) -> usize {
        384
    }
    /// Registers per thread of the producer warpgroup after `setmaxnreg.dec`.
    pub const fn producer_regs(&self) -> u32 {
        24
    }
    /// Registers per thread of each consumer warpgroup after `setmaxnreg.inc`.
    pub const fn consumer_regs(&self) -> u32 {
        240
    }
    /// 16-bit `block_n x block_m` tiles of transposed step results in shared memory, two of each
    /// so that one warpgroup may write step `i + 1`'s while the other still reads step `i`'s:
    /// dS^T, and with [`BwdSm90Split::HeadDim`] also P^T (each warpgroup computes half of them).
    pub const fn transposed_tiles(&self) -> usize {
        match self.split() {
            BwdSm90Split::HeadDim => 4,
            _ => 2,
        }
    }
    /// Dynamic shared memory in bytes: 1024 of alignment slack, K and V, the Q and dO stages,
    /// the transposed tiles ([`Self::transposed_tiles`]), the stages' row statistics
    /// ([`AccumLayout::fragment_stats`], 2 x `block_m` f32 each), 1024 for the mbarriers.
    pub const fn smem_bytes(&self) -> usize {
        let (d, m, n) = (self.head_dim, self.block_m, self.block_n());
        1024 + 2 * n * d * 2 + 2 * self.stages * m * d * 2 + self.transposed_tiles() * n * m * 2 + self.stages * 2 * m * 4 + 1024
    }
    /// True when the kernel body takes the shape: head_dim 64 with 128-row steps, or 128 or
    /// 256 with 64-row steps (one per [`BwdSm90Split`]), and shared memory that fits.
    pub const fn is_valid(&self) -> bool {
        matches!((self.head_dim, self.block_m), (64, 128) | (128, 64) | (256, 64))
            && self.stages >= 1 && self.stages <= 3 && self.smem_bytes() <= crate::sm90::MAX_SMEM
    }
}

/// Every instantiated Hopper backward configuration (each for f16 and bf16), one per head
/// dimension.
pub const BWD_SM90_CONFIGS: [BwdSm90Config; 3] = [
    BwdSm90Config { head_dim: 64, block_m: 128, stages: 2 },
    BwdSm90Config { head_dim: 128, block_m: 64, stages: 2 },
    BwdSm90Config { head_dim: 256, block_m: 64, stages: 2 },
];

/// Tile shape of one backward (`mma.sync`) kernel instantiation. Eight warps; each of the
/// three GEMM shapes spreads them its own way (see the device crate's `bwd` module).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BwdConfig {
    /// Padded head dimension.
    pub head_dim: usize,
    /// Query rows per step of the walk over query blocks.
    pub block_m: usize,
    /// Keys per CTA.
    pub block_n: usize,
    /// Shared-memory stages of the query-side tiles (Q, dO, lse, dsum), 1 to 3: with 2 the
    /// next query block's copies overlap the second half of the current one's step, with 3
    /// they have a step and a half to land.
    pub stages: usize,
}

/// Warps of every backward main kernel.
pub const BWD_WARPS: usize = 8;

/// Threads of the prep and dQ kernels' CTAs.
pub const BWD_ROW_THREADS: usize = 256;

/// Lanes the prep and dQ kernels give one (query row, head) of `head_dim` columns: one 16-byte
/// chunk of the row each, rounded up to a power of two, and at most 16 (a lane takes chunks `c`
/// and `c + 16` of a longer row), so that a warp holds at least two rows whole (the dQ kernel
/// reads two rows' accumulator values from each 16-byte word of the `Fragments` layout) and a
/// row's lanes sum by butterflies among themselves. A warp per row left 24 of its 32 lanes idle
/// at head_dim 64, and the kernels short of loads in flight.
pub const fn bwd_row_lanes(head_dim: u32) -> u32 {
    let chunks = head_dim.div_ceil(8).next_power_of_two();
    if chunks < 16 { chunks } else { 16 }
}

impl BwdConfig {
    /// Threads per CTA.
    pub const fn threads(&self) -> usize {
        BWD_WARPS * 32
    }
    /// Dynamic shared memory in bytes: K and V, the query-side stages (Q and dO tiles, then
    /// the lse and dsum rows at the end), P and dS.
    pub const fn smem_bytes(&self) -> usize {
        let kv = 2 * self.block_n * self.head_dim * 2;
        let q_side = 2 * self.stages * self.block_m * self.head_dim * 2;
        let p_ds = 2 * self.block_m * self.block_n * 2;
        kv + q_side + p_ds + 2 * self.stages * self.block_m * 4
    }
    /// Warps along the query rows in the `S = Q K^T` and `dP = dO V^T` GEMMs (32 rows each);
    /// the others split the keys.
    pub const fn warps_m_sdp(&self) -> usize {
        self.block_m / 32
    }
    /// Warps along the keys in the `dV += P^T dO` and `dK += dS^T Q` GEMMs (32 keys each);
    /// the others split the head dimension.
    pub const fn warps_n_dkv(&self) -> usize {
        self.block_n / 32
    }
    /// Warps along the query rows in the `dQ += dS K` GEMM (32 rows each); the others split
    /// the head dimension.
    pub const fn warps_m_dq(&self) -> usize {
        self.block_m / 32
    }
    /// 8-column tiles per warp in each pass of the `dQ += dS K` GEMM: at most 4, so that its
    /// accumulators fit beside dK and dV.
    pub const fn dq_tiles(&self) -> usize {
        let all = self.head_dim / (BWD_WARPS / self.warps_m_dq()) / 8;
        if all > 4 { 4 } else { all }
    }
    /// True when its sm_90a twin adds dQ in fragment order ([`AccumLayout::Fragments`], where
    /// a lane's four values of an MMA tile are one 16-byte reduction): whole 64-row blocks a
    /// step, and head dims up to 128. At 256, dK and dV hold 128 registers a thread and the
    /// two dQ passes' reductions in that order leave ptxas none (it spills); rows, with 8-byte
    /// reductions, fit.
    pub const fn fragments(&self) -> bool {
        self.block_m.is_multiple_of(64) && self.head_dim <= 128
    }
    /// True when the shape is one the kernel body takes: whole 32-row warp tiles in every
    /// GEMM, an even number of 8-column tiles per warp (B fragments load in pairs), swizzled
    /// P and dS rows of at least 64 keys, and copies covering whole 8-row swizzle groups.
    pub const fn is_valid(&self) -> bool {
        let (d, m, n) = (self.head_dim, self.block_m, self.block_n);
        let w = BWD_WARPS;
        if d % 64 != 0 || m % 32 != 0 || n % 64 != 0 || self.stages == 0 || self.stages > 3 {
            return false;
        }
        let rows_per_copy = w * 32 / (d / 8);
        even_tiles(n, self.warps_m_sdp()) && even_tiles(d, self.warps_n_dkv()) && even_tiles(d, self.warps_m_dq())
            && rows_per_copy.is_multiple_of(8) && m.is_multiple_of(rows_per_copy) && n.is_multiple_of(rows_per_copy)
    }
}

/// True when `warps` of the [`BWD_WARPS`] divide them and the rest split `cols` into even
/// numbers of 8-column tiles.
const fn even_tiles(cols: usize, warps: usize) -> bool {
    warps > 0 && BWD_WARPS.is_multiple_of(warps) && cols.is_multiple_of(BWD_WARPS / warps * 16)
}

/// Every instantiated backward configuration (each for f16 and bf16), the first of each head
/// dimension its default; the planner takes the first of a head dimension that fits the GPU.
/// FlashAttention-2's shapes: 128 keys a CTA at head_dim 64 and 128, so that a query row's dQ
/// part sums 128 keys before it is added to the accumulator (the adds, not the GEMMs, bound
/// the walk), with 64 query rows a step at head_dim 128 (dK and dV hold 128 registers a
/// thread). The defaults keep three steps of query-side tiles in flight (about 195 KB, an H100's);
/// their two-stage twins fit the 163 KB of an A100's CTA, and the last two the 99 KB of sm_86
/// and sm_89. Head_dim 256 takes two stages where they fit (209 KB), one on an A100.
pub const BWD_CONFIGS: [BwdConfig; 9] = [
    BwdConfig { head_dim: 64, block_m: 128, block_n: 128, stages: 3 },
    BwdConfig { head_dim: 128, block_m: 64, block_n: 128, stages: 3 },
    BwdConfig { head_dim: 256, block_m: 64, block_n: 64, stages: 2 },
    BwdConfig { head_dim: 256, block_m: 64, block_n: 64, stages: 1 },
    BwdConfig { head_dim: 64, block_m: 128, block_n: 128, stages: 2 },
    BwdConfig { head_dim: 128, block_m: 64, block_n: 128, stages: 2 },
    BwdConfig { head_dim: 64, block_m: 64, block_n: 128, stages: 2 },
    BwdConfig { head_dim: 128, block_m: 64, block_n: 64, stages: 1 },
    BwdConfig { head_dim: 128, block_m: 64, block_n: 64, stages: 2 },
];

/// The configurations (indices into [`BWD_CONFIGS`]) with a modification twin
/// (`flash_bwd_mods_*`: sliding window, softcap and ALiBi, dQ in rows, and on sm_90a in fragment
/// order where the configuration takes it): the sm_86/sm_89 shapes (head_dim
/// 64 with 64 x 128 tiles, 128 with 64 x 64 and one stage), head_dim 128's 64 x 64 with two
/// stages, and head_dim 256 with one stage;
/// every GPU's planner finds one of them for each head dimension it has plain kernels for; in
/// this order of preference, so head_dim 128 takes 64 x 64 with two stages where it fits (not
/// on sm_86/sm_89's 99 KB). The larger tiles spilled with the modifications compiled in (head_dim 128's 64 x 128
/// two-stage twin 24 bytes on sm_80, head_dim 64's 128 x 128 one 4 bytes on sm_86).
pub const BWD_MODS: [usize; 4] = [6, 8, 7, 3];

/// True when configuration `idx` of [`BWD_CONFIGS`] is one of [`BWD_MODS`] (a const test the
/// device crate's entries assert).
pub const fn bwd_mods_has(idx: usize) -> bool {
    let mut i = 0;
    while i < BWD_MODS.len() {
        if BWD_MODS[i] == idx {
            return true;
        }
        i += 1;
    }
    false
}

const _: () = {
    let mut i = 0;
    while i < BWD_CONFIGS.len() {
        assert!(BWD_CONFIGS[i].is_valid());
        i += 1;
    }
    let mut i = 0;
    while i < BWD_SM90_CONFIGS.len() {
        assert!(BWD_SM90_CONFIGS[i].is_valid());
        i += 1;
    }
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_memory_adds_up() {
        // head_dim 128, 64 x 128, two stages: K, V 32 KB each; Q, dO 2 x 16 KB each; P, dS 16
        // KB each; lse and dsum 2 x 256 B each.
        let c = BwdConfig { head_dim: 128, block_m: 64, block_n: 128, stages: 2 };
        assert_eq!(c.smem_bytes(), 64 * 1024 + 64 * 1024 + 32 * 1024 + 1024);
        // Every default fits an H100 (227 KB), every head dim has a shape for an A100 (163 KB),
        // head_dim 64 and 128 one for sm_86/89 (99 KB).
        for d in [64, 128, 256] {
            let of_d = || BWD_CONFIGS.iter().filter(move |c| c.head_dim == d);
            assert!(of_d().next().unwrap().smem_bytes() <= crate::sm90::MAX_SMEM, "head_dim {d}");
            assert!(of_d().any(|c| c.smem_bytes() <= 163 * 1024), "head_dim {d}");
            assert_eq!(of_d().any(|c| c.smem_bytes() <= 99 * 1024), d < 256, "head_dim {d}");
        }
        assert!(!BwdConfig { head_dim: 64, block_m: 48, block_n: 128, stages: 2 }.is_valid());
        // Hopper, head_dim 64, 128-row steps: K, V 16 KB each; Q, dO 2 x 16 KB each; dS^T 2 x
        // 32 KB; statistics 2 x 1 KB; alignment slack and barriers 1 KB each.
        assert_eq!(BWD_SM90_CONFIGS[0].smem_bytes(), (32 + 64 + 64 + 2 + 2) * 1024);
        assert_eq!(BWD_SM90_CONFIGS[0].split(), BwdSm90Split::Rows);
        // head_dim 128, dQ from registers: K, V 32 KB each; Q, dO 2 x 16 KB each; dS^T 2 x 16 KB.
        assert_eq!(BWD_SM90_CONFIGS[1].smem_bytes(), (64 + 64 + 32 + 1 + 2) * 1024);
        // Hopper, head_dim 256, 64 keys: K, V 32 KB each; Q, dO 2 x 32 KB each; P^T and dS^T 2
        // x 8 KB each; no dQ staging; statistics 2 x 512 B; 1 KB each of slack and barriers:
        // again all of it.
        let wide = BWD_SM90_CONFIGS[2];
        assert_eq!((wide.split(), wide.block_n()), (BwdSm90Split::HeadDim, 64));
        assert_eq!(wide.smem_bytes(), crate::sm90::MAX_SMEM);
        assert!(BWD_SM90_CONFIGS.iter().all(|c| c.is_valid()));
        assert!(!BwdSm90Config { head_dim: 256, block_m: 64, stages: 3 }.is_valid());
        assert!(!BwdSm90Config { head_dim: 64, block_m: 64, stages: 2 }.is_valid());
        assert!(!BwdConfig { head_dim: 64, block_m: 64, block_n: 32, stages: 2 }.is_valid());
    }

    #[test]
    fn row_lanes_cover_every_head_dim_in_at_most_two_chunks() {
        for d in (8..=256).step_by(8) {
            let lanes = bwd_row_lanes(d);
            assert!(lanes.is_power_of_two() && lanes <= 16, "head_dim {d}: {lanes} lanes");
            // Two 8-column chunks a lane cover the row, and half the lanes would not.
            assert!(2 * 8 * lanes >= d && (lanes == 16 || 8 * lanes >= d), "head_dim {d}: {lanes} lanes");
            assert!(lanes == 1 || 8 * (lanes / 2) < d, "head_dim {d}: {lanes} lanes, more than it needs");
        }
        assert_eq!([64, 128, 256].map(bwd_row_lanes), [8, 16, 16]);
    }

    #[test]
    fn fragment_stats_blocks_are_whole_and_aligned() {
        for (block, row) in [(0, 0), (0, 63), (1, 64), (15, 999), (7 * 16, 5)] {
            let i = AccumLayout::fragment_stats(block, row);
            assert_eq!(i, block as usize * 128 + row as usize % 64);
            // A step's block starts on 512 bytes (a bulk copy's 16 with room to spare).
            assert_eq!((i - row as usize % 64) * 4 % 512, 0);
        }
    }

    #[test]
    fn fixed_length_blocks_are_batch_head_block_ordered() {
        // 1000 rows: 16 blocks per (batch, head), the last with 40 rows.
        let f = FwdParams { batch: 3, heads_q: 8, seqlen_q: 1000, ..Default::default() };
        let b = FragmentBlocks::fixed(&f, 2);
        assert_eq!(b, FragmentBlocks { first: 2 * 8 * 16, per_head: 16 });
        assert_eq!(b.block(5, 999), (2 * 8 + 5) * 16 + 15);
        assert_eq!(FragmentBlocks::count(&f, false), 3 * 8 * 16);
    }

    #[test]
    fn variable_length_blocks_are_disjoint_and_inside_the_count() {
        // Sequences of 1, 64, 65, 0, 127, 1 and 200 rows, packed.
        let lens = [1u32, 64, 65, 0, 127, 1, 200];
        let total: u32 = lens.iter().sum();
        let f = FwdParams { batch: lens.len() as u32, heads_q: 3, total_q: total, ..Default::default() };
        let count = FragmentBlocks::count(&f, true) as u32;
        let mut owner = std::vec![None; count as usize];
        let mut q_start = 0;
        for (batch, &len) in lens.iter().enumerate() {
            let b = FragmentBlocks::varlen(&f, batch as u32, q_start);
            for h in 0..3 {
                for row in (0..len).step_by(64) {
                    let block = b.block(h, row) as usize;
                    assert!(block < count as usize, "sequence {batch} head {h} row {row}: block {block} of {count}");
                    assert_eq!(owner[block].replace((batch, h, row / 64)), None, "block {block} taken twice");
                }
            }
            q_start += len;
        }
    }

    #[test]
    fn fragment_layout_is_a_permutation_of_a_chunk() {
        let mut seen = std::vec![false; 4096];
        for r in 0..64 {
            for c in 0..64 {
                let i = AccumLayout::fragment_index(r, c);
                assert!(!seen[i], "({r}, {c})");
                seen[i] = true;
            }
        }
        // Thread 5 (warp 0, g = 1, t = 1) holds row 1, columns 2 and 3 as its values 0 and 1.
        assert_eq!([AccumLayout::fragment_index(1, 2), AccumLayout::fragment_index(1, 3)], [20, 21]);
        // Its value 4 (column group 1) is a 512-value group further.
        assert_eq!(AccumLayout::fragment_index(1, 10), 512 + 20);
        // 128 columns (2 groups): column 65 of block 7 is its second chunk.
        assert_eq!(AccumLayout::fragment_chunk(7, 128, 65), 7 * 2 + 1);
    }
}
