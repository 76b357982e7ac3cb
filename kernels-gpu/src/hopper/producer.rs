//! The producer: one thread of the producer warpgroup issues every TMA load of the CTA (but
//! in paged launches over pages smaller than a key tile, whose loads four threads share).
//!
//! For each work tile of the CTA: Q (completing on `q_full` of the Q tile it goes to, once the
//! consumers released that Q tile's previous work with `q_empty`), and the key tiles in the
//! consumers' order (last tile first), each K and V into the next free stage of the ring
//! (after its `k_empty`/`v_empty` phase), K one tile ahead of V. The ring position carries
//! over from one work tile to the next. Each tile is `D / 64` (V: `DV / 64`) boxes of 64
//! columns x rows;
//! rows past the tensor (and columns past head_dim) arrive as zeros and still count their
//! full bytes. In a variable-length launch the rows past a sequence's end are the next
//! sequence's: the consumers mask those keys and store no such query row.
//!
//! Paged caches (`PAGED`) are read through the block table: K and V maps see the caches as
//! `[head_dim, page_size, heads, num_pages]`, boxes of `S = min(page_size, BN)` rows, so a key
//! tile is `BN / S` segments, each within one page (page sizes are powers of two). The tile's
//! table entries are copied to shared memory together (`cp.async`) before the load's wait,
//! which their round trip overlaps. Where a tile spans several pages (pages of 16 rows: 8
//! boxes per 64 columns of K, as many of V) more boxes than one thread issues in a tile's time,
//! four threads share them ([`paged_shared`], [`run_helper`]). A segment past the sequence's
//! end is not loaded. K's last segment comes whole: the keys past the end
//! are masked, whatever the page holds there. V's must not bring the page's other rows in, as
//! a masked key's zero weight times a non-finite value there is NaN: its rows come in boxes
//! of 8, then of 1 (two more maps), and the rows of the stage they leave alone hold an
//! earlier tile's values, or the zeros the CTA wrote over the V ring at its start.
use super::pipeline::{PipeState, wait_empty, wait_full};
use super::scheduler::{NO_TILE, Work, claim_next, first_tile, retire, tile_count, work_for_tile};
use super::fp8::slab_row;
use super::smem::{MAX_SEGMENTS, Smem};
use crate::arch::mbarrier::{mbarrier_arrive, mbarrier_arrive_expect_tx};
use crate::mods::MaskMod;
use crate::arch::cp_async::{cp_async_ca_4, cp_async_commit_group, cp_async_wait_group};
use crate::arch::smem::{ld_shared_b32, st_shared_b32};
use flashrs_abi::FwdParams;
use crate::arch::tma::{TensorMap, cp_async_bulk_tensor_4d_g2s, prefetch_tensormap};

/// The CTA's tensor maps (4-D views `[head_dim, seqlen, heads, batch]`, innermost first, boxes
/// of 64 columns x rows, 128-byte swizzle).
#[derive(Clone, Copy)]
pub struct Maps {
    /// Q, boxes of `BM` rows (the CTA's query rows).
    pub q: *const TensorMap,
    /// K, boxes of `BN` rows.
    pub k: *const TensorMap,
    /// V, boxes of `BN` rows.
    pub v: *const TensorMap,
    /// Paged launches: V in boxes of 8 rows and of 1 row (for the rows of a sequence's last
    /// page); null otherwise.
    pub v_rows: [*const TensorMap; 2],
}

/// The segment geometry of a paged launch's key tiles: `log2` of the rows of a segment (a
/// TMA box within one page: `min(page_size, BN)`), and the segments of the tile at `key0`
/// that start before `seqlen_k`.
#[inline(always)]
fn segments<const BN: usize>(key0: u32, seqlen_k: u32, p: &FwdParams) -> (u32, u32) {
    let seg_shift = p.page_shift.min(BN.trailing_zeros());
    let n = (seqlen_k.saturating_sub(key0) + (1 << seg_shift) - 1) >> seg_shift;
    (seg_shift, n.min(BN as u32 >> seg_shift))
}

