//! The backward's row kernels, one warp per (query row, head): before the main kernel,
//! `dsum = dot(dO, O)` (where the accumulator layout keeps it) and a zeroed dQ accumulator;
//! after it, dQ from the accumulator.
//!
//! Rows are numbered per head. In the `Rows` layout as the log-sum-exp's: `b * seqlen_q + s`
//! of a fixed-length launch, the packed row of a variable-length one (which needs no offsets
//! here: a packed row is its own index). In the `Fragments` layout by sequence, each padded to
//! its launch's `m_blocks` 64-row blocks (`b * 64 m_blocks + s`), so a warp finds its sequence
//! without searching the offsets, and padding rows write their own statistics. Lane `c` takes
//! the row's 16-byte chunk `c` (head_dim <= 256: one pass).
use crate::arch::shfl::warp_sum_f32;
use crate::arch::ids::{block_idx_x, thread_idx_x};
use crate::dtype::Element;
use crate::lse;
use flashrs_abi::bwd::BWD_ROW_THREADS;
use flashrs_abi::grid::{Extent, div_rem};
use flashrs_abi::{AccumLayout, BwdParams, FragmentBlocks, FwdParams};

/// 16 bytes, for vector loads and stores.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct Chunk([u32; 4]);

/// Where one warp's (row, head) lies.
struct Row {
    /// Its index in the log-sum-exp (and dsum, and the accumulator's rows).
    lse: usize,
    /// Element offsets of its first element in a `[batch, seqlen, heads, D]` tensor, from the
    /// (batch, row, head) strides: `b * sb + s * sr + h * sh`.
    b: i64,
    s: i64,
    h: i64,
}

impl Row {
    /// Row `s` of query head `h` of batch entry `b`, whose sequence has extent `e` (`varlen`: the
    /// tensors' rows are packed, one batch entry).
    #[inline(always)]
    fn of(f: &FwdParams, e: &Extent, b: u32, h: u32, s: u32, varlen: bool) -> Row {
        let lse = e.lse_first(f, b, h, varlen) + s as usize;
        Row { lse, b: if varlen { 0 } else { b as i64 }, s: (e.q_start + s) as i64, h: h as i64 }
    }

    #[inline(always)]
    fn offset(&self, [sb, sr, sh]: [i64; 3]) -> isize {
        (self.b * sb + self.s * sr + self.h * sh) as isize
    }
}

/// This warp's (head, row number), or `None` past the last head.
#[inline(always)]
fn this_warp(p: &BwdParams) -> Option<(u32, u32)> {
    let warp = block_idx_x() * (BWD_ROW_THREADS / 32) as u32 + thread_idx_x() / 32;
    let (h, r) = div_rem(warp, p.rows);
    (h < p.fwd.heads_q).then_some((h, r))
}

/// This warp's row in the `Rows` layout's numbering (the log-sum-exp's), or `None` past the
/// last.
#[inline(always)]
fn this_row(p: &BwdParams) -> Option<Row> {
    let f = &p.fwd;
    let (h, r) = this_warp(p)?;
    let varlen = f.cu_seqlens_q != 0;
    // Variable-length: the packed row is its own index (a sequence starting at row 0).
    let (b, s) = if varlen { (0, r) } else { div_rem(r, f.seqlen_q) };
    Some(Row::of(f, &Extent::fixed(f), b, h, s, varlen))
}

/// A row of the `Fragments` layout's numbering.
struct FragmentRow {
    /// The row, or `None` for a block's padding row past its sequence.
    row: Option<Row>,
    /// Its block ([`FragmentBlocks`]).
    block: u32,
    /// Its row within the sequence.
    s: u32,
}

/// This warp's row in the `Fragments` layout's numbering: per head, each sequence's rows padded
/// to `m_blocks` 64-row blocks ([`BwdParams::rows`] = `batch * m_blocks * 64`), so the row's
/// sequence is its quotient (a variable-length launch reads that sequence's two offsets, no
/// search). `None` past the last head, and for rows past the sequence's last block.
#[inline(always)]
fn this_fragment_row(p: &BwdParams) -> Option<FragmentRow> {
    let f = &p.fwd;
    let (h, r) = this_warp(p)?;
    let (b, s) = div_rem(r, f.m_blocks * 64);
    let varlen = f.cu_seqlens_q != 0;
    let (blocks, e) = if varlen {
        // SAFETY: b < batch, and the launch has batch + 1 offsets.
        let e = unsafe { Extent::varlen(f, b) };
        (FragmentBlocks::varlen(f, b, e.q_start), e)
    } else {
        (FragmentBlocks::fixed(f, b), Extent::fixed(f))
    };
    if s >= e.seqlen_q.next_multiple_of(64) {
        return None;
    }
    let row = (s < e.seqlen_q).then(|| Row::of(f, &e, b, h, s, varlen));
    Some(FragmentRow { row, block: blocks.block(h, s), s })
}

/// `dot(dO, O)` of `row`, the warp's sum (lane `c` its 16-byte chunk `c`).
#[inline(always)]
unsafe fn dot_do_o<T: Element>(p: &BwdParams, row: &Row, lane: usize) -> f32 {
    let f = &p.fwd;
    let mut dot = 0.0f32;
    if ((lane * 8) as u32) < f.head_dim {
        let o = unsafe { *((f.o as *const u16).offset(row.offset(f.o_strides)).add(lane * 8) as *const Chunk) };
        let d = unsafe { *((p.dout as *const u16).offset(row.offset(p.dout_strides)).add(lane * 8) as *const Chunk) };
        for i in 0..4 {
            let (o, d) = (T::unpack2(o.0[i]), T::unpack2(d.0[i]));
            dot += o[0] * d[0] + o[1] * d[1];
        }
    }
    warp_sum_f32(dot)
}

