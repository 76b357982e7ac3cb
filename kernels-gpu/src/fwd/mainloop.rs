//! The main loop's building blocks: global -> shared tile copies (cp.async) and the two warp
//! GEMMs, S = Q K^T and O += P V, on `mma.sync` m16n8k16 fed by `ldmatrix`.
use crate::arch::cp_async::cp_async_cg_16;
use crate::arch::ldmatrix::{ldmatrix_x2, ldmatrix_x4, ldmatrix_x4_trans};
use crate::arch::mma::{FragA, FragC};
use crate::arch::smem::{ld_shared_v4, st_shared_v4};
use crate::dtype::{Element, KvElement};
use crate::layout::{LaneAddr, SmemTile};
use flashrs_abi::FwdParams;

/// One thread's cursor for copying consecutive `ROWS x D` tiles of a `[seqlen, D]` matrix from
/// global memory into swizzled shared tiles with cp.async.
///
/// `THREADS` threads cover `THREADS / (D/8)` rows per pass, each always the same 16-byte chunk
/// column, so a thread's source advances by one stride per pass and its destination by
/// constants. The cursor holds only what changes from tile to tile (a pointer and a row
/// count: three registers) because it lives across the whole main loop, where registers are
/// the scarcest resource; strides come from the kernel parameters at each use.
#[derive(Clone, Copy)]
pub struct TileCursor<const ROWS: usize, const D: usize, const THREADS: usize> {
    /// This thread's element of the next tile's first row.
    src: *const u16,
    /// Rows left from that row to the end of the matrix (<= 0, or `i32::MIN` for a chunk past
    /// head_dim: everything is zero-filled).
    rows_left: i32,
}

impl<const ROWS: usize, const D: usize, const THREADS: usize> TileCursor<ROWS, D, THREADS> {
    const CHUNKS: usize = D / 8;
    const ROWS_PER_PASS: usize = THREADS / Self::CHUNKS;
    /// A pass must cover whole 8-row swizzle groups so that a thread's `row % 8` (and with it
    /// its swizzled chunk) is the same in every pass.
    const WHOLE_SWIZZLE_GROUPS: () =
        assert!(THREADS % (D / 8) == 0 && (THREADS / (D / 8)) % 8 == 0 && ROWS % (THREADS / (D / 8)) == 0);

    /// Thread `tid`'s cursor at row `row0` of the matrix at `base` (`row_stride` elements
    /// between its `seqlen` rows, `head_dim` valid columns).
    #[inline(always)]
    pub fn new(tid: u32, base: *const u16, row_stride: i64, seqlen: u32, row0: u32, head_dim: u32) -> Self {
        let () = Self::WHOLE_SWIZZLE_GROUPS;
        let (row, chunk) = Self::lane(tid);
        let first = (row0 + row) as i64 * row_stride + (chunk * 8) as i64;
        let rows_left = if chunk * 8 < head_dim { seqlen as i32 - (row0 + row) as i32 } else { i32::MIN };
        TileCursor { src: base.wrapping_offset(first as isize), rows_left }
    }

    /// [`Self::new`] for K or V, whose head dimensions (`head_dim`, `head_dim_v`) may differ:
    /// chunks below either are copied, each from its column clamped to this tensor's last
    /// chunk (`cols`), so that K and V cursors share one row count (one compare per pass for
    /// both, as when the head dimensions are equal) and no copy leaves the tensor. A clamped
    /// chunk lands in columns whose products vanish: V's past `head_dim_v` feed output
    /// columns that are never stored, K's past `head_dim` meet Q's zero-filled columns (so a
    /// non-finite K makes such a score NaN where the row's own columns would give an infinity).
    /// See [`copies_chunk`] and [`clamped_col`].
    #[inline(always)]
    pub fn new_within(tid: u32, base: *const u16, row_stride: i64, seqlen: u32, row0: u32, dims: [u32; 2], cols: u32) -> Self {
        let () = Self::WHOLE_SWIZZLE_GROUPS;
        let (row, chunk) = Self::lane(tid);
        let col = clamped_col(chunk, cols);
        let first = (row0 + row) as i64 * row_stride + col as i64;
        let rows_left = if copies_chunk(chunk, dims) { seqlen as i32 - (row0 + row) as i32 } else { i32::MIN };
        TileCursor { src: base.wrapping_offset(first as isize), rows_left }
    }

    /// The (row within a pass, chunk column) thread `tid` copies.
    #[inline(always)]
    fn lane(tid: u32) -> (u32, u32) {
        (tid / Self::CHUNKS as u32, tid % Self::CHUNKS as u32)
    }