/// True when a paged launch's key tiles span several pages: then four threads of the producer
/// warpgroup share the loads ([`Share`]), as one thread cannot issue that many boxes in a
/// tile's time; with pages of a tile or more, one thread loads K and V.
#[inline(always)]
pub fn paged_shared<const BN: usize>(p: &FwdParams) -> bool {
    p.page_shift < BN.trailing_zeros()
}

/// The segments of each key tile one thread loads: `first`, `first + step`, ...
#[derive(Clone, Copy)]
struct Share {
    first: u32,
    step: u32,
}

impl Share {
    const ALL: Share = Share { first: 0, step: 1 };

    /// Thread `role` (0 to 3, the producer warpgroup's warp) of a launch whose loads are
    /// [`paged_shared`]: warps 0 and 2 take K's even and odd segments, warps 1 and 3 V's.
    fn of(role: u32) -> Share {
        Share { first: role / 2, step: 2 }
    }
}

/// Copies the block-table entries of `share`'s segments of the key tile at `key0` (those
/// before `seqlen_k`) from the table row at `table` into `slots` ([`Smem::page_slots`]), as one
/// `cp.async` group: the lookups travel together and hold no register while in flight.
/// [`cp_async_wait_group`] before reading them; [`load_paged`] clamps what they hold.
///
/// # Safety
/// `table` holds the sequence's row of at least `ceil(seqlen_k / page_size)` entries.
#[inline(always)]
unsafe fn lookup_pages<const BN: usize>(slots: u32, table: *const i32, key0: u32, seqlen_k: u32, share: Share, p: &FwdParams) {
    const { assert!(BN / 16 <= MAX_SEGMENTS) };
    let (seg_shift, n) = segments::<BN>(key0, seqlen_k, p);
    let mut j = share.first;
    while j < n {
        let key = key0 + (j << seg_shift);
        unsafe { cp_async_ca_4(slots + 4 * j, table.add((key >> p.page_shift) as usize) as *const u8, true) };
        j += share.step;
    }
    cp_async_commit_group();
}

/// Loads `share`'s segments of the part of the key tile at key `key0` (a multiple of `BN`)
/// that lies before `seqlen_k` from paged caches, through the pages in `slots`
/// ([`lookup_pages`]), into the slabs at `dst`: `COLS` columns (K's `D` or V's `DV`) of
/// `EB`-byte elements; `exact`: no row past `seqlen_k` (V; see the module docs), with `map`'s
/// 8-row and 1-row twins `rows`. Returns the transaction bytes the loads bring.
///
/// # Safety
/// `slots` hold the tile's pages; `map` and `rows` are a paged launch's.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn load_paged<const COLS: usize, const BN: usize, const EB: usize>(
    dst: u32,
    map: *const TensorMap,
    rows: [*const TensorMap; 2],
    exact: bool,
    slots: u32,
    share: Share,
    key0: u32,
    seqlen_k: u32,
    head: u32,
    bar: u32,
    p: &FwdParams,
) -> u32 {
    let bytes = slab_row(COLS * EB);
    let slabs = COLS * EB / bytes;
    let (seg_shift, n) = segments::<BN>(key0, seqlen_k, p);
    let seg = 1u32 << seg_shift;
    let in_page = (1u32 << p.page_shift) - 1;
    let mut loaded = 0u32;
    let mut j = share.first;
    while j < n {
        let first = j << seg_shift;
        let key = key0 + first;
        let page = p.page_of(unsafe { ld_shared_b32(slots + 4 * j) } as i32) as i32;
        let row = (key & in_page) as i32;
        let valid = (seqlen_k - key).min(seg);
        let at = |r: u32, s: usize| dst + ((s * BN) as u32 + first + r) * bytes as u32;
        let copy = |m: *const TensorMap, r: u32| {
            for s in 0..slabs {
                unsafe { cp_async_bulk_tensor_4d_g2s(at(r, s), m, (bytes / EB * s) as i32, row + r as i32, head as i32, page, bar) };
            }
        };
        if !exact || valid == seg {
            copy(map, 0);
            loaded += seg;
        } else {
            let mut r = 0;
            while r + 8 <= valid {
                copy(rows[0], r);
                r += 8;
            }
            while r < valid {
                copy(rows[1], r);
                r += 1;
            }
            loaded += valid;
        }
        j += share.step;
    }
    loaded * (COLS * EB) as u32
}

