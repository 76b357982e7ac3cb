//! Backward attention on Hopper (sm_90a), FlashAttention-3 style: TMA loads, wgmma, warp
//! specialisation. Same three launches as the `mma.sync` backward ([`flashrs_abi::bwd`]); this
//! is the main one, with its own accumulator layout for dQ
//! ([`flashrs_abi::AccumLayout::Fragments`]).
//!
//! A CTA owns 128 keys (64 at head_dim 256) of one (batch, K/V head) and walks every query
//! block of every query head of the GQA group that sees them (under causal masking, from the
//! first block with a row that sees the first key), 64 query rows per step (128 at head_dim
//! 64). Warpgroup 0 is the producer ([`producer`]): it gives registers away and one thread
//! loads K and V once, then each step's Q and dO tiles into a ring of stages ([`smem`]).
//! Warpgroups 1 and 2 are the consumers, their dK and dV in registers; each step they
//! recompute P, form dS ([`scores`]), accumulate dV and dK, and add their part of the step's
//! `dS K` to the f32 dQ accumulator ([`epilogue`]). dK and dV are written once at the end. How
//! the consumers share the work follows [`flashrs_abi::BwdSm90Split`]: 64 keys each
//! ([`consumer`], head_dim 64 and 128), or all 64 keys with the head dim halved between them
//! ([`consumer_wide`], 256).
//!
//! Deterministic mode: each 64-row query block's dQ parts are added in key-block order. Its
//! counter counts two per key block that has added its parts (one per consumer warpgroup, or
//! two from the one warpgroup whose rows it is): a CTA adds once the count is twice its key
//! block index ([`epilogue::Turn`]). The grid puts a (batch, K/V head)'s key blocks at
//! consecutive CTA indices, so a CTA waits only for CTAs started before it.
//!
//! Variable-length launches size the grid for the longest sequence (CTAs past their
//! sequence's keys have nothing to do) and read the packed tensors as one sequence: a tile may
//! reach into the next sequence's rows, so keys past the sequence score `-inf` (as in
//! fixed-length launches, [`Walk::last_key`]) and query rows past it read their padded
//! statistics (`-inf`, so P and dS are 0 there; a 128-row step's second 64 rows past the
//! sequence read a padding block, [`Walk::stats`]).
//! The accumulator and statistics are padded per sequence ([`FragmentBlocks`]).
//!
//! The block-sparse twins (`flash_bwd_sm90_[varlen_]sparse_*`) walk, instead, the steps their
//! key block's list names ([`flashrs_abi::bwd::QueryLists`], built from the call's block mask
//! before the launch), and in deterministic mode take the turns listed beside them; inside a
//! step the element masks (causal, the sequence's end) apply as in the plain kernels. The
//! modification twins (`flash_bwd_sm90_[varlen_]mods_*`) walk the query blocks a sliding window
//! lets see their keys and modify and mask each step's scores ([`variant`]); in deterministic
//! mode a query block's turns start at the first key block its rows see.
pub mod consumer;
pub mod consumer_wide;
pub mod epilogue;
pub mod producer;
pub mod scores;
pub mod smem;
pub mod variant;

use super::entry_directives;
use super::gemm::WgElement;
use super::pipeline::{init_barriers, thread_arrivals};
use crate::arch::ids::{block_idx_x, thread_idx_x, warp_id};
use crate::arch::mbarrier::mbarrier_init;
use crate::arch::setmaxnreg::{setmaxnreg_dec, setmaxnreg_inc};
use crate::arch::tma::{TensorMapParam, tensor_map_aligned};
use crate::dtype::{Bf16, Element, F16};
use super::scheduler::uniform_extent;
use super::smem::dsmem_base_1024;
use flashrs_abi::bwd::{BWD_SM90_CONFIGS, BwdSm90Config, BwdSm90Split};
use flashrs_abi::grid::{Extent, div_rem};
use flashrs_abi::params::SPARSE_BLOCK;
use flashrs_abi::{AccumLayout, BwdParams, BwdStep, Flavor, FragmentBlocks, QueryLists};
use crate::arch::shfl::redux_min_u32;
use crate::arch::smem::{ld_shared_b32, st_shared_b32};
use core::marker::PhantomData;
use producer::Maps;
use smem::Smem;
use variant::{Modified, Unmodified, Variant};

