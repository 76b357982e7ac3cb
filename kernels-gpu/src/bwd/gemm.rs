//! Warp GEMMs on `mma.sync` m16n8k16 with both operands in swizzled shared memory, in any of
//! the four storages the backward's five GEMMs need.
//!
//! An operand tile is stored row-major either along its reduction dimension k (`[m][k]` for A,
//! `[n][k]` for B: Q, K, dO, V, dS as `S = Q K^T`, `dP = dO V^T`, `dQ = dS K` read them) or
//! across it (`[k][m]`, `[k][n]`: P and dS as the A operands of `dV = P^T dO`, `dK = dS^T Q`;
//! dO, Q and K as B operands). Across-k storage is read with `ldmatrix.trans`, which hands each
//! lane the transposed pairs. Either way one `ldmatrix.x4` loads a whole A fragment (16 x 16)
//! or two B fragments (two 8-column tiles), and the four 8x8 matrices' rows are addressed by
//! the lanes in one of two patterns:
//!
//! * `(lane % 16, lane / 16)`: rows 0-15 at chunk 0, then at chunk 1. Matrices (r0, c0), (r8,
//!   c0), (r0, c1), (r8, c1): an along-k A fragment `a0..a3`, or across-k B's two tiles.
//! * `(lane % 8 + 8 * (lane / 16), (lane / 8) % 2)`: matrices (r0, c0), (r0, c1), (r8, c0),
//!   (r8, c1): along-k B's two tiles (`n` rows 0-7 then 8-15), or across-k A.
use crate::arch::ldmatrix::{ldmatrix_x4, ldmatrix_x4_trans};
use crate::arch::mma::{FragA, FragC};
use crate::dtype::Element;
use crate::layout::{LaneAddr, SmemTile};

/// A warp's view of one operand tile: `ACROSS` when it is stored across the reduction
/// dimension (read transposed).
#[derive(Clone, Copy)]
pub struct Operand<const COLS: usize, const ACROSS: bool> {
    addr: LaneAddr<COLS>,
}

impl<const COLS: usize, const ACROSS: bool> Operand<COLS, ACROSS> {
    /// The A operand in `tile`, the warp's part starting at tile row `row0` and chunk `chunk0`
    /// (a multiple of the power-of-two chunks the warp's part spans, see [`LaneAddr`]): along
    /// k, rows are m and chunks k; across k, rows are k and chunks m.
    #[inline(always)]
    pub fn a<const ROWS: usize>(tile: SmemTile<ROWS, COLS>, row0: usize, chunk0: usize, lane: usize) -> Self {
        Self::at(tile, row0, chunk0, lane, !ACROSS)
    }

    /// The B operand in `tile` (as [`Operand::a`]; along k rows are n, across k rows are k).
    #[inline(always)]
    pub fn b<const ROWS: usize>(tile: SmemTile<ROWS, COLS>, row0: usize, chunk0: usize, lane: usize) -> Self {
        Self::at(tile, row0, chunk0, lane, ACROSS)
    }

    #[inline(always)]
    fn at<const ROWS: usize>(tile: SmemTile<ROWS, COLS>, row0: usize, chunk0: usize, lane: usize, rows16: bool) -> Self {
        let (r, c) = if rows16 { (lane % 16, lane / 16) } else { (lane % 8 + 8 * (lane / 16), (lane / 8) % 2) };
        Operand { addr: tile.lane_addr(row0 + r, chunk0 + c) }
    }

    /// The same operand, hidden from the optimiser (see [`LaneAddr::opaque`]): made once per
    /// step of the walk, so that LLVM keeps one base register instead of one per load.
    #[inline(always)]
    pub fn opaque(self) -> Self {
        Operand { addr: self.addr.opaque() }
    }

    /// The fragments of 16-wide block `i` of the warp's m (A: one A fragment) or n (B: two B
    /// fragments, `[b0, b1]` of 8-column tile `2i` then of `2i + 1`) at k-step `ks`.
    #[inline(always)]
    pub unsafe fn load(self, i: usize, ks: usize) -> [u32; 4] {
        let addr = self.addr;
        unsafe { if ACROSS { ldmatrix_x4_trans(addr.at(ks * 16, 2 * i)) } else { ldmatrix_x4(addr.at(i * 16, 2 * ks)) } }
    }
}