    /// Issues the copies of the next tile into `dst` and moves on to the tile after it. Rows
    /// past the end and chunks past head_dim are zero-filled, so padding never feeds garbage (or
    /// NaN) into the MMAs.
    #[inline(always)]
    pub unsafe fn issue(&mut self, dst: SmemTile<ROWS, D>, tid: u32, row_stride: i64) {
        let (row, chunk) = Self::lane(tid);
        let dst = dst.lane_addr(row as usize, chunk as usize);
        // Opaque, so LLVM does not precompute one 64-bit pointer per pass outside the main loop.
        let step = crate::layout::opaque_i64(Self::ROWS_PER_PASS as i64 * row_stride);
        let mut from = self.src;
        for pass in 0..ROWS / Self::ROWS_PER_PASS {
            let valid = ((pass * Self::ROWS_PER_PASS) as i32) < self.rows_left;
            // An invalid copy reads nothing, but its address must still be a mapped one.
            let addr = if valid { from } else { self.src };
            unsafe { cp_async_cg_16(dst.at_row(pass * Self::ROWS_PER_PASS), addr as *const u8, valid) };
            from = from.wrapping_offset(step as isize);
        }
        self.src = self.src.wrapping_offset((ROWS as i64 * row_stride) as isize);
        self.rows_left = self.rows_left.saturating_sub(ROWS as i32);
    }
}

/// Whether K and V cursors copy 8-column chunk `chunk`: below either head dimension (see
/// [`TileCursor::new_within`]). An `||`, not a `max`: so written, kernels whose head dimensions
/// are equal keep the main loops they had before V could differ.
#[inline(always)]
fn copies_chunk(chunk: u32, [head_dim, head_dim_v]: [u32; 2]) -> bool {
    chunk * 8 < head_dim || chunk * 8 < head_dim_v
}

/// The first column a cursor copies for chunk `chunk` of a tensor of `cols` columns: its own,
/// or past the tensor's end its last chunk's (a select, not a `min`, for the same reason).
#[inline(always)]
fn clamped_col(chunk: u32, cols: u32) -> u32 {
    if chunk * 8 < cols { chunk * 8 } else { cols - 8 }
}

/// One thread's cursor for copying consecutive `ROWS x D` K and V tiles of one sequence out of
/// paged caches (`[num_pages, page_size, heads_kv, D]`, see [`FwdParams`]) with cp.async.
///
/// Rows are found through the block table, so a tile may span pages of any (power-of-two)
/// size: each thread looks up the page of every row it copies. K and V share a page per row,
/// so one lookup feeds both copies. The lookups run one tile ahead: a tile's copies use pages
/// loaded when the previous tile was issued, so the table loads' latency hides behind a tile
/// of compute instead of delaying the copies. Strides, the page shift and the clamp come from
/// the kernel parameters at each use. `C` is the cache's element type: FP8 rows are copied as
/// rows of `D` 16-bit units holding twice as many elements, their strides and widths (in
/// elements) shifted right by [`KvElement::SHR`].
#[derive(Clone, Copy)]
pub struct PagedCursor<const ROWS: usize, const D: usize, const THREADS: usize, C: KvElement> {
    /// This sequence's block-table row.
    table: *const i32,
    /// This thread's chunk of (its head's) row 0 of page 0, in K and in V.
    k: *const u16,
    v: *const u16,
    /// The sequence row this thread copies first in the next tile.
    row: u32,
    /// Rows at or past this are zero-filled: the sequence's key count, or 0 for a chunk past
    /// both head dimensions.
    limit: u32,
    /// The pages of the next tile's rows, one per copy pass.
    pages: [u32; MAX_PASSES],
    element: core::marker::PhantomData<C>,
}

/// Most copy passes per tile a [`PagedCursor`] supports (128-row tiles of 8-row passes).
const MAX_PASSES: usize = 16;

impl<const ROWS: usize, const D: usize, const THREADS: usize, C: KvElement> PagedCursor<ROWS, D, THREADS, C> {
    const SHR: u32 = C::SHR;
    /// The threads' rows and chunks are [`TileCursor`]'s.
    const ROWS_PER_PASS: usize = TileCursor::<ROWS, D, THREADS>::ROWS_PER_PASS;
    const PASSES: usize = ROWS / Self::ROWS_PER_PASS;