/// A CTA's walk: its keys and the query blocks and heads it visits, in the order `K` says.
#[derive(Clone, Copy)]
pub struct Walk<K: Order> {
    /// The sequence's lengths and, variable-length, where its rows start in the packed
    /// tensors (warp-uniform, see [`crate::hopper::scheduler::uniform_extent`]).
    pub extent: Extent,
    /// Batch coordinate of the tensor maps and of the gradients' addresses: the batch index,
    /// or 0 for variable-length launches (packed rows are one sequence).
    pub map_batch: u32,
    /// Where its query heads' accumulator and statistics blocks lie.
    pub blocks: FragmentBlocks,
    /// The sequence's last key: the last a score may see. A variable-length key tile reaches
    /// into the next sequence's rows; a fixed-length one past the tensor holds TMA's zeros,
    /// whose score 0 would give P = exp(-lse), which overflows where a row's log-sum-exp lies
    /// below about -88 (and inf times a zero K row is NaN in dQ). Only a CTA whose tile passes
    /// the sequence tests it ([`Walk::mask`]).
    pub last_key: i32,
    /// K/V head.
    pub h_kv: u32,
    /// First key.
    pub n0: u32,
    /// Key block index (`n0 / block_n`): deterministic mode's turn.
    pub key_block: u32,
    /// Query heads per K/V head.
    pub group: u32,
    /// First query block visited; block-sparse, the key block's first entry in the lists.
    pub m_first: u32,
    /// Query blocks visited per head; block-sparse, the list's steps.
    pub m_count: u32,
    /// How the steps are ordered.
    pub order: PhantomData<K>,
}

impl<K: Order> Walk<K> {
    /// Steps of the walk.
    #[inline(always)]
    pub fn steps(&self) -> u32 {
        K::steps(self)
    }

    /// Deterministic mode ([`BwdParams::dq_semaphore`] set): the counter of the 64-row block
    /// holding row `row` of query head `h`.
    #[inline(always)]
    pub fn semaphore(&self, p: &BwdParams, h: u32, row: u32) -> *mut u32 {
        (p.dq_semaphore as *mut u32).wrapping_add(self.blocks.block(h, row) as usize)
    }

    /// The dQ accumulator's chunk holding query row `row` (of the sequence), column `col` of
    /// query head `h` ([`flashrs_abi::AccumLayout::fragment_chunk`], `D` columns a row).
    #[inline(always)]
    pub fn dq_chunk<const D: usize>(&self, p: &BwdParams, h: u32, row: u32, col: u32) -> *mut f32 {
        let chunk = AccumLayout::fragment_chunk(self.blocks.block(h, row), D, col as usize);
        (p.dq_accum as *mut f32).wrapping_add(chunk * AccumLayout::CHUNK)
    }


    /// Where the statistics of query head `h`'s block holding row `row` start in `p.dsum`
    /// ([`flashrs_abi::AccumLayout::fragment_stats`]); for a row past the sequence (the second
    /// half of a 128-row step) the padding block after the launch's blocks, all `-inf` and 0,
    /// so that the step's columns there have P = 0 and dS = 0.
    #[inline(always)]
    pub fn stats<const VARLEN: bool>(&self, p: &BwdParams, h: u32, row: u32) -> *const f32 {
        let block = if row < self.extent.seqlen_q { self.blocks.block(h, row) } else { FragmentBlocks::count(&p.fwd, VARLEN) as u32 };
        (p.dsum as *const f32).wrapping_add(AccumLayout::fragment_stats(block, 0))
    }