/// Prep: dsum where `layout` keeps the statistics (with `Fragments` also the log-sum-exp base,
/// and the padding rows' `-inf` and 0), the zeroed accumulator, and (deterministic mode) the
/// zeroed semaphores.
#[inline(always)]
pub unsafe fn prep<T: Element>(p: &BwdParams, layout: AccumLayout) {
    let f = &p.fwd;
    let lane = (thread_idx_x() % 32) as usize;
    if p.dq_semaphore != 0 {
        let counters = match layout {
            AccumLayout::Rows => f.batch * f.heads_q * f.m_blocks,
            AccumLayout::Fragments => FragmentBlocks::count(f, f.cu_seqlens_q != 0) as u32,
        };
        for i in grid_stride(counters as usize) {
            unsafe { *(p.dq_semaphore as *mut u32).add(i) = 0 };
        }
    }
    for c in grid_stride((p.accum_len / 4) as usize) {
        unsafe { *(p.dq_accum as *mut Chunk).add(c) = Chunk([0; 4]) };
    }
    let stats = p.dsum as *mut f32;
    match layout {
        AccumLayout::Rows => {
            let Some(row) = this_row(p) else { return };
            let dot = unsafe { dot_do_o::<T>(p, &row, lane) };
            if lane == 0 {
                unsafe { *stats.add(row.lse) = dot };
            }
        }
        AccumLayout::Fragments => {
            let Some(FragmentRow { row, block, s }) = this_fragment_row(p) else { return };
            let dot = row.as_ref().map_or(0.0, |row| unsafe { dot_do_o::<T>(p, row, lane) });
            if lane == 0 {
                // Lane 0 alone reads the log-sum-exp, after the sum.
                let base = row.map_or(f32::NEG_INFINITY, |row| lse::neg_lse_base(unsafe { *(f.lse as *const f32).add(row.lse) }));
                let at = unsafe { stats.add(AccumLayout::fragment_stats(block, s)) };
                unsafe {
                    *at = base;
                    *at.add(64) = dot;
                }
            }
        }
    }
}

/// The indices below `count` this thread takes, one per pass over the grid's threads (the
/// counters, and the accumulator in 16-byte chunks whatever its layout).
#[inline(always)]
fn grid_stride(count: usize) -> impl Iterator<Item = usize> {
    let threads = crate::arch::ids::grid_dim_x() as usize * BWD_ROW_THREADS;
    (block_idx_x() as usize * BWD_ROW_THREADS + thread_idx_x() as usize..count).step_by(threads)
}

/// dQ = scale * accumulator (laid out as `layout`), rounded to `T`.
#[inline(always)]
pub unsafe fn dq<T: Element>(p: &BwdParams, layout: AccumLayout) {
    match layout {
        AccumLayout::Rows => unsafe { dq_rows::<T>(p) },
        AccumLayout::Fragments => unsafe { dq_fragments::<T>(p) },
    }
}

/// dQ from an accumulator of rows.
#[inline(always)]
unsafe fn dq_rows<T: Element>(p: &BwdParams) {
    let lane = (thread_idx_x() % 32) as usize;
    let Some(row) = this_row(p) else { return };
    if ((lane * 8) as u32) >= p.fwd.head_dim {
        return;
    }
    let accum = unsafe { (p.dq_accum as *const f32).add(row.lse * p.accum_dim as usize + lane * 8) as *const Chunk };
    let (lo, hi) = unsafe { (*accum, *accum.add(1)) };
    let x = |c: Chunk, i: usize| f32::from_bits(c.0[i]) * p.scale;
    let out = Chunk([T::pack2(x(lo, 0), x(lo, 1)), T::pack2(x(lo, 2), x(lo, 3)), T::pack2(x(hi, 0), x(hi, 1)), T::pack2(x(hi, 2), x(hi, 3))]);
    unsafe { *((p.dq as *mut u16).offset(row.offset(p.dq_strides)).add(lane * 8) as *mut Chunk) = out };
}

/// dQ = scale * accumulator, rounded to `T`, from an accumulator in wgmma fragment order
/// ([`flashrs_abi::AccumLayout::Fragments`]): lane `c`'s 8 columns are 2 values from each of
/// 4 consecutive threads' slots of one chunk.
#[inline(always)]
unsafe fn dq_fragments<T: Element>(p: &BwdParams) {
    let lane = (thread_idx_x() % 32) as usize;
    let Some(FragmentRow { row: Some(row), block, s }) = this_fragment_row(p) else { return };
    if ((lane * 8) as u32) >= p.fwd.head_dim {
        return;
    }
    let col = lane * 8;
    let chunk = AccumLayout::fragment_chunk(block, p.accum_dim as usize, col);
    let first = chunk * AccumLayout::CHUNK + AccumLayout::fragment_index(s as usize % 64, col % 64);
    let accum = p.dq_accum as *const f32;
    let mut out = [0u32; 4];
    for (t, o) in out.iter_mut().enumerate() {
        let v = unsafe { *(accum.add(first + 4 * t) as *const [f32; 2]) };
        *o = T::pack2(v[0] * p.scale, v[1] * p.scale);
    }
    unsafe { *((p.dq as *mut u16).offset(row.offset(p.dq_strides)).add(col) as *mut Chunk) = Chunk(out) };
}