/// Loads `D / 64` boxes of `ROWS` rows at sequence row `row` into the slabs at `dst`.
#[inline(always)]
pub(crate) unsafe fn load_tile<const D: usize, const ROWS: usize>(dst: u32, map: *const TensorMap, row: u32, head: u32, batch: u32, bar: u32) {
    unsafe { load_rows::<D, ROWS, 2>(dst, map, row, head, batch, bar) }
}

/// [`load_tile`] for elements of `EB` bytes: boxes of [`slab_row`]`(D * EB)` bytes.
#[inline(always)]
unsafe fn load_rows<const D: usize, const ROWS: usize, const EB: usize>(dst: u32, map: *const TensorMap, row: u32, head: u32, batch: u32, bar: u32) {
    let bytes = slab_row(D * EB);
    for s in 0..D * EB / bytes {
        unsafe {
            cp_async_bulk_tensor_4d_g2s(dst + (s * ROWS * bytes) as u32, map, (bytes / EB * s) as i32, row as i32, head as i32, batch as i32, bar)
        };
    }
}

/// Loads the K and V tiles of one work tile into the ring from position `start` on, K one tile
/// ahead of V, in the consumers' order (iteration `t`'s tile starts at key [`Work::key0`]);
/// K(0) is left to the caller. Returns the position after them.
#[inline(always)]
unsafe fn load_kv<const D: usize, const DV: usize, const BM: usize, const BN: usize, const STAGES: usize, const EB: usize, const PAGED: bool, M: MaskMod>(
    maps: Maps,
    smem: Smem<D, DV, BM, BN, STAGES, EB>,
    work: Work,
    start: PipeState<STAGES>,
    p: &FwdParams,
) -> PipeState<STAGES> {
    // A paged tile's V load reads the slots its K load filled, which the K load STAGES tiles
    // on (after it, in this thread's order) overwrites.
    const { assert!(!PAGED || STAGES >= 2) };
    let v_bytes = (BN * DV * EB) as u32;
    // Paged launches whose loads are shared: V is the helpers' ([`run_helper`]).
    let shared = PAGED && paged_shared::<BN>(p);
    let load_v = |pipe: PipeState<STAGES>, t: u32| unsafe {
        let full = smem.v_full(pipe.stage);
        if PAGED && !shared {
            // Through the pages K's load of this tile looked up (the stage's K slots are next
            // written for the tile STAGES on, after this load in this thread's order).
            wait_empty(smem.v_empty(pipe.stage), pipe.phase);
            let (slots, key0) = (smem.page_slots(pipe.stage, 0), work.key0::<BN>(p, t));
            let bytes = load_paged::<DV, BN, EB>(smem.v(pipe.stage), maps.v, maps.v_rows, true, slots, Share::ALL, key0, work.extent.seqlen_k, work.head_kv, full, p);
            mbarrier_arrive_expect_tx(full, bytes);
        } else if !PAGED {
            wait_empty(smem.v_empty(pipe.stage), pipe.phase);
            mbarrier_arrive_expect_tx(full, v_bytes);
            load_rows::<DV, BN, EB>(smem.v(pipe.stage), maps.v, work.key_row::<BN>(p, t), work.head_kv, work.map_batch, full);
        }
    };
    let mut pk = start;
    for t in 1..work.n_tiles {
        let pv = pk;
        pk.advance();
        unsafe { load_k::<D, DV, BM, BN, STAGES, EB, PAGED, M>(maps, smem, work, pk, t, p) };
        load_v(pv, t - 1);
    }
    load_v(pk, work.n_tiles - 1);
    pk.advance();
    pk
}