    /// Thread `tid`'s cursor at row `row0` of sequence `batch` (`seqlen` keys), head `h_kv`.
    #[inline(always)]
    pub fn new(tid: u32, p: &FwdParams, batch: u32, h_kv: u32, seqlen: u32, row0: u32) -> Self {
        let () = TileCursor::<ROWS, D, THREADS>::WHOLE_SWIZZLE_GROUPS;
        const { assert!(ROWS / (THREADS / (D / 8)) <= MAX_PASSES) };
        let (row, chunk) = TileCursor::<ROWS, D, THREADS>::lane(tid);
        // As [`TileCursor::new_within`]: chunks below either head dimension are copied, each
        // tensor's past its own from its last chunk.
        let at = |base: u64, head_stride: i64, cols: u32| {
            (base as *const u16).wrapping_offset(((h_kv as i64 * head_stride >> Self::SHR) + clamped_col(chunk, cols >> Self::SHR) as i64) as isize)
        };
        let mut cursor = PagedCursor {
            table: p.table_row(batch),
            k: at(p.k, p.k_strides[2], p.head_dim),
            v: at(p.v, p.v_strides[2], p.head_dim_v),
            row: row0 + row,
            limit: if copies_chunk(chunk, [p.head_dim >> Self::SHR, p.head_dim_v >> Self::SHR]) { seqlen } else { 0 },
            pages: [0; MAX_PASSES],
            element: core::marker::PhantomData,
        };
        cursor.pages = cursor.lookup(p);
        cursor
    }

    /// The pages of the rows this thread copies in the tile starting at `self.row`. Rows past
    /// the sequence's end are not looked up (the table row may end there); a negative entry
    /// wraps to a huge index, which the clamp to the last page catches like any other.
    #[inline(always)]
    fn lookup(&self, p: &FwdParams) -> [u32; MAX_PASSES] {
        let mut pages = [0u32; MAX_PASSES];
        for (pass, pg) in pages.iter_mut().enumerate().take(Self::PASSES) {
            let r = self.row + (pass * Self::ROWS_PER_PASS) as u32;
            if r < self.limit {
                *pg = p.page_of(unsafe { *self.table.add((r >> p.page_shift) as usize) });
            }
        }
        pages
    }

    /// Issues the copies of the next K and V tiles into `k_dst` / `v_dst`, moves on, and looks
    /// up the pages of the tile after. Rows past the sequence's end and chunks past head_dim
    /// are zero-filled.
    #[inline(always)]
    pub unsafe fn issue(&mut self, k_dst: SmemTile<ROWS, D>, v_dst: SmemTile<ROWS, D>, tid: u32, p: &FwdParams) {
        let (row, chunk) = TileCursor::<ROWS, D, THREADS>::lane(tid);
        let (k_dst, v_dst) = (k_dst.lane_addr(row as usize, chunk as usize), v_dst.lane_addr(row as usize, chunk as usize));
        let in_page = (1u32 << p.page_shift) - 1;
        for (pass, &pg) in self.pages.iter().enumerate().take(Self::PASSES) {
            let r = self.row + (pass * Self::ROWS_PER_PASS) as u32;
            let valid = r < self.limit;
            let off = |[page_stride, row_stride, _]: [i64; 3]| (pg as i64 * page_stride + (r & in_page) as i64 * row_stride) >> Self::SHR;
            // An invalid copy reads nothing, but its address must still be a mapped one.
            let (k, v) = if valid { (self.k.wrapping_offset(off(p.k_strides) as isize), self.v.wrapping_offset(off(p.v_strides) as isize)) } else { (self.k, self.v) };
            unsafe {
                cp_async_cg_16(k_dst.at_row(pass * Self::ROWS_PER_PASS), k as *const u8, valid);
                cp_async_cg_16(v_dst.at_row(pass * Self::ROWS_PER_PASS), v as *const u8, valid);
            }
        }
        self.row += ROWS as u32;
        self.pages = self.lookup(p);
    }
}

/// FP8 caches: permutes Q's tile in place so that the A fragments `ldmatrix` reads from it pair
/// with the B fragments [`gemm_qk_fp8`] widens from K. A 32-bit register of an FP8 K row holds
/// four consecutive columns (`4c..4c + 4` of a 16-column group, `c` the lane's quad position),
/// where a 16-bit B fragment wants `2c, 2c + 1` and `2c + 8, 2c + 9`; since `Q . K` sums over
/// the columns in any order, Q's columns are put in K's order instead: in each 16-column group,
/// the words (column pairs) `w0..w8` become `w0 w2 w4 w6 | w1 w3 w5 w7`. Once per CTA, after Q
/// landed; a barrier must follow.
#[inline(always)]
pub unsafe fn permute_q_fp8<const BM: usize, const D: usize, const THREADS: usize>(q: SmemTile<BM, D>, tid: u32) {
    let groups = D / 16;
    for i in 0..(BM * groups).div_ceil(THREADS) {
        let n = i * THREADS + tid as usize;
        if (BM * groups) % THREADS == 0 || n < BM * groups {
            let (row, g) = (n / groups, n % groups);
            let (lo, hi) = (q.chunk_addr(row, 2 * g), q.chunk_addr(row, 2 * g + 1));
            let (a, b) = unsafe { (ld_shared_v4(lo), ld_shared_v4(hi)) };
            unsafe {
                st_shared_v4(lo, [a[0], a[2], b[0], b[2]]);
                st_shared_v4(hi, [a[1], a[3], b[1], b[3]]);
            }
        }
    }
}