    /// Element `col` of key row `key` (of the sequence) of this walk's K/V head in the
    /// gradient at `base` with `strides` (batch, row, head), in elements: where a thread's dK
    /// or dV row starts.
    #[inline(always)]
    pub fn kv_row(&self, base: u64, [sb, sr, sh]: [i64; 3], key: i32, col: u32) -> *mut u16 {
        let row = self.extent.k_start as i64 + key as i64;
        let at = self.map_batch as i64 * sb + self.h_kv as i64 * sh + sr * row + col as i64;
        (base as *mut u16).wrapping_offset(at as isize)
    }

    /// The mask of a warpgroup's transposed score tile whose keys start at `key0` (64 of them)
    /// and whose first column is query row `row0` (`cols` columns): keys past
    /// [`Walk::last_key`] and, causal, past a column's diagonal score `-inf`.
    #[inline(always)]
    pub fn mask(&self, causal: bool, key0: u32, row0: u32, cols: u32) -> Mask {
        let Extent { seqlen_q, seqlen_k, .. } = self.extent;
        // The first column's last visible key (bottom-right diagonal).
        let diagonal = (row0 + seqlen_k) as i32 - seqlen_q as i32;
        let tile_last = key0 as i32 + 63;
        Mask {
            on: tile_last > self.last_key || (causal && tile_last > diagonal),
            diagonal: if causal { diagonal } else { i32::MAX - cols as i32 },
            last: self.last_key,
        }
    }

    /// The producer's step `i`: its (query head, query block), left in `slot` (8 bytes of
    /// shared memory, its stage's) where the consumers need it there.
    #[inline(always)]
    pub fn produce(&self, p: &BwdParams, i: u32, slot: u32) -> (u32, u32) {
        K::produce(self, p, i, slot)
    }

    /// The consumers' step `i`, once its stage (whose slot is `slot`) landed: its (query head,
    /// query block).
    #[inline(always)]
    pub fn landed(&self, i: u32, slot: u32) -> (u32, u32) {
        K::landed(self, i, slot)
    }

    /// Deterministic mode (`DET`), once the stage of step `i` (slot `slot`) landed and before
    /// it is released: how many CTAs of `BN` keys add to the step's query block's dQ before this
    /// one.
    #[inline(always)]
    pub fn turn<const DET: bool, const BN: u32>(&self, slot: u32) -> u32 {
        K::turn::<DET, BN>(self, slot)
    }
}

/// How a walk orders its steps: every query block whose rows see the CTA's keys ([`Dense`]),
/// or the steps of a block mask's list ([`Listed`]). A type rather than a flag: a branch on a
/// constant flag, though folded, moved the plain kernels' code enough that ptxas spilled.
pub trait Order: Copy {
    /// The walk of a CTA whose dense walk is `dense`, of (batch entry, K/V head) `bh`.
    fn start(dense: Walk<Self>, p: &BwdParams, bh: u32) -> Walk<Self>;
    /// Steps of the walk.
    fn steps(w: &Walk<Self>) -> u32;
    /// See [`Walk::produce`].
    fn produce(w: &Walk<Self>, p: &BwdParams, i: u32, slot: u32) -> (u32, u32);
    /// See [`Walk::landed`].
    fn landed(w: &Walk<Self>, i: u32, slot: u32) -> (u32, u32);
    /// See [`Walk::turn`].
    fn turn<const DET: bool, const BN: u32>(w: &Walk<Self>, slot: u32) -> u32;
}

/// Heads outer, query blocks inner, from the first whose rows see the CTA's first key; in
/// deterministic mode every key block before this one adds first.
#[derive(Clone, Copy)]
pub struct Dense;

