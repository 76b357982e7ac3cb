//! A consumer warpgroup: 64 query rows against every key tile of the CTA's block.
//!
//! Per tile (last first): wait for K, issue `S = Q K^T`, wait for it and release K; mask if the
//! tile reaches past the keys or the diagonal; online softmax; rescale O; P to 16 bits; wait
//! for V, issue `O += P V`, wait and release V. Then normalise, store O and the log-sum-exp.
use super::config::BLOCK_M;
use super::epilogue::{store_lse, store_o};
use super::gemm::{WgElement, gemm_pv, gemm_qk, pack_p, wait};
use super::mask::Mask;
use super::pipeline::{PipeState, release, wait_full};
use super::scheduler::Work;
use super::smem::Smem;
use super::softmax::{OnlineSoftmax, rescale};
use crate::fwd::params::FwdParams;

/// Runs consumer warpgroup `wg` (0-based among consumers); `tid` is the thread's index in it.
#[inline(always)]
pub unsafe fn run<
    T: WgElement,
    const D: usize,
    const BN: usize,
    const STAGES: usize,
    const SN: usize,
    const ON: usize,
    const KP: usize,
>(
    p: &FwdParams,
    smem: Smem<D, BN, STAGES>,
    work: Work,
    wg: u32,
    tid: u32,
) {
    let lane = tid % 32;
    let mask = Mask {
        seqlen_k: p.seqlen_k as i32,
        causal_offset: (p.causal != 0).then_some(p.seqlen_k as i32 - p.seqlen_q as i32),
    };
    let wg_row0 = work.m0 + 64 * wg;
    let row = wg_row0 + 16 * (tid / 32) + lane / 4;
    let q = smem.q() + 64 * wg * 128;

    let mut o = [0.0f32; ON];
    let mut softmax = OnlineSoftmax::new();
    let mut pipe = PipeState::<STAGES>::new();
    // Always waited for, even without key tiles: the epilogue overwrites the Q tile.
    unsafe { wait_full(smem.q_full(), 0) };
    for t in 0..work.n_tiles {
        let col0 = ((work.n_tiles - 1 - t) * BN as u32) as i32;
        let stage = pipe.stage;
        let mut s = [0.0f32; SN];
        unsafe {
            wait_full(smem.k_full(stage), pipe.phase);
            gemm_qk::<T, D, BLOCK_M, BN, SN>(&mut s, q, smem.k(stage));
            wait::<0, SN>(&mut s);
            release(smem.k_empty(stage), lane);
        }
        if mask.touches(wg_row0 as i32, col0, BN as i32) {
            mask.apply(&mut s, row as i32, col0 + 2 * (lane % 4) as i32);
        }
        let alpha = softmax.update(&mut s, p.scale_log2);
        rescale(&mut o, alpha);
        let mut pf = pack_p::<T, SN, KP>(&s);
        unsafe {
            wait_full(smem.v_full(stage), pipe.phase);
            gemm_pv::<T, D, BN, ON, KP>(&mut o, &mut pf, smem.v(stage));
            wait::<0, ON>(&mut o);
            release(smem.v_empty(stage), lane);
        }
        pipe.advance();
    }
    let lse = softmax.finish(&mut o, p.scale_log2);

    let (b, h) = (work.batch as i64, work.head as i64);
    let [ob, or, oh] = p.o_strides;
    let out = (p.o as *mut u16).wrapping_offset((b * ob + h * oh) as isize);
    unsafe {
        store_o::<T, D, ON>(&o, smem.q(), wg, tid, out, or, work.m0, p.seqlen_q, p.head_dim);
        if p.lse != 0 {
            let bh = (work.batch * p.heads_q + work.head) as usize;
            let dst = (p.lse as *mut f32).add(bh * p.seqlen_q as usize);
            store_lse(lse, dst, row, p.seqlen_q, lane);
        }
    }
}
