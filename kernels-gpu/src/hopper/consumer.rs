//! A consumer warpgroup: 64 query rows against every key tile of the CTA's block, then the
//! epilogue. Two schedules of the same work:
//!
//! * [`mainloop_serial`]: per tile (last first) wait for K, `S = Q K^T`, wait, release K; mask
//!   where the tile reaches past the keys or the diagonal; online softmax; rescale O; P to 16
//!   bits; wait for V, `O += P V`, wait, release V. Simple, and the reference for the other.
//! * [`mainloop_pipelined`] (FlashAttention-3): the softmax of tile `t` runs while the tensor
//!   cores compute `P V` of tile `t - 1` (`S(t)` and `P V(t-1)` are issued back to back, then
//!   waited for one after the other), and the consumer warpgroups take turns issuing their
//!   GEMMs ([`Pingpong`]), so that one's softmax overlaps the others' GEMMs.
use super::epilogue::{store_lse, store_o, store_o_direct};
use super::gemm::{Operands, wait};
use super::mask;
use super::pipeline::{PipeState, release, wait_full};
use super::scheduler::{tile_count, work_for_tile};
use super::smem::Smem;
use super::softmax::{OnlineSoftmax, rescale};
use crate::arch::barrier::{bar_arrive_named, bar_sync_named, bar_warp_sync};
use crate::arch::fence::fence_proxy_async_shared_cta;
use crate::arch::shfl::shfl_sync_idx_u32;
use crate::arch::smem::ld_shared_b32;
use crate::arch::wgmma::FragA;
use crate::hopper::gemm::opaque;
use crate::dtype::Element;
use crate::mods::{MaskMod, ScoreMod};
use flashrs_abi::FwdParams;

/// Compiler-only: makes `v`'s current values inputs of an ordered (side-effecting) statement,
/// so their computation cannot move below the next wgmma wait or barrier.
#[inline(always)]
fn pin<const N: usize>(v: &mut [f32; N]) {
    crate::arch::wgmma::wgmma_fence_operands(v);
}

/// Turn-taking of the `n` consumer warpgroups for issuing GEMMs, round-robin (0, 1, .., n-1,
/// 0, ..). Named barrier `1 + n + wg` (after the epilogue's ids `1 ..= n`, see
/// [`super::epilogue::wg_barrier`]) is "warpgroup `wg` may issue": a warpgroup waits on its
/// own (`bar.sync`, 256 threads: its 128 plus the previous warpgroup's 128 arrivals) and, once
/// its GEMMs are issued, hands the turn to the next (`bar.arrive` on that one's). The last
/// warpgroup starts by handing the first turn to 0, and 0 takes one extra turn at the end so
/// that no arrival is left pending. Every warpgroup takes the same number of turns (one per
/// GEMM issue, and all see the same key tiles), so the turns stay in lockstep; and as only
/// one turn is ever in flight, a barrier never holds arrivals for two of its phases at once.
#[derive(Clone, Copy)]
pub struct Pingpong {
    wg: u32,
    n: u32,
    enabled: bool,
}

impl Pingpong {
    /// Warpgroup `wg` of `n` (at most 7: the named barriers run out past that); the last one
    /// gives 0 the first turn. Does nothing when not `enabled` (the serial schedule).
    #[inline(always)]
    pub fn new(wg: u32, n: u32, enabled: bool) -> Self {
        let turns = Pingpong { wg, n, enabled };
        if enabled && wg == n - 1 {
            bar_arrive_named(turns.barrier(0), 256);
        }
        turns
    }
    /// Named barrier of warpgroup `wg`'s turn.
    #[inline(always)]
    fn barrier(self, wg: u32) -> u32 {
        1 + self.n + wg
    }
    /// Waits for this warpgroup's turn.
    #[inline(always)]
    pub fn wait_turn(self) {
        if self.enabled {
            bar_sync_named(self.barrier(self.wg), 256);
        }
    }
    /// Gives the turn to the next warpgroup.
    #[inline(always)]
    pub fn pass_turn(self) {
        if self.enabled {
            let next = if self.wg + 1 == self.n { 0 } else { self.wg + 1 };
            bar_arrive_named(self.barrier(next), 256);
        }
    }
    /// Consumes the last turn the last warpgroup handed over (call once, after the last GEMM
    /// issue of the CTA's last work tile).
    #[inline(always)]
    pub fn finish(self) {
        if self.wg == 0 {
            self.wait_turn();
        }
    }
}

