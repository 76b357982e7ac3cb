//! Attention modifications as trait parameters of the forward kernels: which keys a query row
//! sees ([`MaskMod`]) and what its scores become before the softmax ([`ScoreMod`]), as
//! FlexAttention's `mask_mod` and `score_mod`, but compiled ahead of time.
//!
//! A kernel body is generic over one of each. It builds them once per work tile from the
//! launch parameters and the tile's (batch, head, sequence extent), asks the mask for the key
//! tiles its rows see ([`MaskMod::span`], so that tiles no row sees are never loaded), applies
//! the score modification to every score of a tile and then the mask to tiles that
//! [`MaskMod::touches`]. Plain attention is [`Mask`] with [`Plain`]: their methods are the
//! arithmetic the kernels had before modifications existed, and [`ScoreMod::ACTIVE`] false
//! compiles the per-score pass out, so the plain kernels do not pay for any of this.
//!
//! Scores stay in raw units (`q . k`, before the softmax scale) through the kernels, which
//! fold the scale into the exponent; a [`ScoreMod`] returns raw units too. [`Builtin`] and
//! [`Window`] are the modifications of [`ModParams`] (softcap, ALiBi, sinks; sliding window
//! with causal masking folded in), each off at its neutral value, so that one kernel serves
//! every combination.
//!
//! A crate of the caller's own implements these traits and instantiates the bodies with
//! [`crate::mma_forward_kernel`], [`crate::sm90_forward_kernel`] and
//! [`crate::mma_backward_kernel`] (the host's `custom`
//! module says how its kernels are built, loaded and launched); its modification reads its own
//! data from [`ModParams::user`], and may wrap [`Builtin`] to keep the built-in ones.
use crate::arch::ex2::{ex2_approx_f32, rcp_approx_f32};
use crate::arch::fma::fma_rn_f32;
use core::f32::consts::LOG2_E;
use flashrs_abi::grid::Extent;
use flashrs_abi::{FwdParams, ModParams};

pub use crate::mask::Mask;

/// Where a score lies: its query row and key within the sequence, and both as f32 (exact
/// below 2^24), which the kernels derive per tile rather than converting every score.
#[derive(Clone, Copy)]
pub struct At {
    /// Query row.
    pub row: i32,
    /// Key.
    pub key: i32,
    /// `row` as f32.
    pub rowf: f32,
    /// `key` as f32.
    pub keyf: f32,
}

/// Which keys each query row sees: an interval per row, whose ends never decrease from one
/// row to the next (key lengths, causal masks, sliding windows).
pub trait MaskMod: Copy {
    /// The mask of a work tile of batch entry `batch`, query head `head`, whose sequence has
    /// the lengths of `extent`.
    fn new(p: &FwdParams, batch: u32, head: u32, extent: &Extent) -> Self;

    /// Row `row` sees the keys `lo..hi` of this pair `(lo, hi)`, of those that exist: `lo`
    /// may be negative; `hi` includes the key count's bound.
    fn bounds(&self, row: i32) -> (i32, i32);

    /// The keys `first..end` that any of rows `row0..row_end` sees (`0 <= first <= end`).
    #[inline(always)]
    fn span(&self, row0: i32, row_end: i32) -> (i32, i32) {
        let first = self.bounds(row0).0.max(0);
        (first, self.bounds(row_end - 1).1.max(first))
    }

    /// True when some score of rows `row0..row_end` and keys `col0..col0 + cols` is masked:
    /// only such blocks pay for masking.
    #[inline(always)]
    fn touches(&self, row0: i32, row_end: i32, col0: i32, cols: i32) -> bool {
        col0 < self.bounds(row_end - 1).0 || col0 + cols > self.bounds(row0).1
    }

    /// The query blocks of `BM` rows (`first..end`, within `seqlen_q.div_ceil(BM)`) with a row
    /// that sees some key of `key0..key_end`: the backward's walk for a key block. The dual of
    /// [`MaskMod::span`]; by the rows' monotone bounds these blocks are contiguous.
    fn query_blocks<const BM: usize>(&self, key0: i32, key_end: i32, seqlen_q: u32) -> (u32, u32);

    /// True when the kernels walk the launch's block mask ([`flashrs_abi::BlockSparse`], see
    /// [`crate::sparse`]) rather than every key tile of [`MaskMod::span`]: [`Sparse`]. Needs
    /// query tiles of [`flashrs_abi::params::SPARSE_BLOCK`] rows.
    const BLOCKS: bool = false;