impl Dense {
    /// Step `i`'s (query head, query block).
    #[inline(always)]
    fn step(w: &Walk<Self>, i: u32) -> (u32, u32) {
        let (g, m) = div_rem(i, w.m_count);
        (w.h_kv * w.group + g, w.m_first + m)
    }
}

impl Order for Dense {
    #[inline(always)]
    fn start(dense: Walk<Self>, _: &BwdParams, _: u32) -> Walk<Self> {
        dense
    }

    #[inline(always)]
    fn steps(w: &Walk<Self>) -> u32 {
        w.m_count * w.group
    }

    #[inline(always)]
    fn produce(w: &Walk<Self>, _: &BwdParams, i: u32, _: u32) -> (u32, u32) {
        Self::step(w, i)
    }

    #[inline(always)]
    fn landed(w: &Walk<Self>, i: u32, _: u32) -> (u32, u32) {
        Self::step(w, i)
    }

    #[inline(always)]
    fn turn<const DET: bool, const BN: u32>(w: &Walk<Self>, _: u32) -> u32 {
        w.key_block
    }
}

/// The entries of the key block's list ([`flashrs_abi::bwd::QueryLists`]): `m_first` is the
/// list's first entry, `m_count` its length. The producer reads each step's entry (and, in
/// deterministic mode, its listed turn) from global memory and leaves them in the stage's slot,
/// so that the consumers keep nothing of the list across their walk (a pointer into it cost
/// registers their accumulators need). In deterministic mode the listed key blocks of the
/// step's query block add first (the listed turn), and of the CTA's own block of the mask the
/// CTAs of lower keys.
#[derive(Clone, Copy)]
pub struct Listed;

impl Order for Listed {
    /// No list past the sequence's keys (where the dense walk has no step either).
    #[inline(always)]
    fn start(dense: Walk<Self>, p: &BwdParams, bh: u32) -> Walk<Self> {
        let l = &p.lists;
        let at = l.list(bh, dense.n0);
        let count = if dense.m_first + dense.m_count > 0 { unsafe { *(l.counts as *const u32).add(at as usize) } } else { 0 };
        // Every lane loaded the same count: uniform, as the dense walk's.
        let count = redux_min_u32(count);
        Walk { m_first: at * l.per_list, m_count: count, ..dense }
    }

    #[inline(always)]
    fn steps(w: &Walk<Self>) -> u32 {
        w.m_count
    }

    /// The slot holds the step's query head and block (16 bits each) and its turn.
    #[inline(always)]
    fn produce(w: &Walk<Self>, p: &BwdParams, i: u32, slot: u32) -> (u32, u32) {
        let at = (w.m_first + i) as usize;
        let e = unsafe { *(p.lists.entries as *const u32).add(at) };
        let turn = if p.lists.turns != 0 { unsafe { *(p.lists.turns as *const u32).add(at) } } else { 0 };
        let (g, m) = QueryLists::step(e);
        let h = w.h_kv * w.group + g;
        unsafe {
            st_shared_b32(slot, QueryLists::entry(h, m));
            st_shared_b32(slot + 8, turn);
        }
        (h, m)
    }

    #[inline(always)]
    fn landed(_: &Walk<Self>, _: u32, slot: u32) -> (u32, u32) {
        // Every lane read the same step: uniform, as the dense walk's.
        QueryLists::step(redux_min_u32(unsafe { ld_shared_b32(slot) }))
    }

    #[inline(always)]
    fn turn<const DET: bool, const BN: u32>(w: &Walk<Self>, slot: u32) -> u32 {
        if !DET {
            return 0;
        }
        QueryLists::turn(redux_min_u32(unsafe { ld_shared_b32(slot + 8) }), w.key_block, BN)
    }
}

/// Which scores of a step's transposed tile ([`Walk::mask`]) score `-inf`: where `on`, key
/// `k` against the tile's column `c` when `k > min(diagonal + c, last)`.
#[derive(Clone, Copy)]
pub struct Mask {
    /// The tile has a masked score.
    pub on: bool,
    /// Column 0's last visible key (far past every key without causal masking).
    pub diagonal: i32,
    /// The last key any column sees ([`Walk::last_key`]).
    pub last: i32,
}