/// What both main loops need: the operands' shared-memory addresses, the score modification
/// and the masking.
#[derive(Clone, Copy)]
struct Rows<S, M, const D: usize, const DV: usize, const BM: usize, const BN: usize, const STAGES: usize, const EB: usize> {
    smem: Smem<D, DV, BM, BN, STAGES, EB>,
    /// This warpgroup's first Q row in slab 0.
    q: u32,
    score: S,
    mask: M,
    /// First sequence row of the warpgroup.
    wg_row0: i32,
    /// The thread's first sequence row.
    row: i32,
    /// The thread's first column within a tile (`2 * (lane % 4)`).
    col: i32,
    lane: u32,
    scale_log2: f32,
    /// The first key tile and the number of them (see [`super::scheduler::Work`]).
    first_tile: u32,
    n_tiles: u32,
}

impl<S: ScoreMod, M: MaskMod, const D: usize, const DV: usize, const BM: usize, const BN: usize, const STAGES: usize, const EB: usize>
    Rows<S, M, D, DV, BM, BN, STAGES, EB>
{
    /// The first key of the tile in K stage `stage`, as the producer gave it when the mask has
    /// [`MaskMod::BLOCKS`] ([`Smem::key_slot`]; read before the stage is released). Read by the
    /// lane that releases the stage for the warp, so that its arrival orders the read before
    /// the producer's next store there, then shared (a shuffled value is also one ptxas knows
    /// to be warp-uniform, which keeps the mask's branch uniform). 0 (unused) for the other
    /// masks.
    #[inline(always)]
    fn slot_key(&self, stage: u32) -> i32 {
        if !M::BLOCKS {
            return 0;
        }
        let mine = if self.lane == 0 { unsafe { ld_shared_b32(self.smem.key_slot(stage)) } } else { 0 };
        shfl_sync_idx_u32(mine, 0) as i32
    }

    /// Modifies the scores of `s` (tile of iteration `t`, whose [`Rows::slot_key`] is `key`),
    /// then masks them if the tile reaches past a row's keys. Tiles are walked from the last,
    /// or, with [`MaskMod::BLOCKS`], in the producer's order.
    #[inline(always)]
    fn modify<const SN: usize>(&self, s: &mut [f32; SN], t: u32, key: i32) {
        let col0 = if M::BLOCKS { key } else { ((self.first_tile + self.n_tiles - 1 - t) * BN as u32) as i32 };
        if S::ACTIVE {
            mask::modify(s, &self.score, self.row, col0 + self.col);
        }
        if self.mask.touches(self.wg_row0, self.wg_row0 + 64, col0, BN as i32) {
            // Opaque, so that LLVM keeps the tile's first key apart from the thread's columns
            // rather than folding `-BN` of it into them: that folding changed ptxas's register
            // assignment of the whole loop (the O rescale lost its operand reuse) and cost the
            // plain kernels 2-3% at head_dim 64 and 128, though this code never runs for tiles
            // that need no mask.
            mask::apply(s, &self.mask, self.row, opaque(col0 as u32) as i32, self.col);
        }
    }
}

/// The serial schedule (see the module docs).
#[inline(always)]
unsafe fn mainloop_serial<
    I: Operands,
    S: ScoreMod,
    M: MaskMod,
    const D: usize,
    const DV: usize,
    const BM: usize,
    const BN: usize,
    const STAGES: usize,
    const EB: usize,
    const SN: usize,
    const ON: usize,
    const KP: usize,
>(
    r: &Rows<S, M, D, DV, BM, BN, STAGES, EB>,
    o: &mut [f32; ON],
    softmax: &mut OnlineSoftmax,
    start: PipeState<STAGES>,
) -> PipeState<STAGES> {
    let mut pipe = start;
    for t in 0..r.n_tiles {
        let stage = pipe.stage;
        let mut s = [0.0f32; SN];
        unsafe {
            wait_full(r.smem.k_full(stage), pipe.phase);
            I::qk::<D, BM, BN, SN>(&mut s, r.q, r.smem.k(stage));
            wait::<0, SN>(&mut s);
        }
        let key = r.slot_key(stage);
        unsafe { release(r.smem.k_empty(stage), r.lane) };
        r.modify(&mut s, t, key);
        let alpha = softmax.update(&mut s, r.scale_log2);
        rescale(o, alpha);
        let mut p = I::pack_p::<SN, KP>(&s);
        unsafe {
            wait_full(r.smem.pv_full(stage), pipe.phase);
            I::pv::<DV, BN, ON, KP>(o, &mut p, r.smem.pv(stage));
            wait::<0, ON>(o);
            release(r.smem.pv_empty(stage), r.lane);
        }
        pipe.advance();
    }
    pipe
}