    /// True when row `row`'s `bounds` (`b`) include key `key`.
    #[inline(always)]
    fn sees(b: (i32, i32), key: i32) -> bool {
        b.0 <= key && key < b.1
    }
}

/// What a row's scores become before the softmax, and an optional sink: a logit without a
/// value that joins every row's softmax denominator.
pub trait ScoreMod: Copy {
    /// False when [`ScoreMod::score`] returns its score unchanged: kernels then skip the
    /// per-score pass at compile time.
    const ACTIVE: bool;
    /// True when [`ScoreMod::sink_log2`] may be finite.
    const SINK: bool;

    /// The modification of a work tile (see [`MaskMod::new`]).
    fn new(p: &FwdParams, batch: u32, head: u32, extent: &Extent) -> Self;

    /// Score `s` (raw units) of the query row and key at `at`, modified (raw units).
    fn score(&self, s: f32, at: At) -> f32;

    /// The modification's parts that a launch switches on and off: kernels apply the parts
    /// that are on ([`ScoreMod::part_on`], a warp-uniform test per tile) one after another, each
    /// to every score of the tile, so that a part that is off costs nothing. Within one pass
    /// LLVM computes both sides of a per-score `if` on a launch-wide flag and selects (a
    /// softcap's two SFU operations on every score of a launch without one: the modification
    /// kernels ran at half the plain ones' speed at head_dim 64). Default: one part, the whole
    /// of [`ScoreMod::score`].
    const PARTS: usize = 1;

    /// True when part `part` (< [`ScoreMod::PARTS`]) modifies this tile's scores.
    #[inline(always)]
    fn part_on(&self, part: usize) -> bool {
        let _ = part;
        true
    }

    /// Score `s` modified by part `part` alone: applying the parts that are on in order gives
    /// [`ScoreMod::score`].
    #[inline(always)]
    fn score_part(&self, part: usize, s: f32, at: At) -> f32 {
        let _ = part;
        self.score(s, at)
    }

    /// The sink's logit in log2 units of the scaled scores (`-inf`: none).
    #[inline(always)]
    fn sink_log2(&self) -> f32 {
        f32::NEG_INFINITY
    }

    /// False when [`ScoreMod::grad`] is 1 everywhere: the backward pass then compiles out the
    /// per-score pass that scales each score's gradient by it.
    const GRAD: bool = false;

    /// True when this tile's scores have a derivative other than 1 (a warp-uniform test, as
    /// [`ScoreMod::part_on`]).
    #[inline(always)]
    fn grad_on(&self) -> bool {
        Self::GRAD
    }

    /// The derivative of [`ScoreMod::score`] with respect to the raw score, at the score whose
    /// modified value (raw units) is `modified`. The backward pass recovers that value from the
    /// probability it recomputes (`P = exp(scale * modified - lse)`), so that it holds neither
    /// the raw nor the modified scores across its dP GEMM; it asks only where `P > 0`.
    #[inline(always)]
    fn grad(&self, modified: f32, at: At) -> f32 {
        let _ = (modified, at);
        1.0
    }
}

/// Plain attention's scores: unchanged, no sink.
#[derive(Clone, Copy)]
pub struct Plain;

impl ScoreMod for Plain {
    const ACTIVE: bool = false;
    const SINK: bool = false;

    #[inline(always)]
    fn new(_: &FwdParams, _: u32, _: u32, _: &Extent) -> Self {
        Plain
    }

    #[inline(always)]
    fn score(&self, s: f32, _: At) -> f32 {
        s
    }
}

impl MaskMod for Mask {
    #[inline(always)]
    fn new(p: &FwdParams, _: u32, _: u32, e: &Extent) -> Self {
        let (seqlen_q, seqlen_k) = (e.seqlen_q as i32, e.seqlen_k as i32);
        Mask { seqlen_k, causal_offset: (p.causal != 0).then_some(seqlen_k - seqlen_q) }
    }

    /// No lower bound (a comparison with `i32::MIN` folds away).
    #[inline(always)]
    fn bounds(&self, row: i32) -> (i32, i32) {
        (i32::MIN, self.row_limit(row))
    }

    #[inline(always)]
    fn span(&self, _: i32, row_end: i32) -> (i32, i32) {
        let keys = match self.causal_offset {
            Some(off) => (row_end + off).max(0).min(self.seqlen_k),
            None => self.seqlen_k,
        };
        (0, keys)
    }

