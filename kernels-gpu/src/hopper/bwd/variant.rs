//! What a Hopper backward step does to its scores besides the causal mask and the sequence's
//! end ([`super::Walk::mask`]): nothing ([`Unmodified`]: the plain and block-sparse kernels),
//! or a score modification and a mask of their own ([`Modified`]: the `mods` kernels, with
//! [`Alibi`] and [`Window`]). A softcap's derivative pass over dS^T does not fit beside the
//! consumers' accumulators (tried: 200-800 bytes of spills at head_dim 64 and 128, with the
//! statistics read where used, and with the derivative folded into P^T before the dP GEMM's
//! wait), so calls with a softcap take the `mma.sync` modification kernels.
//!
//! A type rather than a flag, as [`super::Order`] is: every hook of [`Unmodified`] is nothing
//! or the plain kernels' own arithmetic, so their code stays what it was. The hooks work on a
//! warpgroup's transposed tile ([`super::scores`]'s layout: register `4i + 2h + j` is key
//! `key + 8h` against query row `row0 + 8i + 2t + j`). A modification kernel builds its score
//! modification and mask afresh at each use, from the parameters and the CTA's block index,
//! as the `mma.sync` ones do: held across the walk they would take registers the dK and dV
//! accumulators need.
use crate::arch::ids::block_idx_x;
use crate::mods::{Alibi, At, MaskMod, ScoreMod, Window};
use flashrs_abi::BwdParams;
use flashrs_abi::grid::{Extent, div_rem};

/// See the module docs.
pub trait Variant: Copy {
    /// The query blocks `first..end` (of `BM` rows, within `m_blocks`) whose rows see a key of
    /// the CTA's `n0..n0 + BN`, in batch entry `batch` of sequence extent `e`.
    fn query_blocks<const BM: usize, const BN: usize>(p: &BwdParams, e: &Extent, batch: u32, n0: u32, m_blocks: u32) -> (u32, u32);

    /// Modifies and masks, in place, the transposed raw scores `s` of query head `h` (before
    /// the probabilities): the thread's first key is `key`, its first query row `row0`.
    fn modify<const SN: usize, const I: usize>(p: &BwdParams, e: &Extent, h: u32, s: &mut [f32; SN], key: i32, row0: u32, t: u32);

    /// Deterministic mode: of the CTAs (of `BN` keys) before this one, those that add nothing
    /// to the query rows `m0..m_end` of head `h` because none of those rows sees their keys.
    fn idle_before<const BN: usize>(p: &BwdParams, e: &Extent, h: u32, m0: u32, m_end: u32) -> u32;
}

/// No modification: the plain kernels' walk (under causal masking from the first block with a
/// row that sees the first key) and nothing more.
#[derive(Clone, Copy)]
pub struct Unmodified;

impl Variant for Unmodified {
    #[inline(always)]
    fn query_blocks<const BM: usize, const BN: usize>(p: &BwdParams, e: &Extent, _: u32, n0: u32, m_blocks: u32) -> (u32, u32) {
        // The first query block with a row that sees key n0 (bottom-right causal diagonal).
        let first = if p.fwd.causal != 0 { ((n0 as i32 - (e.seqlen_k as i32 - e.seqlen_q as i32)).max(0) as u32 / BM as u32).min(m_blocks) } else { 0 };
        (first, m_blocks)
    }

    #[inline(always)]
    fn modify<const SN: usize, const I: usize>(_: &BwdParams, _: &Extent, _: u32, _: &mut [f32; SN], _: i32, _: u32, _: u32) {}

    #[inline(always)]
    fn idle_before<const BN: usize>(_: &BwdParams, _: &Extent, _: u32, _: u32, _: u32) -> u32 {
        0
    }
}

/// The launch's built-in modifications but a softcap: ALiBi ([`Alibi`], whose derivative is 1)
/// and a sliding window ([`Window`], causal masking folded into its right side).
#[derive(Clone, Copy)]
pub struct Modified;

/// The batch entry of this CTA (its block index located again, hidden so that LLVM does not
/// keep the first one's across the walk).
#[inline(always)]
fn batch(p: &BwdParams) -> u32 {
    let cta = crate::layout::opaque_i64(block_idx_x() as i64) as u32;
    let heads_kv = div_rem(p.fwd.heads_q, p.fwd.group).0;
    div_rem(div_rem(cta, p.n_blocks).0, heads_kv).0
}

/// Where register `4i + 2h + j` of a thread's transposed tile lies.
#[inline(always)]
fn at(key: i32, row0: u32, t: u32, i: usize, h: usize, j: usize) -> At {
    let (row, key) = ((row0 + 8 * i as u32 + 2 * t + j as u32) as i32, key + 8 * h as i32);
    At { row, key, rowf: row as f32, keyf: key as f32 }
}

impl Variant for Modified {
    #[inline(always)]
    fn query_blocks<const BM: usize, const BN: usize>(p: &BwdParams, e: &Extent, batch: u32, n0: u32, m_blocks: u32) -> (u32, u32) {
        // A window is every head's: the group's first head stands for them.
        let mask = Window::new(&p.fwd, batch, 0, e);
        let (first, end) = mask.query_blocks::<BM>(n0 as i32, (n0 + BN as u32).min(e.seqlen_k) as i32, e.seqlen_q);
        (first.min(m_blocks), end.min(m_blocks))
    }

    #[inline(always)]
    fn modify<const SN: usize, const I: usize>(p: &BwdParams, e: &Extent, h: u32, s: &mut [f32; SN], key: i32, row0: u32, t: u32) {
        const { assert!(SN == 4 * I) };
        // The window first: it needs no batch entry, and ALiBi's slope (per batch entry, or
        // shared) is read only where ALiBi is on.
        let mask = Window::new(&p.fwd, 0, h, e);
        for i in 0..I {
            for j in 0..2 {
                let bounds = mask.bounds(at(key, row0, t, i, 0, j).row);
                for hh in 0..2 {
                    if !Window::sees(bounds, key + 8 * hh as i32) {
                        s[4 * i + 2 * hh + j] = f32::NEG_INFINITY;
                    }
                }
            }
        }
        if p.fwd.mods.alibi != 0 {
            let score = Alibi::new(&p.fwd, batch(p), h, e);
            for i in 0..I {
                for hh in 0..2 {
                    for j in 0..2 {
                        let x = 4 * i + 2 * hh + j;
                        s[x] = score.score_part(0, s[x], at(key, row0, t, i, hh, j));
                    }
                }
            }
        }
    }

    #[inline(always)]
    fn idle_before<const BN: usize>(p: &BwdParams, e: &Extent, h: u32, m0: u32, m_end: u32) -> u32 {
        let mask = Window::new(&p.fwd, 0, h, e);
        mask.span(m0 as i32, m_end.min(e.seqlen_q) as i32).0 as u32 / BN as u32
    }
}