/// [`gemm_qk`] with K an FP8 tile (`DC` 16-bit units wide, as copied) and Q permuted by
/// [`permute_q_fp8`]: each `ldmatrix` of K gives a lane four columns of one key per register,
/// widened in registers into the B fragment of a 16-column k-step; no pass over shared memory,
/// no barrier. `k` addresses keys as V's operand does (lanes 0-7 rows `n0..`, lanes 8-15 rows
/// `n0 + 8..`, chunk 0), so that one `x2` load serves both key halves of a k-step and only one
/// k-step's fragments are live at a time.
#[inline(always)]
pub unsafe fn gemm_qk_fp8<T: Element, C: KvElement, const MT: usize, const SN: usize, const D: usize, const DC: usize>(
    q: LaneAddr<D>,
    k: LaneAddr<DC>,
) -> [[FragC; SN]; MT] {
    let mut s = [[[0.0f32; 4]; SN]; MT];
    // 16 columns a step: 2 chunks of Q, 1 of K.
    for ks in 0..D / 16 {
        let mut a = [[0u32; 4]; MT];
        for mt in 0..MT {
            a[mt] = unsafe { ldmatrix_x4(q.at(mt * 16, 2 * ks)) };
        }
        for np in 0..SN / 2 {
            // Keys n0..n0+8 and n0+8..n0+16 at columns 16ks..16ks+16. (An odd chunk flips the
            // bit of lanes 16-31, which x2 does not read.)
            let b = unsafe { ldmatrix_x2(k.at(np * 16, ks)) }.map(C::widen_halves::<T>);
            for mt in 0..MT {
                T::mma_m16n8k16(&mut s[mt][2 * np], &a[mt], &b[0]);
                T::mma_m16n8k16(&mut s[mt][2 * np + 1], &a[mt], &b[1]);
            }
        }
    }
    s
}

/// [`gemm_pv`] with V an FP8 tile. A transposed `ldmatrix` of it gives a lane one 16-bit unit
/// (two adjacent columns) of two keys per register; its even and odd bytes widen into the B
/// fragments of two output tiles, of V's even and of its odd columns. So `o[mt][2g]` and
/// `o[mt][2g + 1]` hold columns `16g + 2n` and `16g + 2n + 1` (`n` the fragment column), the
/// layout the epilogue's `column_pairs` stores from.
#[inline(always)]
pub unsafe fn gemm_pv_fp8<T: Element, C: KvElement, const MT: usize, const KP: usize, const ON: usize, const D: usize, const DC: usize>(
    p: &[[FragA; KP]; MT],
    v: LaneAddr<DC>,
    o: &mut [[FragC; ON]; MT],
) {
    const { assert!(ON % 4 == 0) };
    for kk in 0..KP {
        for dq in 0..D / 32 {
            // Keys 0-8 and 8-16 of the step at columns 32dq.., then at 32dq+16...
            let b = unsafe { ldmatrix_x4_trans(v.at(kk * 16, 2 * dq)) }.map(C::widen_interleaved::<T>);
            for mt in 0..MT {
                T::mma_m16n8k16(&mut o[mt][4 * dq], &p[mt][kk], &[b[0][0], b[1][0]]);
                T::mma_m16n8k16(&mut o[mt][4 * dq + 1], &p[mt][kk], &[b[0][1], b[1][1]]);
                T::mma_m16n8k16(&mut o[mt][4 * dq + 2], &p[mt][kk], &[b[2][0], b[3][0]]);
                T::mma_m16n8k16(&mut o[mt][4 * dq + 3], &p[mt][kk], &[b[2][1], b[3][1]]);
            }
        }
    }
}