/// The kernel body. Const generics: element type, padded head dim `D`, query rows per step
/// `BM`, keys `BN`, `STAGES`, the register budgets, `VARLEN` (a variable-length launch: its
/// own entry, as the mixed walk would not fit the consumers' registers), and the walk's order
/// `K`; `consume` runs a consumer warpgroup (its shared
/// memory, the walk, its index 0 or 1, the thread's index in it).
#[inline(always)]
unsafe fn flash_bwd_sm90<T: WgElement, K: Order, V: Variant, const D: usize, const BM: usize, const BN: usize, const STAGES: usize, const PREGS: u32, const CREGS: u32, const VARLEN: bool>(
    maps: Maps,
    p: &BwdParams,
    consume: impl FnOnce(Smem<D, BM, STAGES>, Walk<K>, u32, u32),
) {
    const { assert!(128 * PREGS as usize + 256 * CREGS as usize <= 65536) };
    const { assert!(SPARSE_BLOCK as usize % BM == 0 && SPARSE_BLOCK as usize % BN == 0) };
    let f = &p.fwd;
    let smem = Smem::<D, BM, STAGES>::new(dsmem_base_1024());
    let tid = thread_idx_x();
    if !(tensor_map_aligned(maps.q) && tensor_map_aligned(maps.k) && tensor_map_aligned(maps.v) && tensor_map_aligned(maps.dout)) {
        unsafe { core::arch::nvptx::trap() };
    }
    let heads_kv = div_rem(f.heads_q, f.group).0;
    let (bh, nb) = div_rem(block_idx_x(), p.n_blocks);
    let (batch, h_kv) = div_rem(bh, heads_kv);
    let n0 = nb * BN as u32;
    // SAFETY: `batch` is below the launch's batch, so its offsets exist.
    let extent = if VARLEN { uniform_extent(unsafe { Extent::varlen(f, batch) }) } else { Extent::fixed(f) };
    let Extent { seqlen_q, seqlen_k, .. } = extent;
    // Past the sequence's keys (variable-length launches size the grid for the longest) no
    // query block is visited; dK and dV have no row to write.
    let m_blocks = if !VARLEN || n0 < seqlen_k { seqlen_q.div_ceil(BM as u32) } else { 0 };
    let (m_first, m_end) = V::query_blocks::<BM, BN>(p, &extent, batch, n0, m_blocks);
    let walk = Walk::<K> {
        extent,
        map_batch: if VARLEN { 0 } else { batch },
        blocks: if VARLEN { FragmentBlocks::varlen(f, batch, extent.q_start) } else { FragmentBlocks::fixed(f, batch) },
        last_key: seqlen_k as i32 - 1,
        h_kv,
        n0,
        key_block: nb,
        group: f.group,
        m_first,
        m_count: m_end - m_first,
        order: PhantomData,
    };
    let walk = K::start(walk, p, bh);
    init_barriers(tid, || unsafe {
        mbarrier_init(smem.kv_full(), 1);
        for s in 0..STAGES as u32 {
            mbarrier_init(smem.q_full(s), 1);
            mbarrier_init(smem.q_empty(s), thread_arrivals(2));
        }
    });
    let warpgroup = warp_id() / 4;
    if warpgroup == 0 {
        setmaxnreg_dec::<PREGS>();
        if tid == 0 && walk.steps() > 0 {
            unsafe { producer::run::<K, D, BM, BN, STAGES, VARLEN>(maps, p, smem, walk) };
        }
    } else {
        setmaxnreg_inc::<CREGS>();
        consume(smem, walk, warpgroup - 1, tid % 128);
    }
}