/// The pipelined schedule (see the module docs). Iteration `t >= 1` issues `S(t)` and then
/// `P(t-1) V(t-1)` (at this warpgroup's turn), waits for `S(t)` only, releases K(t), masks
/// and folds `S(t)` into the softmax while the tensor cores still run `P V`; then waits for
/// `P V`, releases V(t-1), rounds `P(t)` and rescales O for the new row max. Nothing is in
/// flight across the loop's back edge (otherwise LLVM's copies of loop-carried accumulators
/// would make ptxas serialise every wgmma).
///
/// ptxas schedules a `wgmma.wait_group` as early as its basic block allows, so the wait for
/// `P V` must not share a block with the softmax: the spin on K(t+1)'s barrier between them
/// (a loop, so a block boundary) keeps it below the softmax. (On the last tile there is no
/// next K, and there the softmax waits for `P V` first.)
#[inline(always)]
unsafe fn mainloop_pipelined<
    I: Operands,
    S: ScoreMod,
    M: MaskMod,
    const D: usize,
    const DV: usize,
    const BM: usize,
    const BN: usize,
    const STAGES: usize,
    const EB: usize,
    const SN: usize,
    const ON: usize,
    const KP: usize,
>(
    r: &Rows<S, M, D, DV, BM, BN, STAGES, EB>,
    o: &mut [f32; ON],
    softmax: &mut OnlineSoftmax,
    turns: Pingpong,
    start: PipeState<STAGES>,
) -> PipeState<STAGES> {
    let n = r.n_tiles;
    if n == 0 {
        return start;
    }
    let (smem, lane) = (r.smem, r.lane);
    let mut s = [0.0f32; SN];
    // Ring positions of the newest K tile and of the V tile P belongs to.
    let mut pk = start;
    let mut pv = pk;
    unsafe {
        wait_full(smem.k_full(pk.stage), pk.phase);
        turns.wait_turn();
        I::qk::<D, BM, BN, SN>(&mut s, r.q, smem.k(pk.stage));
        turns.pass_turn();
        wait::<0, SN>(&mut s);
    }
    let key = r.slot_key(pk.stage);
    unsafe { release(smem.k_empty(pk.stage), lane) };
    r.modify(&mut s, 0, key);
    // O is still zero: no rescale for the first tile.
    softmax.update(&mut s, r.scale_log2);
    let mut p: [FragA; KP] = I::pack_p::<SN, KP>(&s);
    if n > 1 {
        pk.advance();
        unsafe { wait_full(smem.k_full(pk.stage), pk.phase) };
    }
    for t in 1..n {
        unsafe {
            turns.wait_turn();
            I::qk::<D, BM, BN, SN>(&mut s, r.q, smem.k(pk.stage));
            wait_full(smem.pv_full(pv.stage), pv.phase);
            I::pv::<DV, BN, ON, KP>(o, &mut p, smem.pv(pv.stage));
            turns.pass_turn();
            wait::<1, SN>(&mut s);
        }
        let key = r.slot_key(pk.stage);
        unsafe { release(smem.k_empty(pk.stage), lane) };
        r.modify(&mut s, t, key);
        let mut alpha = softmax.update(&mut s, r.scale_log2);
        // Pinned, the softmax's results are computed before what follows (LLVM would sink
        // them below the wait, where they are used).
        pin(&mut s);
        pin(&mut alpha);
        pin(&mut softmax.sum);
        if t + 1 < n {
            pk.advance();
            unsafe { wait_full(smem.k_full(pk.stage), pk.phase) };
        }
        wait::<0, ON>(o);
        unsafe { release(smem.pv_empty(pv.stage), lane) };
        pv.advance();
        pin(&mut s);
        p = I::pack_p::<SN, KP>(&s);
        rescale(o, alpha);
    }
    unsafe {
        turns.wait_turn();
        wait_full(smem.pv_full(pv.stage), pv.phase);
        I::pv::<DV, BN, ON, KP>(o, &mut p, smem.pv(pv.stage));
        turns.pass_turn();
        wait::<0, ON>(o);
        release(smem.pv_empty(pv.stage), lane);
    }
    pv.advance();
    pv
}

/// Runs consumer warpgroup `wg` (0-based among the `BM / 64` consumers) over the CTA's work
/// tiles (`VARLEN`: of a variable-length launch; `PAGED`: over paged caches, whose key counts
/// come from `seqused_k`); `tid` is the thread's index in the warpgroup.
#[inline(always)]
pub unsafe fn run<
    I: Operands,
    T: Element,
    S: ScoreMod,
    M: MaskMod,
    const D: usize,
    const DV: usize,
    const BM: usize,
    const BN: usize,
    const STAGES: usize,
    const EB: usize,
    const SN: usize,
    const ON: usize,
    const KP: usize,
    const PIPELINED: bool,
    const VARLEN: bool,
    const PAGED: bool,
