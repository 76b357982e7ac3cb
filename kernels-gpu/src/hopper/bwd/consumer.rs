//! A consumer warpgroup: 64 of the CTA's keys against every step's `BM` query rows.
//!
//! Per step, with this warpgroup's K and V rows as the A operands (so that the scores come out
//! transposed, keys x queries, and `P^T`, `dS^T` are already the A fragments of the dV and dK
//! GEMMs):
//!
//! ```text
//! S^T = K Q^T, dP^T = V dO^T       (SS wgmmas, m64 x BM, issued together)
//! P^T = exp(scale S^T - lse)       (lse per column, from the stage; masked scores give 0)
//! dS^T = P^T (dP^T - dsum)
//! dV += P^T dO, dK += dS^T Q       (RS wgmmas from the packed P^T, dS^T)
//! dS^T -> shared memory; barrier of both consumers
//! dQ part = dS K                   (SS wgmma, both MN-major: 64 x 64 of the step's BM x D,
//!                                   over all 128 keys)
//! ```
//!
//! dV and dK are issued before the barrier both warpgroups meet at, so that the tensor cores
//! have work while they wait for each other (and dK after the dQ part would need more
//! registers than there are: measured, ordering it so spills).
//!
//! The accumulator layout is [`crate::hopper::mask`]'s with rows = keys (`16 warp + g + 8h`)
//! and columns = query rows (`8i + 2t + j`). The two warpgroups split the step's `BM x D` dQ
//! into 64 x 64 parts, each over all 128 keys (so each needs the other's dS^T): at head_dim 128
//! by columns ([`BwdSm90Split::Columns`]), at head_dim 64, whose steps have 128 rows, by rows
//! ([`BwdSm90Split::Rows`]). The parts are disjoint, and each thread adds its fragments from
//! registers ([`super::epilogue::add_dq_from_registers`]).
use super::{Order, Walk};
use super::variant::Variant;
use super::epilogue::{Turn, add_dq_from_registers, store_rows};
use super::scores::{ColumnStats, dscores, probabilities, store_transposed};
use super::smem::Smem;
use crate::arch::barrier::bar_sync_named;
use crate::arch::fence::fence_proxy_async_shared_cta;
use crate::arch::wgmma::{FragA, wgmma_fence_operands};
use crate::hopper::gemm::{WgElement, gemm_pv, gemm_qk, gemm_tt_n64, pack_p, wait};
use crate::hopper::pipeline::{PipeState, release_own_reads, wait_full};
use flashrs_abi::{BwdParams, BwdSm90Config, BwdSm90Split};

/// Named barrier of both consumer warpgroups (256 threads): dS^T is in shared memory.
pub const DS_BARRIER: u32 = 3;