    #[inline(always)]
    fn touches(&self, row0: i32, _: i32, col0: i32, cols: i32) -> bool {
        Mask::touches(self, row0, col0, cols)
    }

    /// Under causal masking from the first block with a row on or past `key0`'s diagonal, to
    /// the last block; without, every block.
    #[inline(always)]
    fn query_blocks<const BM: usize>(&self, key0: i32, _: i32, seqlen_q: u32) -> (u32, u32) {
        let blocks = seqlen_q.div_ceil(BM as u32);
        let first = match self.causal_offset {
            Some(off) => ((key0 - off).max(0) as u32 / BM as u32).min(blocks),
            None => 0,
        };
        (first, blocks)
    }
}

/// A sliding window (FlashAttention's `window_size`) with causal masking folded into its right
/// side by the host: row `r` sees keys `diag - left ..= diag + right` of the sequence's
/// `seqlen_k`, where `diag = r + seqlen_k - seqlen_q`. An unbounded side is
/// [`flashrs_abi::params::WINDOW_UNBOUNDED`].
#[derive(Clone, Copy)]
pub struct Window {
    seqlen_k: i32,
    /// `seqlen_k - seqlen_q`: the diagonal's offset.
    offset: i32,
    left: i32,
    right: i32,
}

impl MaskMod for Window {
    #[inline(always)]
    fn new(p: &FwdParams, _: u32, _: u32, e: &Extent) -> Self {
        let seqlen_k = e.seqlen_k as i32;
        Window { seqlen_k, offset: seqlen_k - e.seqlen_q as i32, left: p.mods.window_left, right: p.mods.window_right }
    }

    #[inline(always)]
    fn bounds(&self, row: i32) -> (i32, i32) {
        let diag = row + self.offset;
        (diag - self.left, (diag + self.right + 1).min(self.seqlen_k))
    }

    /// Row `r` sees key `k` when `k - right <= r + offset <= k + left`: the rows from `key0 -
    /// right - offset` to `key_end - 1 + left - offset` (within 32 bits: each side is at most
    /// [`flashrs_abi::params::WINDOW_UNBOUNDED`]).
    #[inline(always)]
    fn query_blocks<const BM: usize>(&self, key0: i32, key_end: i32, seqlen_q: u32) -> (u32, u32) {
        let blocks = seqlen_q.div_ceil(BM as u32);
        let first_row = (key0 - self.right - self.offset).max(0) as u32;
        let end_row = (key_end + self.left - self.offset).max(0).min(seqlen_q as i32) as u32;
        let first = (first_row / BM as u32).min(blocks);
        (first, end_row.div_ceil(BM as u32).max(first))
    }
}

/// Mask `M` over the key blocks of the launch's block mask ([`crate::sparse`]): the blocks
/// the lists name are visited, and `M` masks inside them as it would without a block mask.
#[derive(Clone, Copy)]
pub struct Sparse<M>(M);

impl<M: MaskMod> MaskMod for Sparse<M> {
    const BLOCKS: bool = true;

    #[inline(always)]
    fn new(p: &FwdParams, batch: u32, head: u32, e: &Extent) -> Self {
        Sparse(M::new(p, batch, head, e))
    }

    #[inline(always)]
    fn bounds(&self, row: i32) -> (i32, i32) {
        self.0.bounds(row)
    }

    #[inline(always)]
    fn span(&self, row0: i32, row_end: i32) -> (i32, i32) {
        self.0.span(row0, row_end)
    }

    #[inline(always)]
    fn touches(&self, row0: i32, row_end: i32, col0: i32, cols: i32) -> bool {
        self.0.touches(row0, row_end, col0, cols)
    }

    #[inline(always)]
    fn query_blocks<const BM: usize>(&self, key0: i32, key_end: i32, seqlen_q: u32) -> (u32, u32) {
        self.0.query_blocks::<BM>(key0, key_end, seqlen_q)
    }
}

/// The score modifications of [`ModParams`]: softcap, then ALiBi, and the sink, each skipped
/// (a warp-uniform branch) when the launch has none.
#[derive(Clone, Copy)]
pub struct Builtin {
    softcap_pre: f32,
    softcap_post: f32,
    /// ALiBi's slope in raw units (0 without ALiBi).
    slope: f32,
    /// ALiBi is on: from the parameters, not `slope != 0`, because ptxas sees a loaded slope as
    /// varying across the warp and branching on it as divergent.
    alibi: bool,
    /// `seqlen_k - seqlen_q`, as f32: the diagonal's offset.
    offset: f32,
    sink_log2: f32,
}