/// Declares one entry per (configuration of [`BWD_SM90_CONFIGS`], element type), each with its
/// [`flashrs_abi::kernel`] marker, running the consumer its split names (checked against the
/// configuration at compile time).
macro_rules! bwd_sm90_kernels {
    ($flavor:ident, $sparse:ty, $variant:ty: $($idx:literal => $split:ident: $f16:ident, $bf16:ident, $f16v:ident, $bf16v:ident;)*) => {$(
        bwd_sm90_kernels!(@one $f16, F16, $idx, $split, false, $flavor, $sparse, $variant);
        bwd_sm90_kernels!(@one $bf16, Bf16, $idx, $split, false, $flavor, $sparse, $variant);
        bwd_sm90_kernels!(@one $f16v, F16, $idx, $split, true, $flavor, $sparse, $variant);
        bwd_sm90_kernels!(@one $bf16v, Bf16, $idx, $split, true, $flavor, $sparse, $variant);
    )*};
    (@consume Rows, $t:ty, $c:ident, $p:ident, $s:ty, $v:ty) => { bwd_sm90_kernels!(@consume Columns, $t, $c, $p, $s, $v) };
    // Inlined by force: an outlined consumer is a call inside its wgmma pipeline, which ptxas
    // serialises (and it keeps its registers on a stack).
    (@consume Columns, $t:ty, $c:ident, $p:ident, $s:ty, $v:ty) => {
        #[inline(always)]
        |smem, walk, wg, tid| unsafe {
            if $p.dq_semaphore != 0 {
                consumer::run::<$t, { $c.head_dim }, { $c.block_m }, { $c.stages }, { $c.block_m / 2 }, { $c.head_dim / 2 },
                    { $c.block_m / 16 }, { $c.block_m / 8 }, true, $s, $v>(&$p, smem, walk, wg, tid)
            } else {
                consumer::run::<$t, { $c.head_dim }, { $c.block_m }, { $c.stages }, { $c.block_m / 2 }, { $c.head_dim / 2 },
                    { $c.block_m / 16 }, { $c.block_m / 8 }, false, $s, $v>(&$p, smem, walk, wg, tid)
            }
        }
    };
    (@consume HeadDim, $t:ty, $c:ident, $p:ident, $s:ty, $v:ty) => {
        #[inline(always)]
        |smem, walk, wg, tid| unsafe {
            if $p.dq_semaphore != 0 {
                consumer_wide::run::<$t, { $c.head_dim }, { $c.block_m }, { $c.stages }, true, $s, $v>(&$p, smem, walk, wg, tid)
            } else {
                consumer_wide::run::<$t, { $c.head_dim }, { $c.block_m }, { $c.stages }, false, $s, $v>(&$p, smem, walk, wg, tid)
            }
        }
    };
    (@one $name:ident, $t:ty, $idx:literal, $split:ident, $varlen:literal, $flavor:ident, $sparse:ty, $variant:ty) => {
        /// Hopper backward attention's main entry point (see the module docs): Q, K, V and dO
        /// tensor maps (4-D `[head_dim, seqlen, heads, batch]`, 64-column boxes of `block_m`
        /// rows for Q and dO and `block_n` for K and V, 128-byte swizzle; a variable-length
        /// launch's maps see the packed rows as one sequence of batch 1), then the parameters.
        #[cfg(feature = "entries")]
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(_q: TensorMapParam, _k: TensorMapParam, _v: TensorMapParam, _dout: TensorMapParam, p: BwdParams) {
            const C: BwdSm90Config = BWD_SM90_CONFIGS[$idx];
            const { assert!(matches!(C.split(), BwdSm90Split::$split)) };
            entry_directives::<{ C.threads() }>();
            unsafe {
                core::arch::asm!("// flashrs-kernel: bwd {s} {t} {d} {bm} {bn} {st} {v}", s = const BwdStep::MainSm90 { config: C, varlen: $varlen, flavor: Flavor::$flavor }.code(),
                    t = const <$t as Element>::DTYPE.code(), d = const C.head_dim, bm = const C.block_m,
                    bn = const C.block_n(), st = const C.stages, v = const $varlen as u32, options(nomem, nostack, preserves_flags));
            }
            let maps = Maps {
                q: crate::param_tensor_map!($name, 0),
                k: crate::param_tensor_map!($name, 1),
                v: crate::param_tensor_map!($name, 2),
                dout: crate::param_tensor_map!($name, 3),
            };
            unsafe {
                flash_bwd_sm90::<$t, $sparse, $variant, { C.head_dim }, { C.block_m }, { C.block_n() }, { C.stages }, { C.producer_regs() }, { C.consumer_regs() }, $varlen>(
                    maps, &p, bwd_sm90_kernels!(@consume $split, $t, C, p, $sparse, $variant))
            }
        }
    };
}