/// `acc[mt][nt] += A[16 mt..][..] * B[..][8 nt..]` over `k_steps` k-steps of 16 (a constant
/// of the instantiation: the loops unroll).
#[inline(always)]
pub unsafe fn mma_tiles<T: Element, const MT: usize, const NT: usize, const CA: usize, const XA: bool, const CB: usize, const XB: bool>(
    acc: &mut [[FragC; NT]; MT],
    a: Operand<CA, XA>,
    b: Operand<CB, XB>,
    k_steps: usize,
) {
    const { assert!(NT % 2 == 0) };
    for ks in 0..k_steps {
        let mut fa: [FragA; MT] = [[0; 4]; MT];
        for (mt, f) in fa.iter_mut().enumerate() {
            *f = unsafe { a.load(mt, ks) };
        }
        for np in 0..NT / 2 {
            let fb = unsafe { b.load(np, ks) };
            for mt in 0..MT {
                T::mma_m16n8k16(&mut acc[mt][2 * np], &fa[mt], &[fb[0], fb[1]]);
                T::mma_m16n8k16(&mut acc[mt][2 * np + 1], &fa[mt], &[fb[2], fb[3]]);
            }
        }
    }
}

/// A warp's f32 tile rounded to `T`, two elements per register: `[mt][nt][h]` holds rows
/// `g + 8h`, columns `2t`, `2t + 1` of 16 x 8 tile (mt, nt).
#[inline(always)]
pub fn pack_tile<T: Element, const NT: usize>(acc: &[[FragC; NT]; 2]) -> [[[u32; 2]; NT]; 2] {
    let mut out = [[[0u32; 2]; NT]; 2];
    for mt in 0..2 {
        for nt in 0..NT {
            for h in 0..2 {
                out[mt][nt][h] = T::pack2(acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);
            }
        }
    }
    out
}

/// The shared-memory address of `[mt][nt][h]` of a [`pack_tile`] tile stored into `tile` at
/// (`row0`, `col0`).
#[inline(always)]
fn packed_addr<const ROWS: usize, const COLS: usize>(tile: SmemTile<ROWS, COLS>, row0: usize, col0: usize, lane: usize, [mt, nt, h]: [usize; 3]) -> u32 {
    tile.chunk_addr(row0 + mt * 16 + lane / 4 + 8 * h, (col0 + nt * 8) / 8) + (lane % 4) as u32 * 4
}

/// Stores a [`pack_tile`] tile into `tile` at (`row0`, `col0`) (as [`store_tile`]).
#[inline(always)]
pub unsafe fn store_packed<const NT: usize, const ROWS: usize, const COLS: usize>(packed: &[[[u32; 2]; NT]; 2], tile: SmemTile<ROWS, COLS>, row0: usize, col0: usize, lane: usize) {
    for mt in 0..2 {
        for nt in 0..NT {
            for h in 0..2 {
                unsafe { crate::arch::smem::st_shared_b32(packed_addr(tile, row0, col0, lane, [mt, nt, h]), packed[mt][nt][h]) };
            }
        }
    }
}

/// Reads back what this lane's [`store_packed`] stored (no barrier needed: its own words).
#[inline(always)]
pub unsafe fn load_packed<const NT: usize, const ROWS: usize, const COLS: usize>(tile: SmemTile<ROWS, COLS>, row0: usize, col0: usize, lane: usize) -> [[[u32; 2]; NT]; 2] {
    let mut out = [[[0u32; 2]; NT]; 2];
    for mt in 0..2 {
        for nt in 0..NT {
            for h in 0..2 {
                out[mt][nt][h] = unsafe { crate::arch::smem::ld_shared_b32(packed_addr(tile, row0, col0, lane, [mt, nt, h])) };
            }
        }
    }
    out
}

/// Rounds a warp's f32 tile to `T` and stores it into `tile` at (`row0`, `col0`) in the
/// accumulator layout (lane `(g, t)` holds rows `g`, `g + 8` and columns `2t`, `2t + 1` of each
/// 16 x 8 tile), for other warps to read as an operand.
#[inline(always)]
pub unsafe fn store_tile<T: Element, const NT: usize, const ROWS: usize, const COLS: usize>(
    acc: &[[FragC; NT]; 2],
    tile: SmemTile<ROWS, COLS>,
    row0: usize,
    col0: usize,
    lane: usize,
) {
    unsafe { store_packed::<NT, ROWS, COLS>(&pack_tile::<T, NT>(acc), tile, row0, col0, lane) };
}