impl ScoreMod for Builtin {
    const ACTIVE: bool = true;
    const SINK: bool = true;

    #[inline(always)]
    fn new(p: &FwdParams, batch: u32, head: u32, e: &Extent) -> Self {
        let m: &ModParams = &p.mods;
        let slope = if m.alibi != 0 {
            let at = (batch * m.alibi_batch_stride + head) as usize;
            unsafe { *(m.alibi as *const f32).add(at) * m.alibi_scale }
        } else {
            0.0
        };
        let sink_log2 = if m.sinks != 0 { unsafe { *(m.sinks as *const f32).add(head as usize) * LOG2_E } } else { f32::NEG_INFINITY };
        let offset = e.seqlen_k as f32 - e.seqlen_q as f32;
        Builtin { softcap_pre: m.softcap_pre, softcap_post: m.softcap_post, slope, alibi: m.alibi != 0, offset, sink_log2 }
    }

    #[inline(always)]
    fn score(&self, s: f32, at: At) -> f32 {
        (0..Self::PARTS).fold(s, |s, part| if self.part_on(part) { self.score_part(part, s, at) } else { s })
    }

    /// Softcap, then ALiBi.
    const PARTS: usize = 2;

    #[inline(always)]
    fn part_on(&self, part: usize) -> bool {
        if part == 0 { self.softcap_pre != 0.0 } else { self.alibi }
    }

    #[inline(always)]
    fn score_part(&self, part: usize, s: f32, at: At) -> f32 {
        if part == 0 {
            // `post * tanh(x)` as `post - 2 post / (e^(2x) + 1)`, `2x log2 e` folded into
            // `pre`: two SFU operations, but accurate to about 1e-7 of the cap where
            // `tanh.approx` is off by up to 2^-11 of it, which moves a softmax weight by 2% at
            // a cap of 50.
            let post = self.softcap_post;
            fma_rn_f32(-2.0 * post, rcp_approx_f32(ex2_approx_f32(s * self.softcap_pre) + 1.0), post)
        } else {
            // `-slope * |diag - key|`.
            s - self.slope * (at.rowf + self.offset - at.keyf).abs()
        }
    }

    #[inline(always)]
    fn sink_log2(&self) -> f32 {
        self.sink_log2
    }

    /// ALiBi's part has derivative 1; the softcap's is `1 - tanh^2`, where `post * tanh` is the
    /// modified score before ALiBi's term.
    const GRAD: bool = true;

    #[inline(always)]
    fn grad_on(&self) -> bool {
        self.softcap_pre != 0.0
    }

    #[inline(always)]
    fn grad(&self, modified: f32, at: At) -> f32 {
        // Without ALiBi the slope is 0; `softcap_pre / (2 log2 e)` is `1 / post`.
        let capped = fma_rn_f32(self.slope, (at.rowf + self.offset - at.keyf).abs(), modified);
        let tanh = capped * (self.softcap_pre * (0.5 / LOG2_E));
        fma_rn_f32(-tanh, tanh, 1.0)
    }
}

/// [`Builtin`] without its softcap: ALiBi (and the sink), whose derivative is 1. The Hopper
/// backward kernels take it: a softcap's derivative pass does not fit beside their
/// accumulators, so the host sends calls with a softcap to the `mma.sync` ones.
#[derive(Clone, Copy)]
pub struct Alibi(Builtin);

impl ScoreMod for Alibi {
    const ACTIVE: bool = true;
    const SINK: bool = true;

    #[inline(always)]
    fn new(p: &FwdParams, batch: u32, head: u32, e: &Extent) -> Self {
        Alibi(Builtin::new(p, batch, head, e))
    }

    #[inline(always)]
    fn score(&self, s: f32, at: At) -> f32 {
        if self.part_on(0) { self.score_part(0, s, at) } else { s }
    }

    #[inline(always)]
    fn part_on(&self, _: usize) -> bool {
        self.0.alibi
    }

    #[inline(always)]
    fn score_part(&self, _: usize, s: f32, at: At) -> f32 {
        self.0.score_part(1, s, at)
    }

    #[inline(always)]
    fn sink_log2(&self) -> f32 {
        self.0.sink_log2
    }
}