/// Runs consumer warpgroup `wg` (0, 1) over the walk; `tid` is the thread's index in the
/// warpgroup. Const generics: `SN = BM / 2` (score registers), `DN = D / 2` (dK, dV
/// registers), `KP = BM / 16` (k-steps of the dK, dV GEMMs), `CI = BM / 8` (column groups of
/// the scores), `DET` deterministic mode.
#[inline(always)]
pub unsafe fn run<T: WgElement, const D: usize, const BM: usize, const STAGES: usize, const SN: usize, const DN: usize, const KP: usize, const CI: usize, const DET: bool, K: Order, V: Variant>(
    p: &BwdParams,
    smem: Smem<D, BM, STAGES>,
    w: Walk<K>,
    wg: u32,
    tid: u32,
) {
    const { assert!(SN == BM / 2 && DN == D / 2 && KP == BM / 16 && CI == BM / 8 && ((BM == 64 && (D == 64 || D == 128)) || (BM == 128 && D == 64))) };
    let f = &p.fwd;
    let (warp, lane) = (tid / 32, tid % 32);
    let (g, t) = (lane / 4, lane % 4);
    // The thread's first key (h = 0) within the sequence.
    let key = (w.n0 + 64 * wg + 16 * warp + g) as i32;
    let causal = f.causal != 0;
    // This warpgroup's part of each step's dQ: rows `dq_row..` and columns `dq_col..` of it.
    let rows = matches!((BwdSm90Config { head_dim: D, block_m: BM, stages: STAGES }).split(), BwdSm90Split::Rows);
    let (dq_row, dq_col) = if rows { (64 * wg, 0) } else { (0, 64 * wg) };
    // Deterministic mode counts two a key block at each 64-row block: one from each warpgroup,
    // or (split by rows) both from the one whose rows they are.
    let counts = if rows { 2 } else { 1 };
    let (k_rows, v_rows) = (smem.k() + 64 * wg * 128, smem.v() + 64 * wg * 128);

    let mut dk = [0.0f32; DN];
    let mut dv = [0.0f32; DN];
    let steps = w.steps();
    if steps > 0 {
        unsafe { wait_full(smem.kv_full(), 0) };
    }
    let mut pipe = PipeState::<STAGES>::new();
    for i in 0..steps {
        let (q_tile, do_tile) = (smem.q(pipe.stage), smem.dout(pipe.stage));
        let mut s = [0.0f32; SN];
        let mut dp = [0.0f32; SN];
        unsafe {
            wait_full(smem.q_full(pipe.stage), pipe.phase);
            gemm_qk::<T, D, 128, BM, SN>(&mut s, k_rows, q_tile);
            gemm_qk::<T, D, 128, BM, SN>(&mut dp, v_rows, do_tile);
        }
        let (h, m) = w.landed(i, smem.step(pipe.stage));
        let m0 = m * BM as u32;
        let stats = ColumnStats::<BM> { stats: smem.stats(pipe.stage), col0: 0 };
        let mask = w.mask(causal, w.n0 + 64 * wg, m0, BM as u32);
        wait::<1, SN>(&mut s);
        V::modify::<SN, CI>(p, &w.extent, h, &mut s, key, m0, t);
        // 64-column steps read their statistics up front, 128-column ones where used
        // ([`ColumnStats::all`]).
        let eager = BM == 64;
        let (bases_at, dsums_at) = (ColumnStats::<BM>::BASES, ColumnStats::<BM>::DSUMS);
        let bases = if eager { stats.all::<CI>(bases_at, t) } else { [[0.0; 2]; CI] };
        probabilities::<SN, CI>(&mut s, |i| if eager { bases[i] } else { stats.get(bases_at, i, t) }, f.scale_log2, mask, key, t);
        // P^T rounded to T: the dV GEMM's A fragments, and the P that dS uses.
        let mut pf: [FragA; KP] = pack_p::<T, SN, KP>(&s);
        let dsums = if eager { stats.all::<CI>(dsums_at, t) } else { [[0.0; 2]; CI] };
        wait::<0, SN>(&mut dp);
        dscores::<T, SN, CI, KP>(&mut dp, &pf, |i| if eager { dsums[i] } else { stats.get(dsums_at, i, t) });
        let mut dsf: [FragA; KP] = pack_p::<T, SN, KP>(&dp);
        unsafe {
            gemm_pv::<T, D, BM, DN, KP>(&mut dv, &mut pf, do_tile);
            gemm_pv::<T, D, BM, DN, KP>(&mut dk, &mut dsf, q_tile);
        }
        let ds = smem.ds(i % 2);
        unsafe { store_transposed::<KP>(ds, 128, &dsf, 64 * wg + 16 * warp + g, 0, g, t) };
        // Both warpgroups' dS^T visible to the async proxy before the dQ GEMM reads it.
        fence_proxy_async_shared_cta();
        bar_sync_named(DS_BARRIER, 256);
        let mut dq = [0.0f32; 32];
        // dS^T's 64-column slab `dq_row / 64` and K's `dq_col / 64`: 128 key rows of 128 bytes
        // each.
        unsafe { gemm_tt_n64::<T, 8>(&mut dq, ds + (dq_row / 64) * 128 * 128, smem.k() + (dq_col / 64) * 128 * 128) };
        wait::<0, 32>(&mut dq);
        wgmma_fence_operands(&mut dv);
        wgmma_fence_operands(&mut dk);
        // Besides the wgmma reads (complete for the warpgroup after the wait above) every
        // thread read the stage's statistics with its own loads.
        let before = w.turn::<DET, 128>(smem.step(pipe.stage)) - if DET { V::idle_before::<128>(p, &w.extent, h, m0, m0 + BM as u32) } else { 0 };
        unsafe { release_own_reads(smem.q_empty(pipe.stage)) };
        pipe.advance();
        // A 128-row step's second half past the sequence has no block to add to.
        if m0 + dq_row < w.extent.seqlen_q {
            let turn = Turn::at::<DET, K>(p, &w, h, m0 + dq_row, before);
            unsafe {
                turn.wait_warpgroup(wg, tid);
                add_dq_from_registers(&dq, w.dq_chunk::<D>(p, h, m0 + dq_row, dq_col), tid);
                turn.end_warpgroup(wg, tid, counts);
            }
        }
    }
    unsafe {
        store_rows::<T, DN>(&dv, 1.0, w.kv_row(p.dv, p.dv_strides, key, 0), p.dv_strides[1], key, w.extent.seqlen_k, f.head_dim_v, t);
        store_rows::<T, DN>(&dk, p.scale, w.kv_row(p.dk, p.dk_strides, key, 0), p.dk_strides[1], key, w.extent.seqlen_k, f.head_dim, t);
    }
}