bwd_sm90_kernels! { Plain, Dense, Unmodified:
    0 => Rows: flash_bwd_sm90_f16_d64_128x128s2, flash_bwd_sm90_bf16_d64_128x128s2,
        flash_bwd_sm90_varlen_f16_d64_128x128s2, flash_bwd_sm90_varlen_bf16_d64_128x128s2;
    1 => Columns: flash_bwd_sm90_f16_d128_64x128s2, flash_bwd_sm90_bf16_d128_64x128s2,
        flash_bwd_sm90_varlen_f16_d128_64x128s2, flash_bwd_sm90_varlen_bf16_d128_64x128s2;
    2 => HeadDim: flash_bwd_sm90_f16_d256_64x64s2, flash_bwd_sm90_bf16_d256_64x64s2,
        flash_bwd_sm90_varlen_f16_d256_64x64s2, flash_bwd_sm90_varlen_bf16_d256_64x64s2;
}

bwd_sm90_kernels! { Sparse, Listed, Unmodified:
    0 => Rows: flash_bwd_sm90_sparse_f16_d64_128x128s2, flash_bwd_sm90_sparse_bf16_d64_128x128s2,
        flash_bwd_sm90_varlen_sparse_f16_d64_128x128s2, flash_bwd_sm90_varlen_sparse_bf16_d64_128x128s2;
    1 => Columns: flash_bwd_sm90_sparse_f16_d128_64x128s2, flash_bwd_sm90_sparse_bf16_d128_64x128s2,
        flash_bwd_sm90_varlen_sparse_f16_d128_64x128s2, flash_bwd_sm90_varlen_sparse_bf16_d128_64x128s2;
    2 => HeadDim: flash_bwd_sm90_sparse_f16_d256_64x64s2, flash_bwd_sm90_sparse_bf16_d256_64x64s2,
        flash_bwd_sm90_varlen_sparse_f16_d256_64x64s2, flash_bwd_sm90_varlen_sparse_bf16_d256_64x64s2;
}

bwd_sm90_kernels! { Mods, Dense, Modified:
    0 => Rows: flash_bwd_sm90_mods_f16_d64_128x128s2, flash_bwd_sm90_mods_bf16_d64_128x128s2,
        flash_bwd_sm90_varlen_mods_f16_d64_128x128s2, flash_bwd_sm90_varlen_mods_bf16_d64_128x128s2;
    1 => Columns: flash_bwd_sm90_mods_f16_d128_64x128s2, flash_bwd_sm90_mods_bf16_d128_64x128s2,
        flash_bwd_sm90_varlen_mods_f16_d128_64x128s2, flash_bwd_sm90_varlen_mods_bf16_d128_64x128s2;
    2 => HeadDim: flash_bwd_sm90_mods_f16_d256_64x64s2, flash_bwd_sm90_mods_bf16_d256_64x64s2,
        flash_bwd_sm90_varlen_mods_f16_d256_64x64s2, flash_bwd_sm90_varlen_mods_bf16_d256_64x64s2;
}