/// Loads the K tile of iteration `t` at ring position `pipe`; with [`MaskMod::BLOCKS`], tells the
/// consumers its first key ([`Smem::key_slot`]).
#[inline(always)]
unsafe fn load_k<const D: usize, const DV: usize, const BM: usize, const BN: usize, const STAGES: usize, const EB: usize, const PAGED: bool, M: MaskMod>(
    maps: Maps,
    smem: Smem<D, DV, BM, BN, STAGES, EB>,
    work: Work,
    pipe: PipeState<STAGES>,
    t: u32,
    p: &FwdParams,
) {
    let key0 = work.key0::<BN>(p, t);
    let row = work.extent.k_start + key0;
    let full = smem.k_full(pipe.stage);
    unsafe {
        let share = if PAGED && paged_shared::<BN>(p) { Share::of(0) } else { Share::ALL };
        if PAGED {
            // Before the wait, which its round trip then overlaps; the slots were last read
            // for this stage's previous K (and V) load, earlier in this thread's order.
            lookup_pages::<BN>(smem.page_slots(pipe.stage, 0), p.table_row(work.batch), key0, work.extent.seqlen_k, share, p);
        }
        wait_empty(smem.k_empty(pipe.stage), pipe.phase);
        if M::BLOCKS {
            st_shared_b32(smem.key_slot(pipe.stage), key0);
        }
        if PAGED {
            cp_async_wait_group::<0>();
            let bytes = load_paged::<D, BN, EB>(smem.k(pipe.stage), maps.k, maps.v_rows, false, smem.page_slots(pipe.stage, 0), share, key0, work.extent.seqlen_k, work.head_kv, full, p);
            mbarrier_arrive_expect_tx(full, bytes);
        } else {
            mbarrier_arrive_expect_tx(full, (BN * D * EB) as u32);
            load_rows::<D, BN, EB>(smem.k(pipe.stage), maps.k, row, work.head_kv, work.map_batch, full);
        }
    }
}

/// Runs the producer loop (one thread) over the CTA's work tiles, claiming each next tile
/// ([`claim_next`]) as it starts on the current one. For each: the first K tile (it may land
/// while the consumers still finish the previous tile), then, once the consumers released the
/// Q tile it goes to (two Q tiles: the one before the previous work tile's; one: the previous
/// one's, whose epilogue staged O there), the tile's index in that Q tile's slot and its Q,
/// then the remaining K/V tiles. After the last, the slot says "none" ([`NO_TILE`]).
#[inline(always)]
pub unsafe fn run<const D: usize, const DV: usize, const BM: usize, const BN: usize, const STAGES: usize, const EB: usize, const VARLEN: bool, const PAGED: bool, M: MaskMod>(
    maps: Maps,
    smem: Smem<D, DV, BM, BN, STAGES, EB>,
    p: &FwdParams,
) {
    unsafe {
        prefetch_tensormap(maps.q);
        prefetch_tensormap(maps.k);
        prefetch_tensormap(maps.v);
        if PAGED {
            prefetch_tensormap(maps.v_rows[0]);
            prefetch_tensormap(maps.v_rows[1]);
        }
    }
    let mut pipe = PipeState::<STAGES>::new();
    let total = tile_count(p);
    let mut tile = first_tile();
    let mut i = 0u32;
    // V tiles loaded (FP8: the transposing warps' end marker, see below).
    let mut v_tiles = 0u32;
    loop {
        // Variable-length launches: query blocks past their sequence's end are skipped here, so
        // the consumers never see them.
        while VARLEN && tile < total && work_for_tile::<BM, BN, VARLEN, PAGED, M>(p, tile).is_empty() {
            tile = unsafe { claim_next(p, tile) };
        }
        let (b, phase) = Smem::<D, DV, BM, BN, STAGES, EB>::q_turn(i);
        if tile >= total {
            unsafe {
                wait_empty(smem.q_empty(b), phase);
                st_shared_b32(smem.tile_slot(b), NO_TILE);
                mbarrier_arrive(smem.q_full(b));
                if PAGED {
                    mbarrier_arrive(smem.tile_posted(b));
                }
            }
            break;
        }
        let next = unsafe { claim_next(p, tile) };
        let work = work_for_tile::<BM, BN, VARLEN, PAGED, M>(p, tile);
        if work.n_tiles > 0 {
            unsafe { load_k::<D, DV, BM, BN, STAGES, EB, PAGED, M>(maps, smem, work, pipe, 0, p) };
        }
        unsafe {
            wait_empty(smem.q_empty(b), phase);
            st_shared_b32(smem.tile_slot(b), tile);
            if PAGED {
                mbarrier_arrive(smem.tile_posted(b));
            }
            mbarrier_arrive_expect_tx(smem.q_full(b), (BM * D * EB) as u32);
            load_rows::<D, BM, EB>(smem.q(b), maps.q, work.extent.q_start + work.m0, work.head, work.map_batch, smem.q_full(b));
        }
        if work.n_tiles > 0 {
            pipe = unsafe { load_kv::<D, DV, BM, BN, STAGES, EB, PAGED, M>(maps, smem, work, pipe, p) };
            v_tiles += work.n_tiles;
        }
        tile = next;
        i += 1;
    }
    if EB == 1 {
        // The transposing warps wait on the next V stage: a plain arrival there, after the
        // marker naming that position, ends them (see [`super::transpose`]). They read the
        // marker after every fill, so it is written only once they released every stage (each
        // release follows that thread's reads): a write any earlier races with those reads.
        unsafe {
            let mut end = pipe;
            for _ in 0..STAGES {
                wait_empty(smem.v_empty(end.stage), end.phase);
                end.advance();
            }
            st_shared_b32(smem.done_slot(), v_tiles + 1);
            mbarrier_arrive(smem.v_full(pipe.stage));
        }
    }
    unsafe { retire(p) };
}