>(
    p: &FwdParams,
    smem: Smem<D, DV, BM, BN, STAGES, EB>,
    wg: u32,
    tid: u32,
) {
    // Named barriers: 0 (the CTA), the epilogue's and the ping-pong's per warpgroup.
    const { assert!(BM % 64 == 0 && 1 + 2 * (BM / 64) <= 16) };
    let lane = tid % 32;
    let turns = Pingpong::new(wg, (BM / 64) as u32, PIPELINED);
    let mut pipe = PipeState::<STAGES>::new();
    let total = tile_count(p);
    // A tile's work, its loaded lengths and block counts made visibly warp-uniform
    // ([`Work::warp_uniform`]).
    let work_of = |tile: u32| {
        let work = work_for_tile::<BM, BN, VARLEN, PAGED, M>(p, tile);
        if VARLEN || PAGED || work.blocks.is_some() { work.warp_uniform() } else { work }
    };
    let mut i = 0u32;
    loop {
        // Q tile `b` holds work tile `i`'s Q; its slot names the work tile (or none is left).
        let (b, phase) = Smem::<D, DV, BM, BN, STAGES, EB>::q_turn(i);
        unsafe { wait_full(smem.q_full(b), phase) };
        // Read by the lane that releases the Q tile for the warp (so the release covers the
        // read that the producer's next store to the slot must follow), then shared.
        let mine = if lane == 0 { unsafe { ld_shared_b32(smem.tile_slot(b)) } } else { 0 };
        let tile = shfl_sync_idx_u32(mine, 0);
        if tile >= total {
            break;
        }
        let work = work_of(tile);
        let wg_row0 = work.m0 + 64 * wg;
        let row = wg_row0 + 16 * (tid / 32) + lane / 4;
        // FP8: Q's and K's factors join the softmax scale (V's scales the output below).
        let scale_log2 = if EB == 1 {
            let (h, d) = (work.head_kv, &p.descale);
            p.scale_log2 * unsafe { d.factor(0, work.batch, h) * d.factor(2, work.batch, h) }
        } else {
            p.scale_log2
        };
        let rows = Rows::<S, M, D, DV, BM, BN, STAGES, EB> {
            smem,
            q: smem.q_rows(b, wg),
            score: S::new(p, work.batch, work.head, &work.extent),
            mask: M::new(p, work.batch, work.head, &work.extent),
            wg_row0: wg_row0 as i32,
            row: row as i32,
            col: 2 * (lane % 4) as i32,
            lane,
            scale_log2,
            first_tile: work.first_tile,
            n_tiles: work.n_tiles,
        };
        let mut o = [0.0f32; ON];
        let mut softmax = OnlineSoftmax::new(I::P_LOG2);
        pipe = if PIPELINED {
            unsafe { mainloop_pipelined::<I, S, M, D, DV, BM, BN, STAGES, EB, SN, ON, KP>(&rows, &mut o, &mut softmax, turns, pipe) }
        } else {
            unsafe { mainloop_serial::<I, S, M, D, DV, BM, BN, STAGES, EB, SN, ON, KP>(&rows, &mut o, &mut softmax, pipe) }
        };
        let lse = if S::SINK { softmax.finish_with_sink(&mut o, rows.scale_log2, rows.score.sink_log2()) } else { softmax.finish(&mut o, rows.scale_log2) };
        if EB == 1 {
            let v_descale = unsafe { p.descale.factor(1, work.batch, work.head_kv) };
            for x in o.iter_mut() {
                *x *= v_descale;
            }
        }

        // The epilogue's indices are derived afresh from opaque copies: computed before the
        // main loop (LLVM hoists what does not change from tile to tile), they would sit in
        // registers through it and spill.
        let (tid, wg, b) = (opaque(tid), opaque(wg), opaque(b));
        let lane = tid % 32;
        let work = work_of(opaque(tile));
        let row = work.m0 + 64 * wg + 16 * (tid / 32) + lane / 4;
        let e = work.extent;
        let (bi, h) = (work.batch as i64, work.head as i64);
        let [ob, or, oh] = p.o_strides;
        let out = (p.o as *mut u16).wrapping_offset((bi * ob + h * oh + e.q_start as i64 * or) as isize);
        unsafe {
            if EB == 1 {
                // The output's two bytes per element outgrow the FP8 Q tile it would be staged in.
                store_o_direct::<T, ON>(&o, tid, out, or, work.m0 + 64 * wg, e.seqlen_q, p.head_dim_v);
            } else {
                store_o::<T, DV, BM, ON>(&o, smem.q(b), wg, tid, out, or, work.m0, e.seqlen_q, p.head_dim_v);
            }
            if p.lse != 0 {
                let dst = (p.lse as *mut f32).add(e.lse_first(p, work.batch, work.head, VARLEN));
                store_lse(lse, dst, row, e.seqlen_q, lane);
            }
        }
        // The producer's next TMA load of Q into this tile (async proxy) overwrites what this
        // thread staged and read there (generic proxy): fence, then one arrival per warp.
        fence_proxy_async_shared_cta();
        bar_warp_sync();
        unsafe { release(smem.q_empty(b), lane) };
        i += 1;
    }
    turns.finish();
}
