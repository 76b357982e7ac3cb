//! Merging the partial results of warps that split a tile's keys.
//!
//! Decode blocks have at most 16 query rows: one 16-row MMA tile. Giving each warp the same rows
//! and a quarter of every K/V tile's keys (instead of 16 rows each, three quarters of them
//! padding) cuts the CTA's MMA work and the length of its compute phase by the number of warps.
//! Each warp keeps its own online softmax over its keys, so after the main loop the warps hold
//! normalised partial outputs and log-sum-exps of the same rows, which merge like split-KV
//! partials: `lse = log sum_w exp(lse_w)`, `O = sum_w exp(lse_w - lse) O_w`.
use crate::arch::barrier::bar_sync;
use crate::arch::mma::FragC;
use crate::arch::smem::{ld_shared_v4, st_shared_v4};
use crate::lse;

/// Bytes of shared memory [`merge_warps`] needs for `WN` warps of `MT x ON` fragments.
pub const fn scratch_bytes(wn: usize, mt: usize, on: usize) -> usize {
    wn * 32 * 16 * (mt * on + mt)
}

/// Whether warp `wn` of `WN` key-splitting warps owns output fragment `j` of `ON` (8 columns
/// each): warp `w` merges and stores fragments `w * ON / WN ..`. With one warp, every one.
#[inline(always)]
pub fn owns<const ON: usize, const WN: usize>(j: usize, wn: usize) -> bool {
    WN == 1 || j / (ON / WN) == wn
}

/// Merges the `WN` key-splitting warps' results: afterwards each warp holds the merged values
/// of the fragments it [`owns`] (the others are left as they were and must not be stored) and
/// the merged log-sum-exp of every row. The warps share the work: each reads the other warps'
/// copies of its own fragments only. Every thread of the CTA calls it (it synchronises the CTA
/// twice); `scratch` is shared memory of [`scratch_bytes`] that no copy is still filling and no
/// warp still reads. No warp-dependent branch precedes a barrier: with one, LLVM may duplicate
/// the barrier into both arms, and compute-sanitizer's synccheck counts warps waiting at
/// different `bar.sync` instructions as divergent.
#[inline(always)]
pub unsafe fn merge_warps<const MT: usize, const ON: usize, const WN: usize>(
    o: &mut [[FragC; ON]; MT],
    out: &mut [[f32; 2]; MT],
    scratch: u32,
    wn: usize,
    lane: usize,
) {
    const { assert!(ON % WN == 0) };
    // Warp w's fragment f at ((w * frags + f) * 32 + lane) * 16: each access is 32 consecutive
    // 16-byte vectors, free of bank conflicts.
    let frags = MT * ON + MT;
    let at = |w: usize, f: usize| scratch + (((w * frags + f) * 32 + lane) * 16) as u32;
    // Everyone is done with the K/V tiles the scratch overlays.
    bar_sync();
    for mt in 0..MT {
        for j in 0..ON {
            if !owns::<ON, WN>(j, wn) {
                unsafe { st_shared_v4(at(wn, mt * ON + j), o[mt][j].map(f32::to_bits)) };
            }
        }
        let l = [out[mt][0].to_bits(), out[mt][1].to_bits(), 0, 0];
        unsafe { st_shared_v4(at(wn, MT * ON + mt), l) };
    }
    bar_sync();
    for mt in 0..MT {
        // Each warp's weight for the lane's two rows: exp(lse_w - lse).
        let mut weight = [[0.0f32; WN]; 2];
        for h in 0..2 {
            let mut part = [0.0f32; WN];
            for (w, p) in part.iter_mut().enumerate() {
                *p = f32::from_bits(unsafe { ld_shared_v4(at(w, MT * ON + mt)) }[h]);
            }
            let base = lse::merge_base(part.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)));
            let e = part.map(|l| lse::part_weight(l, base));
            let sum: f32 = e.iter().sum();
            let inv = if sum > 0.0 { 1.0 / sum } else { 0.0 };
            weight[h] = e.map(|x| x * inv);
            out[mt][h] = lse::merged(base, sum);
        }
        // One copy of the sums per warp index, so that each warp issues only its own
        // fragments' (a runtime `owns` test would predicate every fragment's code instead).
        let (frags, copy) = (&mut o[mt], |w: usize, j: usize| at(w, mt * ON + j));
        const { assert!(WN <= 4) };
        match wn {
            0 => unsafe { merge_owned::<ON, WN, 0>(frags, &weight, copy) },
            1 if WN > 1 => unsafe { merge_owned::<ON, WN, 1>(frags, &weight, copy) },
            2 if WN > 2 => unsafe { merge_owned::<ON, WN, 2>(frags, &weight, copy) },
            _ if WN > 3 => unsafe { merge_owned::<ON, WN, 3>(frags, &weight, copy) },
            _ => {}
        }
    }
}

/// Warp `W`'s part of [`merge_warps`]: the fragments it [`owns`] become the weighted sums of
/// every warp's copy (its own from registers, warp `w`'s of fragment `j` from the scratch at
/// `copy(w, j)`); `W` is a constant, so its weight is a register, not an indexed array.
#[inline(always)]
unsafe fn merge_owned<const ON: usize, const WN: usize, const W: usize>(
    o: &mut [FragC; ON],
    weight: &[[f32; WN]; 2],
    copy: impl Fn(usize, usize) -> u32,
) {
    for j in 0..ON {
        if owns::<ON, WN>(j, W) {
            let mut acc = [0, 1, 2, 3].map(|e| o[j][e] * weight[e / 2][W]);
            for w in 0..WN {
                if w != W {
                    let v = unsafe { ld_shared_v4(copy(w, j)) };
                    for (e, a) in acc.iter_mut().enumerate() {
                        *a += f32::from_bits(v[e]) * weight[e / 2][w];
                    }
                }
            }
            o[j] = acc;
        }
    }
}
