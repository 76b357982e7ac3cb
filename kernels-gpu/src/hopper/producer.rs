//! The producer: one thread of the producer warpgroup issues every TMA load of the CTA.
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
use super::pipeline::{PipeState, wait_empty};
use super::scheduler::{NO_TILE, Work, claim_next, first_tile, retire, tile_count, work_for_tile};
use super::fp8::slab_row;
use super::smem::Smem;
use crate::arch::mbarrier::{mbarrier_arrive, mbarrier_arrive_expect_tx};
use crate::mods::MaskMod;
use crate::arch::smem::st_shared_b32;
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
unsafe fn load_kv<const D: usize, const DV: usize, const BM: usize, const BN: usize, const STAGES: usize, const EB: usize, M: MaskMod>(
    maps: Maps,
    smem: Smem<D, DV, BM, BN, STAGES, EB>,
    work: Work,
    start: PipeState<STAGES>,
    p: &FwdParams,
) -> PipeState<STAGES> {
    let v_bytes = (BN * DV * EB) as u32;
    let load_v = |pipe: PipeState<STAGES>, t: u32| unsafe {
        wait_empty(smem.v_empty(pipe.stage), pipe.phase);
        mbarrier_arrive_expect_tx(smem.v_full(pipe.stage), v_bytes);
        load_rows::<DV, BN, EB>(smem.v(pipe.stage), maps.v, work.key_row::<BN>(p, t), work.head_kv, work.map_batch, smem.v_full(pipe.stage));
    };
    let mut pk = start;
    for t in 1..work.n_tiles {
        let pv = pk;
        pk.advance();
        unsafe { load_k::<D, DV, BM, BN, STAGES, EB, M>(maps, smem, work, pk, t, p) };
        load_v(pv, t - 1);
    }
    load_v(pk, work.n_tiles - 1);
    pk.advance();
    pk
}

/// Loads the K tile of iteration `t` at ring position `pipe`; with [`MaskMod::BLOCKS`], tells the
/// consumers its first key ([`Smem::key_slot`]).
#[inline(always)]
unsafe fn load_k<const D: usize, const DV: usize, const BM: usize, const BN: usize, const STAGES: usize, const EB: usize, M: MaskMod>(
    maps: Maps,
    smem: Smem<D, DV, BM, BN, STAGES, EB>,
    work: Work,
    pipe: PipeState<STAGES>,
    t: u32,
    p: &FwdParams,
) {
    let key0 = work.key0::<BN>(p, t);
    let row = work.extent.k_start + key0;
    unsafe {
        wait_empty(smem.k_empty(pipe.stage), pipe.phase);
        if M::BLOCKS {
            st_shared_b32(smem.key_slot(pipe.stage), key0);
        }
        mbarrier_arrive_expect_tx(smem.k_full(pipe.stage), (BN * D * EB) as u32);
        load_rows::<D, BN, EB>(smem.k(pipe.stage), maps.k, row, work.head_kv, work.map_batch, smem.k_full(pipe.stage));
    }
}

/// Runs the producer loop (one thread) over the CTA's work tiles, claiming each next tile
/// ([`claim_next`]) as it starts on the current one. For each: the first K tile (it may land
/// while the consumers still finish the previous tile), then, once the consumers released the
/// Q tile it goes to (two Q tiles: the one before the previous work tile's; one: the previous
/// one's, whose epilogue staged O there), the tile's index in that Q tile's slot and its Q,
/// then the remaining K/V tiles. After the last, the slot says "none" ([`NO_TILE`]).
#[inline(always)]
pub unsafe fn run<const D: usize, const DV: usize, const BM: usize, const BN: usize, const STAGES: usize, const EB: usize, const VARLEN: bool, M: MaskMod>(
    maps: Maps,
    smem: Smem<D, DV, BM, BN, STAGES, EB>,
    p: &FwdParams,
) {
    unsafe {
        prefetch_tensormap(maps.q);
        prefetch_tensormap(maps.k);
        prefetch_tensormap(maps.v);
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
        while VARLEN && tile < total && work_for_tile::<BM, BN, VARLEN, M>(p, tile).is_empty() {
            tile = unsafe { claim_next(p, tile) };
        }
        let (b, phase) = Smem::<D, DV, BM, BN, STAGES, EB>::q_turn(i);
        if tile >= total {
            unsafe {
                wait_empty(smem.q_empty(b), phase);
                st_shared_b32(smem.tile_slot(b), NO_TILE);
                mbarrier_arrive(smem.q_full(b));
            }
            break;
        }
        let next = unsafe { claim_next(p, tile) };
        let work = work_for_tile::<BM, BN, VARLEN, M>(p, tile);
        if work.n_tiles > 0 {
            unsafe { load_k::<D, DV, BM, BN, STAGES, EB, M>(maps, smem, work, pipe, 0, p) };
        }
        unsafe {
            wait_empty(smem.q_empty(b), phase);
            st_shared_b32(smem.tile_slot(b), tile);
            mbarrier_arrive_expect_tx(smem.q_full(b), (BM * D * EB) as u32);
            load_rows::<D, BM, EB>(smem.q(b), maps.q, work.extent.q_start + work.m0, work.head, work.map_batch, smem.q_full(b));
        }
        if work.n_tiles > 0 {
            pipe = unsafe { load_kv::<D, DV, BM, BN, STAGES, EB, M>(maps, smem, work, pipe, p) };
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
