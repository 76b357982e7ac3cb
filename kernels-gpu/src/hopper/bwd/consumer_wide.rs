//! A consumer warpgroup at head_dim 256 ([`flashrs_abi::BwdSm90Split::HeadDim`]): the CTA has
//! 64 keys and both warpgroups work on all of them, because a 64 x 256 dK and dV (256
//! registers a thread) would not fit one warpgroup. Warpgroup `wg` owns head-dim columns
//! `128 wg ..` of dK and dV (64 + 64 registers) and query columns `32 wg ..` of each step's
//! scores. Per step:
//!
//! ```text
//! S^T part = K Q_wg^T, dP^T part = V dO_wg^T   (SS m64n32 over 256: keys x its 32 query rows)
//! P^T, dS^T parts (packed) -> shared memory; barrier of both consumers
//! dQ[:, half] = dS K[:, half]                  (two SS m64n64, both MN-major, over the 64 keys)
//! dV_wg += P^T dO[:, half], dK_wg += dS^T Q[:, half]   (SS m64n128, A K-major from the tiles)
//! ```
//!
//! The dQ parts are issued first and added to the accumulator from registers
//! ([`super::epilogue::add_dq_from_registers`]: shared memory has no room to stage them) while
//! the tensor cores run dV and dK. The two warpgroups' dQ parts are disjoint columns, so no
//! accumulator value is added twice per step. Accumulator layout: as the other consumer's
//! ([`super::scores`]), rows = keys.
use super::{Order, Walk};
use super::variant::Variant;
use super::consumer::DS_BARRIER;
use super::epilogue::{Turn, add_dq_from_registers, store_rows};
use super::scores::{ColumnStats, dscores, probabilities, store_transposed};
use super::smem::Smem;
use crate::arch::barrier::bar_sync_named;
use crate::arch::fence::fence_proxy_async_shared_cta;
use crate::arch::wgmma::wgmma_fence_operands;
use crate::hopper::gemm::{WgElement, gemm_abt, gemm_ss_tb_n128, gemm_tt_n64, pack_p, wait};
use crate::hopper::pipeline::{PipeState, release_own_reads, wait_full};
use flashrs_abi::{AccumLayout, BwdParams};

/// Runs consumer warpgroup `wg` (0, 1) over the walk; `tid` is the thread's index in the
/// warpgroup; `DET`: deterministic mode.
#[inline(always)]
pub unsafe fn run<T: WgElement, const D: usize, const BM: usize, const STAGES: usize, const DET: bool, K: Order, V: Variant>(
    p: &BwdParams,
    smem: Smem<D, BM, STAGES>,
    w: Walk<K>,
    wg: u32,
    tid: u32,
) {
    const { assert!(D == 256 && BM == 64) };
    let f = &p.fwd;
    let (warp, lane) = (tid / 32, tid % 32);
    let (g, t) = (lane / 4, lane % 4);
    let key = (w.n0 + 16 * warp + g) as i32;
    let causal = f.causal != 0;
    // This warpgroup's query columns of each step, and its head-dim columns (two 64-column
    // slabs of every tile, 64 rows each).
    let col0 = 32 * wg;
    let half = 128 * wg;
    let slab = |tile: u32, s: u32| tile + (half / 64 + s) * 64 * 128;

    let mut dk = [0.0f32; 64];
    let mut dv = [0.0f32; 64];
    let steps = w.steps();
    if steps > 0 {
        unsafe { wait_full(smem.kv_full(), 0) };
    }
    let mut pipe = PipeState::<STAGES>::new();
    for i in 0..steps {
        let (q_tile, do_tile) = (smem.q(pipe.stage), smem.dout(pipe.stage));
        let mut s = [0.0f32; 16];
        let mut dp = [0.0f32; 16];
        unsafe {
            wait_full(smem.q_full(pipe.stage), pipe.phase);
            gemm_abt::<T, D, 64, BM, 16>(&mut s, smem.k(), q_tile + col0 * 128);
            gemm_abt::<T, D, 64, BM, 16>(&mut dp, smem.v(), do_tile + col0 * 128);
        }
        let (h, m) = w.landed(i, smem.step(pipe.stage));
        let m0 = m * BM as u32;
        let stats = smem.stats(pipe.stage);
        let mask = w.mask(causal, w.n0, m0 + col0, 32);
        wait::<1, 16>(&mut s);
        V::modify::<16, 4>(p, &w.extent, h, &mut s, key, m0 + col0, t);
        let stats = ColumnStats::<BM> { stats, col0 };
        let bases = stats.all::<4>(ColumnStats::<BM>::BASES, t);
        probabilities::<16, 4>(&mut s, |i| bases[i], f.scale_log2, mask, key, t);
        let pf = pack_p::<T, 16, 2>(&s);
        let dsums = stats.all::<4>(ColumnStats::<BM>::DSUMS, t);
        wait::<0, 16>(&mut dp);
        dscores::<T, 16, 4, 2>(&mut dp, &pf, |i| dsums[i]);
        let dsf = pack_p::<T, 16, 2>(&dp);
        let (pt, ds) = (smem.pt(i % 2), smem.ds(i % 2));
        unsafe {
            store_transposed::<2>(pt, 64, &pf, 16 * warp + g, col0, g, t);
            store_transposed::<2>(ds, 64, &dsf, 16 * warp + g, col0, g, t);
        }
        // Both warpgroups' halves visible to the async proxy before the GEMMs read them.
        fence_proxy_async_shared_cta();
        bar_sync_named(DS_BARRIER, 256);
        let mut dq = [[0.0f32; 32]; 2];
        unsafe {
            gemm_tt_n64::<T, 4>(&mut dq[0], ds, slab(smem.k(), 0));
            gemm_tt_n64::<T, 4>(&mut dq[1], ds, slab(smem.k(), 1));
            gemm_ss_tb_n128::<T, BM, 4>(&mut dv, pt, slab(do_tile, 0));
            gemm_ss_tb_n128::<T, BM, 4>(&mut dk, ds, slab(q_tile, 0));
        }
        let accum = w.dq_chunk::<D>(p, h, m0, half);
        let before = w.turn::<DET, 64>(smem.step(pipe.stage)) - if DET { V::idle_before::<64>(p, &w.extent, h, m0, m0 + BM as u32) } else { 0 };
        let turn = Turn::at::<DET, K>(p, &w, h, m0, before);
        wait::<3, 32>(&mut dq[0]);
        unsafe {
            turn.wait_warpgroup(wg, tid);
            add_dq_from_registers(&dq[0], accum, tid);
        }
        wait::<2, 32>(&mut dq[1]);
        // The next 64 columns are the next chunk.
        unsafe {
            add_dq_from_registers(&dq[1], accum.add(AccumLayout::CHUNK), tid);
            turn.end_warpgroup(wg, tid, 1);
        }
        wait::<0, 64>(&mut dv);
        wgmma_fence_operands(&mut dk);
        unsafe { release_own_reads(smem.q_empty(pipe.stage)) };
        pipe.advance();
    }
    // This half's columns of each gradient's head dimension.
    let cols = |d: u32| d.saturating_sub(half);
    unsafe {
        store_rows::<T, 64>(&dv, 1.0, w.kv_row(p.dv, p.dv_strides, key, half), p.dv_strides[1], key, w.extent.seqlen_k, cols(f.head_dim_v), t);
        store_rows::<T, 64>(&dk, p.scale, w.kv_row(p.dk, p.dk_strides, key, half), p.dk_strides[1], key, w.extent.seqlen_k, cols(f.head_dim), t);
    }
}
