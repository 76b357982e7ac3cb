//! The backward's row kernels, [`BwdParams::row_lanes`] lanes per (query row, head): before the main kernel,
//! `dsum = dot(dO, O)` (where the accumulator layout keeps it) and a zeroed dQ accumulator;
//! after it, dQ from the accumulator.
//!
//! Rows are numbered per head. In the `Rows` layout as the log-sum-exp's: `b * seqlen_q + s`
//! of a fixed-length launch, the packed row of a variable-length one (which needs no offsets
//! here: a packed row is its own index). In the `Fragments` layout by sequence, each padded to
//! its launch's `m_blocks` steps (`b * rows / batch + s`), so a thread finds its sequence
//! without searching the offsets, and padding rows write their own statistics (and the prep
//! kernel the padding block after the launch's blocks). A row's lane `c` of `n` takes its
//! 16-byte chunks `c` and `c + n`; a warp holds two rows or more (four at head_dim 64), so that
//! every lane has bytes in flight.
use crate::arch::ex2::ex2_approx_f32;
use crate::arch::shfl::group_sum_f32;
use crate::arch::barrier::bar_sync_divergent;
use crate::arch::smem::{dsmem_base, ld_shared_b32, st_global_v4, st_shared_b32};
use crate::arch::ids::{block_idx_x, grid_dim_x, thread_idx_x};
use crate::dtype::Element;
use crate::lse;
use crate::vector::{Chunk, Pair};
use flashrs_abi::bwd::BWD_ROW_THREADS;
use flashrs_abi::grid::{Extent, div_rem};
use core::f32::consts::LOG2_E;
use flashrs_abi::{AccumLayout, BwdParams, FragmentBlocks, FwdParams};


/// Where one (row, head) lies.
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

/// This thread's row slot as (head, row number), `None` past the last head, and its lane of
/// the row's. Slots count rows per head, heads slowest; a slot's lanes lie in one warp.
#[inline(always)]
fn this_slot(p: &BwdParams) -> (Option<(u32, u32)>, Lane) {
    let shift = p.row_lanes().trailing_zeros();
    let slot = block_idx_x() * (BWD_ROW_THREADS as u32 >> shift) + (thread_idx_x() >> shift);
    let (h, r) = div_rem(slot, p.rows);
    ((h < p.fwd.heads_q).then_some((h, r)), Lane { at: thread_idx_x() & ((1 << shift) - 1), of: 1 << shift })
}

/// A thread's place among its row's [`BwdParams::row_lanes`] lanes.
#[derive(Clone, Copy)]
struct Lane {
    at: u32,
    of: u32,
}

impl Lane {
    /// The first column of each of this lane's 16-byte chunks of a `head_dim`-wide row (at
    /// most 16 lanes a row, at most 256 columns: two chunks), `None` past the row.
    #[inline(always)]
    fn columns(self, head_dim: u32) -> [Option<usize>; 2] {
        [self.at, self.at + self.of].map(|c| (8 * c < head_dim).then_some(8 * c as usize))
    }
}

/// This thread's row in the `Rows` layout's numbering (the log-sum-exp's), `None` past the
/// last, and its lane.
#[inline(always)]
fn this_row(p: &BwdParams) -> (Option<Row>, Lane) {
    let (slot, lane) = this_slot(p);
    (slot.map(|(h, r)| row_of(&p.fwd, h, r)), lane)
}