/// Paged launches whose loads are [`paged_shared`]: thread `role` (1 to 3: the first of the
/// producer warpgroup's warp `role`) loads its [`Share`] of each key tile's K (role 2) or V
/// (roles 1 and 3). It walks the work tiles the producer's thread names
/// ([`Smem::tile_posted`]) and the K/V tiles of each in the consumers' order, at the ring
/// positions the producer's thread takes (carrying over from one work tile to the next), each
/// tile's table entries looked up into its own slots; each full barrier then counts two
/// arrivals. The tile slot it reads is rewritten only after the consumers finished that work
/// tile, which needs these loads.
#[inline(always)]
pub unsafe fn run_helper<const D: usize, const DV: usize, const BM: usize, const BN: usize, const STAGES: usize, const VARLEN: bool, M: MaskMod>(
    maps: Maps,
    smem: Smem<D, DV, BM, BN, STAGES, 2>,
    role: u32,
    p: &FwdParams,
) {
    if !paged_shared::<BN>(p) {
        return;
    }
    let (share, is_k) = (Share::of(role), role == 2);
    let map = if is_k { maps.k } else { maps.v };
    unsafe {
        prefetch_tensormap(map);
        if !is_k {
            prefetch_tensormap(maps.v_rows[0]);
            prefetch_tensormap(maps.v_rows[1]);
        }
    }
    let mut pipe = PipeState::<STAGES>::new();
    let total = tile_count(p);
    let mut i = 0u32;
    loop {
        let (b, phase) = Smem::<D, DV, BM, BN, STAGES, 2>::q_turn(i);
        let tile = unsafe {
            wait_full(smem.tile_posted(b), phase);
            ld_shared_b32(smem.tile_slot(b))
        };
        if tile >= total {
            break;
        }
        let work = work_for_tile::<BM, BN, VARLEN, true, M>(p, tile);
        for t in 0..work.n_tiles {
            let key0 = work.key0::<BN>(p, t);
            let slots = smem.page_slots(pipe.stage, role);
            unsafe {
                lookup_pages::<BN>(slots, p.table_row(work.batch), key0, work.extent.seqlen_k, share, p);
                let (empty, full) = if is_k { (smem.k_empty(pipe.stage), smem.k_full(pipe.stage)) } else { (smem.v_empty(pipe.stage), smem.v_full(pipe.stage)) };
                wait_empty(empty, pipe.phase);
                cp_async_wait_group::<0>();
                let bytes = if is_k {
                    load_paged::<D, BN, 2>(smem.k(pipe.stage), map, maps.v_rows, false, slots, share, key0, work.extent.seqlen_k, work.head_kv, full, p)
                } else {
                    load_paged::<DV, BN, 2>(smem.v(pipe.stage), map, maps.v_rows, true, slots, share, key0, work.extent.seqlen_k, work.head_kv, full, p)
                };
                mbarrier_arrive_expect_tx(full, bytes);
            }
            pipe.advance();
        }
        i += 1;
    }
}