/// The lane addresses the two GEMMs read through, one per operand (see [`LaneAddr`]); K's and
/// V's tiles are `DKV` 16-bit units wide (`D`, or half of it for FP8 caches).
#[derive(Clone, Copy)]
pub struct WarpOperands<const D: usize, const DKV: usize = D> {
    /// Q as the A operand: lanes 0-15 address rows 0-15 at chunk 0, lanes 16-31 at chunk 1.
    pub q: LaneAddr<D>,
    /// K as the B operand of S = QK^T: matrices (n0, k0), (n0, k0+8), (n0+8, k0), (n0+8, k0+8).
    pub k: LaneAddr<DKV>,
    /// V as the B operand of O = PV (row-major, loaded transposed): matrices (k0, d0),
    /// (k0+8, d0), (k0, d0+8), (k0+8, d0+8).
    pub v: LaneAddr<DKV>,
}

impl<const D: usize, const DKV: usize> WarpOperands<D, DKV> {
    /// Lane addresses for a warp whose rows start at `q_row0` in the Q tile and whose keys
    /// start at `key0` (a multiple of 16) in each K/V tile.
    #[inline(always)]
    pub fn new<const BM: usize, const BN: usize>(
        q: SmemTile<BM, D>,
        k: SmemTile<BN, DKV>,
        v: SmemTile<BN, DKV>,
        q_row0: usize,
        key0: usize,
        lane: usize,
    ) -> Self {
        WarpOperands {
            q: q.lane_addr(q_row0 + lane % 16, lane / 16),
            k: k.lane_addr(key0 + lane % 8 + 8 * (lane / 16), (lane / 8) % 2),
            v: v.lane_addr(key0 + lane % 8 + 8 * ((lane / 8) % 2), lane / 16),
        }
    }

    /// The same operands with K and V moved `bytes` further (another pipeline stage).
    #[inline(always)]
    pub fn kv_shifted(self, bytes: u32) -> Self {
        let shift = |a: LaneAddr<DKV>| LaneAddr::<DKV>::from_raw(a.raw() + bytes);
        WarpOperands { q: self.q.opaque(), k: shift(self.k).opaque(), v: shift(self.v).opaque() }
    }
}

/// `S[mt][j] = Q[rows of tile mt] . K[cols 8j..8j+8]^T` for the warp's `MT` row tiles.
#[inline(always)]
pub unsafe fn gemm_qk<T: Element, const MT: usize, const SN: usize, const D: usize>(ops: WarpOperands<D>) -> [[FragC; SN]; MT] {
    let mut s = [[[0.0f32; 4]; SN]; MT];
    for ks in 0..D / 16 {
        let mut a = [[0u32; 4]; MT];
        for mt in 0..MT {
            a[mt] = unsafe { ldmatrix_x4(ops.q.at(mt * 16, 2 * ks)) };
        }
        for np in 0..SN / 2 {
            let b = unsafe { ldmatrix_x4(ops.k.at(np * 16, 2 * ks)) };
            for mt in 0..MT {
                T::mma_m16n8k16(&mut s[mt][2 * np], &a[mt], &[b[0], b[1]]);
                T::mma_m16n8k16(&mut s[mt][2 * np + 1], &a[mt], &[b[2], b[3]]);
            }
        }
    }
    s
}

/// Rounds probabilities to `T`, laid out as A fragments: an m16n8 accumulator pair is exactly
/// an m16k16 A fragment. Done for the whole tile at once so the f32 scores are dead before
/// the PV GEMM (half the registers).
#[inline(always)]
pub fn pack_p<T: Element, const MT: usize, const SN: usize, const KP: usize>(s: &[[FragC; SN]; MT]) -> [[FragA; KP]; MT] {
    const { assert!(KP * 2 == SN) };
    let mut a = [[[0u32; 4]; KP]; MT];
    for mt in 0..MT {
        for kk in 0..KP {
            let (lo, hi) = (&s[mt][2 * kk], &s[mt][2 * kk + 1]);
            a[mt][kk] = [T::pack2(lo[0], lo[1]), T::pack2(lo[2], lo[3]), T::pack2(hi[0], hi[1]), T::pack2(hi[2], hi[3])];
        }
    }
    a
}

/// `O += P . V` with P from [`pack_p`].
#[inline(always)]
pub unsafe fn gemm_pv<T: Element, const MT: usize, const KP: usize, const ON: usize, const D: usize>(
    p: &[[FragA; KP]; MT],
    ops: WarpOperands<D>,
    o: &mut [[FragC; ON]; MT],
) {
    for kk in 0..KP {
        for dp in 0..ON / 2 {
            let b = unsafe { ldmatrix_x4_trans(ops.v.at(kk * 16, 2 * dp)) };
            for mt in 0..MT {
                T::mma_m16n8k16(&mut o[mt][2 * dp], &p[mt][kk], &[b[0], b[1]]);
                T::mma_m16n8k16(&mut o[mt][2 * dp + 1], &p[mt][kk], &[b[2], b[3]]);
            }
        }
    }
}