/// Row number `r` of query head `h` in the `Rows` layout's numbering.
#[inline(always)]
fn row_of(f: &FwdParams, h: u32, r: u32) -> Row {
    let varlen = f.cu_seqlens_q != 0;
    // Variable-length: the packed row is its own index (a sequence starting at row 0).
    let (b, s) = if varlen { (0, r) } else { div_rem(r, f.seqlen_q) };
    Row::of(f, &Extent::fixed(f), b, h, s, varlen)
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

/// This thread's row in the `Fragments` layout's numbering, and its lane: per head, each
/// sequence's rows padded to `m_blocks` steps ([`BwdParams::rows`] = `batch * m_blocks *
/// block_m`), so the row's sequence is its quotient (a variable-length launch reads that
/// sequence's two offsets, no search). `None` past the last head, and for rows past the
/// sequence's last 64-row block.
#[inline(always)]
fn this_fragment_row(p: &BwdParams) -> (Option<FragmentRow>, Lane) {
    let (slot, lane) = this_slot(p);
    (slot.and_then(|(h, r)| fragment_row_of(p, h, r)), lane)
}

/// Row number `r` of query head `h` in the `Fragments` layout's numbering (see
/// [`this_fragment_row`]).
#[inline(always)]
fn fragment_row_of(p: &BwdParams, h: u32, r: u32) -> Option<FragmentRow> {
    let f = &p.fwd;
    // Each sequence padded to the longest's steps: `rows / batch` rows.
    let (b, s) = div_rem(r, div_rem(p.rows, f.batch).0);
    // Rows s and s + 8 of a 16-row group take neighbouring slots: the accumulator keeps
    // their values in the two halves of each 16-byte word, so the dQ kernel's 8-byte loads
    // of the two fill whole sectors in one warp.
    let s = (s & !15) | (s & 1) << 3 | (s >> 1) & 7;
    let varlen = f.cu_seqlens_q != 0;
    let (blocks, e) = if varlen {
        // SAFETY: b < batch, and the launch has batch + 1 offsets.
        let e = unsafe { Extent::varlen(f, b) };
        (FragmentBlocks::varlen(f, b, e.q_start), e)
    } else {
        (FragmentBlocks::fixed(f, b), Extent::fixed(f))
    };
    let row = (s < e.seqlen_q).then(|| Row::of(f, &e, b, h, s, varlen));
    (s < e.seqlen_q.next_multiple_of(64)).then_some(FragmentRow { row, block: blocks.block(h, s), s })
}

/// This lane's part of `dot(dO, O)` of `row`: its chunks'.
#[inline(always)]
unsafe fn dot_do_o<T: Element>(p: &BwdParams, row: &Row, lane: Lane) -> f32 {
    let f = &p.fwd;
    let part = |col: Option<usize>| {
        let Some(col) = col else { return 0.0 };
        let o = unsafe { *((f.o as *const u16).offset(row.offset(f.o_strides)).add(col) as *const Chunk) };
        let d = unsafe { *((p.dout as *const u16).offset(row.offset(p.dout_strides)).add(col) as *const Chunk) };
        let mut dot = 0.0f32;
        for i in 0..4 {
            let (o, d) = (T::unpack2(o.0[i]), T::unpack2(d.0[i]));
            dot += o[0] * d[0] + o[1] * d[1];
        }
        dot
    };
    // Each chunk by name, not by a loop: an array indexed in a loop may live on the stack.
    let [first, second] = lane.columns(f.head_dim_v);
    part(first) + part(second)
}

/// Prep: dsum where `layout` keeps the statistics (with `Fragments` also the log-sum-exp base,
/// and the padding rows' `-inf` and 0), the zeroed accumulator, and (deterministic mode) the
/// zeroed semaphores.
#[inline(always)]
pub unsafe fn prep<T: Element>(p: &BwdParams, layout: AccumLayout) {
    let f = &p.fwd;
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
        // One 16-byte store (a zero `Chunk` compiles to two 8-byte ones).
        unsafe { st_global_v4((p.dq_accum as *mut u32).add(4 * c), [0; 4]) };
    }
    let (stats, lanes) = (p.dsum as *mut f32, p.row_lanes());
    if matches!(layout, AccumLayout::Fragments) {
        // The padding block after the launch's blocks, which the Hopper kernel's 128-row steps
        // read past a sequence's last block: `-inf` bases, 0 dsums.
        let pad = FragmentBlocks::count(f, f.cu_seqlens_q != 0) as usize * AccumLayout::STATS;
        let t = (block_idx_x() as usize * BWD_ROW_THREADS) + thread_idx_x() as usize;
        if t < AccumLayout::STATS {
            unsafe { *stats.add(pad + t) = if t < 64 { f32::NEG_INFINITY } else { 0.0 } };
        }
    }
    // Every lane joins its row's sum, slot or none; a row's lane 0 writes its statistics.
    match layout {
        AccumLayout::Rows => {
            let (row, lane) = this_row(p);
            let dot = group_sum_f32(row.as_ref().map_or(0.0, |row| unsafe { dot_do_o::<T>(p, row, lane) }), lanes);
            if let (Some(row), 0) = (row, lane.at) {
                unsafe { *stats.add(row.lse) = dot };
            }
        }
        AccumLayout::Fragments => {
            let (at, lane) = this_fragment_row(p);
            let (row, stats_at) = match at {
                Some(FragmentRow { row, block, s }) => (row, Some(AccumLayout::fragment_stats(block, s))),
                None => (None, None),
            };
            // Read before the sum, so that the load overlaps it.
            let base = match &row {
                Some(row) if lane.at == 0 => lse::neg_lse_base(unsafe { *(f.lse as *const f32).add(row.lse) }),
                _ => f32::NEG_INFINITY,
            };
            let dot = group_sum_f32(row.map_or(0.0, |row| unsafe { dot_do_o::<T>(p, &row, lane) }), lanes);
            if let (Some(stats_at), 0) = (stats_at, lane.at) {
                let at = unsafe { stats.add(stats_at) };
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
    let threads = grid_dim_x() as usize * BWD_ROW_THREADS;
    (block_idx_x() as usize * BWD_ROW_THREADS + thread_idx_x() as usize..count).step_by(threads)
}

/// dQ = scale * accumulator (laid out as `layout`), rounded to `T`; then, if asked for, the
/// sink logits' gradient ([`dsinks`]).
#[inline(always)]
pub unsafe fn dq<T: Element>(p: &BwdParams, layout: AccumLayout) {
    match layout {
        AccumLayout::Rows => unsafe { dq_rows::<T>(p) },
        AccumLayout::Fragments => unsafe { dq_fragments::<T>(p) },
    }
    if p.dsinks != 0 {
        unsafe { dsinks(p, layout) };
    }
}

/// `dsinks[h] = -sum over head h's rows of exp(sink_h - lse) * dsum`: a sink has no value, so
/// its logit reaches the loss only through each row's normaliser, and `d lse / d sink` is the
/// sink's probability. One CTA per head: each thread sums rows `t, t + 256, ...` into four
/// accumulators (four loads in flight), the warps sum butterfly-wise, and warp 0 sums the
/// eight warps' totals from shared memory ([`flashrs_abi::bwd::DSINKS_SMEM`] bytes) in a fixed
/// order: the same bits every run, without atomics. A row that saw nothing (dsum 0, `-inf`
/// base) adds nothing.
/// The barriers are the non-aligned form: the dQ work before them branches per thread.
#[inline(always)]
unsafe fn dsinks(p: &BwdParams, layout: AccumLayout) {
    let f = &p.fwd;
    let (t, base) = (thread_idx_x(), dsmem_base());
    let mut h = block_idx_x();
    while h < f.heads_q {
        let sink_log2 = unsafe { *(f.mods.sinks as *const f32).add(h as usize) } * LOG2_E;
        let term = |r: u32| {
            if r >= p.rows {
                return 0.0;
            }
            // (log2 of the row's normaliser, dsum).
            let (neg_lse_log2, dsum) = match layout {
                AccumLayout::Rows => {
                    let at = row_of(f, h, r).lse;
                    unsafe { (-*(f.lse as *const f32).add(at) * LOG2_E, *(p.dsum as *const f32).add(at)) }
                }
                AccumLayout::Fragments => match fragment_row_of(p, h, r) {
                    Some(FragmentRow { block, s, .. }) => {
                        let at = unsafe { (p.dsum as *const f32).add(AccumLayout::fragment_stats(block, s)) };
                        unsafe { (*at, *at.add(64)) }
                    }
                    None => (0.0, 0.0),
                },
            };
            if dsum != 0.0 { ex2_approx_f32(sink_log2 + neg_lse_log2) * dsum } else { 0.0 }
        };
        let n = BWD_ROW_THREADS as u32;
        let (mut a, mut b, mut c, mut d) = (0.0f32, 0.0f32, 0.0f32, 0.0f32);
        let mut r = t;
        while r < p.rows {
            a += term(r);
            b += term(r + n);
            c += term(r + 2 * n);
            d += term(r + 3 * n);
            r += 4 * n;
        }
        let warp = group_sum_f32((a + b) + (c + d), 32);
        if t % 32 == 0 {
            unsafe { st_shared_b32(base + 4 * (t / 32), warp.to_bits()) };
        }
        bar_sync_divergent();
        let x = if t < n / 32 { f32::from_bits(unsafe { ld_shared_b32(base + 4 * t) }) } else { 0.0 };
        let total = group_sum_f32(x, 32);
        if t < 32 {
            unsafe { *(p.dsinks as *mut f32).add(h as usize) = -total };
        }
        // The next head's partial sums reuse the slots.
        bar_sync_divergent();
        h += grid_dim_x();
    }
}

/// dQ from an accumulator of rows.
#[inline(always)]
unsafe fn dq_rows<T: Element>(p: &BwdParams) {
    let (Some(row), lane) = this_row(p) else { return };
    let accum = unsafe { (p.dq_accum as *const f32).add(row.lse * p.accum_dim as usize) };
    let scaled = lane.columns(p.fwd.head_dim).map(|col| {
        col.map(|col| {
            let at = unsafe { accum.add(col) as *const Chunk };
            let (lo, hi) = unsafe { (*at, *at.add(1)) };
            let x = |c: Chunk, i: usize| f32::from_bits(c.0[i]) * p.scale;
            (col, Chunk([T::pack2(x(lo, 0), x(lo, 1)), T::pack2(x(lo, 2), x(lo, 3)), T::pack2(x(hi, 0), x(hi, 1)), T::pack2(x(hi, 2), x(hi, 3))]))
        })
    });
    unsafe { store_dq(p, &row, scaled) };
}

/// Stores a lane's dQ chunks (loaded, all of them, before the first store).
#[inline(always)]
unsafe fn store_dq(p: &BwdParams, row: &Row, chunks: [Option<(usize, Chunk)>; 2]) {
    // Indexed, not iterated: an array iterator's state lived on the stack (the build gate's
    // local-memory check caught it).
    for i in 0..2 {
        let Some((col, out)) = chunks[i] else { continue };
        unsafe { *((p.dq as *mut u16).offset(row.offset(p.dq_strides)).add(col) as *mut Chunk) = out };
    }
}

/// dQ = scale * accumulator, rounded to `T`, from an accumulator in wgmma fragment order
/// ([`flashrs_abi::AccumLayout::Fragments`]): a chunk's 8 columns are 2 values from each of
/// 4 consecutive threads' slots of one accumulator chunk.
#[inline(always)]
unsafe fn dq_fragments<T: Element>(p: &BwdParams) {
    let (Some(FragmentRow { row: Some(row), block, s }), lane) = this_fragment_row(p) else { return };
    let accum = p.dq_accum as *const f32;
    let scaled = lane.columns(p.fwd.head_dim).map(|col| {
        col.map(|col| {
            let chunk = AccumLayout::fragment_chunk(block, p.accum_dim as usize, col);
            let first = chunk * AccumLayout::CHUNK + AccumLayout::fragment_index(s as usize % 64, col % 64);
            let mut out = [0u32; 4];
            for (t, o) in out.iter_mut().enumerate() {
                let v = unsafe { *(accum.add(first + 4 * t) as *const Pair) };
                *o = T::pack2(f32::from_bits(v.0[0]) * p.scale, f32::from_bits(v.0[1]) * p.scale);
            }
            (col, Chunk(out))
        })
    });
    unsafe { store_dq(p, &row, scaled) };
}
