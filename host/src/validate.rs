//! The first stage of planning: a call's parameters checked into a `Call`, which exists only
//! for a valid call: sizes, GQA ratio, scale, offsets, page geometry, every stride resolved in
//! checked arithmetic. What depends on the kernel (tile configurations, the grid, shared
//! memory) is checked when a kernel is chosen ([`crate::select`]) and its launch is built
//! ([`crate::plan`]), which then checks the buffers (`Call::check_buffers`: every tensor's
//! strides, alignment and extent, the index arrays, overlaps).
use crate::buffers::{BufferRef, Buffers};
use crate::descale::Descale;
use crate::element::Fp8;
use crate::error::{Error, Result};
use crate::layout::{Kv, Offsets, Pages, Rows};
use crate::params::{AttentionParams, Strides};
use flashrs_abi::ModParams;
use flashrs_abi::tiles::MAX_SPLITS;

/// Longest sequence (and query block) the kernels' 32-bit masks take.
pub const MAX_SEQLEN: usize = i32::MAX as usize / 2;

/// A validated call: the parameters with everything resolved that the later stages need.
#[derive(Clone, Debug)]
pub(crate) struct Call<'p> {
    /// The parameters it was made from.
    pub p: &'p AttentionParams<'p>,
    /// The buffers, checked.
    pub bufs: Buffers,
    /// `scale * log2(e)`.
    pub scale_log2: f32,
    /// Query heads per K/V head (1 when there are no heads).
    pub group: usize,
    /// Variable-length calls: the packed rows and where the offsets are.
    pub packed: Option<Packed>,
    /// Paged calls: the pages and the index arrays.
    pub paged: Option<PagedIndex>,
    /// Strides (batch, row, head) of Q, K, V and the output as the kernels index them
    /// (packed rows: batch strides 0), checked by [`Call::check_buffers`].
    pub strides: [[i64; 3]; 4],
    /// Split-KV count asked for (`None`: the planner's choice; at most [`MAX_SPLITS`]).
    pub num_splits: Option<usize>,
    /// Nothing to compute: no batch, head or query row (or no packed query row).
    pub empty: bool,
    /// The attention modifications as the kernels take them, `None` for plain attention.
    pub mods: Option<ModParams>,
}

/// The packed rows of a variable-length call.
#[derive(Clone, Debug)]
pub(crate) struct Packed {
    /// Query rows (the output's and, `[heads_q, total_q]`, the log-sum-exp's).
    pub total_q: usize,
    /// Key rows (0 in paged calls, whose keys are in pages).
    pub total_k: usize,
    /// Host offsets to upload per launch (`cu_seqlens_q`, then `cu_seqlens_k` unless a paged
    /// call left them out), or `None` for device offsets.
    pub upload: Option<Vec<i32>>,
    /// Device offsets' addresses (0: none).
    pub cu_seqlens: [u64; 2],
}

/// A paged call's pages and index arrays.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PagedIndex {
    /// The geometry.
    pub pages: Pages,
    /// The block table's address.
    pub block_table: u64,
    /// The key counts' address (0: none).
    pub seqused_k: u64,
}

impl Call<'_> {
    /// The head dimension a kernel must hold: Q's and K's, or V's where that is larger (a
    /// kernel padded to it zero-fills the narrower operands' extra columns).
    pub fn kernel_head_dim(&self) -> usize {
        self.p.head_dim.max(self.p.head_dim_v())
    }

    /// Query rows of one batch entry: the sequence's (variable-length: all packed rows).
    pub fn rows_q(&self) -> usize {
        self.packed.as_ref().map_or(self.p.seqlen_q, |v| v.total_q)
    }
}

pub(crate) fn shape_err(what: &'static str, reason: impl Into<String>) -> Error {
    Error::InvalidShape { what, reason: reason.into() }
}

/// Validates `p` with `bufs` (see the module docs).
pub(crate) fn validate<'p>(p: &'p AttentionParams<'p>, bufs: &Buffers) -> Result<Call<'p>> {
    if p.head_dim == 0 || !p.head_dim.is_multiple_of(8) || p.head_dim > 256 {
        return Err(Error::UnsupportedHeadDim(p.head_dim));
    }
    let dv = p.head_dim_v();
    if dv == 0 || !dv.is_multiple_of(8) || dv > 256 {
        return Err(Error::UnsupportedHeadDimV(dv));
    }
    if p.heads_kv == 0 && p.heads_q > 0 {
        return Err(shape_err("heads_kv", "must be at least 1"));
    }
    if p.heads_kv > 0 && !p.heads_q.is_multiple_of(p.heads_kv) {
        return Err(Error::GqaRatio { heads_q: p.heads_q, heads_kv: p.heads_kv });
    }
    for (what, n) in [("seqlen_q", p.seqlen_q), ("seqlen_k", p.seqlen_k)] {
        if n > MAX_SEQLEN {
            return Err(shape_err(what, format!("{n} exceeds {MAX_SEQLEN}")));
        }
    }
    let scale = p.scale();
    // The kernels track the running max of raw scores and scale inside exp2, which is right
    // only for a positive scale (zero makes `-inf * 0` NaN), with `scale * log2(e)` finite.
    if !(scale > 0.0 && (scale * std::f32::consts::LOG2_E).is_finite()) {
        return Err(shape_err("softmax_scale", format!("{scale} is not positive and finite (times log2 e)")));
    }
    let num_splits = match p.num_splits {
        Some(n) if n > MAX_SPLITS => return Err(shape_err("num_splits", format!("{n} exceeds {MAX_SPLITS}"))),
        n => n.map(|n| n.max(1)),
    };
    let paged_pages = match &p.layout.kv {
        Kv::Paged(pg) => Some(check_pages(p, &pg.pages)?),
        Kv::Tensors => None,
    };
    let mut packed = match &p.layout.rows {
        Rows::Packed(o) => Some(check_offsets(p, o)?),
        Rows::Batched => None,
    };
    let empty = p.batch == 0 || p.heads_q == 0 || p.seqlen_q == 0 || packed.as_ref().is_some_and(|v| v.total_q == 0);
    let mut call = Call {
        p,
        bufs: *bufs,
        scale_log2: scale * std::f32::consts::LOG2_E,
        group: p.heads_q.checked_div(p.heads_kv).unwrap_or(1).max(1),
        packed: None,
        paged: None,
        strides: [[0; 3]; 4],
        num_splits,
        empty,
        mods: check_mods(p, scale, paged_pages.is_some())?,
    };
    check_kv(p, bufs)?;
    // The layout's index arrays, read by a launch (an empty call has none, but its kernel is
    // still the one its layout calls for).
    if let (Kv::Paged(pg), Some(pages)) = (&p.layout.kv, paged_pages) {
        let seqused_k = pg.seqused_k.map_or(0, |u| u.buffer().ptr);
        call.paged = Some(PagedIndex { pages, block_table: pg.block_table.buffer().ptr, seqused_k });
    }
    if let (Some(v), Rows::Packed(Offsets::Device(d))) = (packed.as_mut(), &p.layout.rows) {
        v.cu_seqlens = [d.cu_seqlens_q.buffer().ptr, d.cu_seqlens_k.map_or(0, |k| k.buffer().ptr)];
    }
    if empty {
        call.packed = packed;
        return Ok(call);
    }
    call.strides = kernel_strides(p, packed.is_some(), paged_pages.is_some())?;
    call.packed = packed;
    Ok(call)
}

/// Strides (batch, row, head) of Q, K, V and the output as the kernels index them.
pub(crate) fn kernel_strides(p: &AttentionParams, packed: bool, paged: bool) -> Result<[[i64; 3]; 4]> {
    let [q_s, k_s, v_s, o_s] = p.tensor_strides()?;
    // Variable-length: one packed "batch" of total rows, batch strides unused; paged caches keep
    // theirs (the strides between pages).
    let unbatched = |st: Strides, packed: bool| if packed { [0, st.row, st.head] } else { [st.batch, st.row, st.head] };
    let kv_packed = packed && !paged;
    Ok([unbatched(q_s, packed), unbatched(k_s, kv_packed), unbatched(v_s, kv_packed), unbatched(o_s, packed)])
}

impl Call<'_> {
    /// Checks every buffer a non-empty call's kernel touches: each tensor's address, strides,
    /// alignment and extent, the index arrays, and that nothing written overlaps anything else
    /// touched. (After the kernel is chosen, so that a grid past the limits is named first.)
    /// Returns the byte spans of everything touched (the backward pass checks its gradients
    /// against them).
    pub fn check_buffers(&self) -> Result<Vec<Span>> {
        let (p, bufs) = (self.p, &self.bufs);
        let (d, dv) = (p.head_dim, p.head_dim_v());
        let strides = |[batch, row, head]: [i64; 3]| Strides { batch, row, head };
        let (nb, rows_q, rows_k) = match &self.packed {
            Some(v) => (1, v.total_q, v.total_k),
            None => (p.batch, p.seqlen_q, p.seqlen_k),
        };
        let (kv_batch, kv_rows) = match self.paged {
            Some(pg) => (pg.pages.num_pages, pg.pages.page_size),
            None => (nb, rows_k),
        };
        let [q_s, k_s, v_s, o_s] = self.strides.map(strides);
        let q_bytes = if bufs.query_fp8.is_some() { 1 } else { 2 };
        let q_end = check_tensor("q", bufs.q, q_s, [nb, rows_q, p.heads_q, d], q_bytes)?;
        let o_end = check_tensor("out", bufs.o, o_s, [nb, rows_q, p.heads_q, dv], 2)?;
        if !no_self_overlap(o_s, [nb, rows_q, p.heads_q, dv]) {
            let reason = format!("{o_s:?} put distinct output elements at the same address");
            return Err(Error::InvalidStrides { tensor: "out", reason });
        }
        // Address ranges [start, end) of everything the kernel touches, written ones first.
        let mut spans = vec![("out", bufs.o.ptr, o_end), ("q", bufs.q.ptr, q_end)];
        if self.reads_kv() {
            let kv_bytes = if bufs.kv.is_some() { 1 } else { 2 };
            let k_end = check_tensor("k", bufs.k, k_s, [kv_batch, kv_rows, p.heads_kv, d], kv_bytes)?;
            let v_end = check_tensor("v", bufs.v, v_s, [kv_batch, kv_rows, p.heads_kv, dv], kv_bytes)?;
            spans.extend([("k", bufs.k.ptr, k_end), ("v", bufs.v.ptr, v_end)]);
        }
        spans.extend(self.index_spans()?);
        if let Some(lse) = bufs.lse {
            // `[batch, heads_q, seqlen_q]`, or `[heads_q, total_q]` for variable-length calls.
            let needed = (nb as u128 * p.heads_q as u128 * rows_q as u128).min(u64::MAX as u128) as u64;
            if (lse.len as u64) < needed {
                return Err(Error::BufferTooSmall { tensor: "lse", needed, len: lse.len as u64 });
            }
            if !lse.ptr.is_multiple_of(4) {
                return Err(Error::Misaligned { tensor: "lse", reason: format!("base address {:#x} is not 4-byte aligned", lse.ptr) });
            }
            // A null address would make the kernel skip the log-sum-exp silently.
            if lse.ptr == 0 {
                return Err(Error::InvalidBuffer { tensor: "lse", reason: "null address".into() });
            }
            let end = needed.checked_mul(4).and_then(|b| lse.ptr.checked_add(b));
            let end = end.ok_or_else(|| Error::InvalidStrides { tensor: "lse", reason: "addresses overflow 64 bits".into() })?;
            spans.insert(1, ("lse", lse.ptr, end));
        }
        // What the kernel writes must not share memory with anything else it touches, or the
        // result depends on CTA timing. Checked on ranges: an output interleaved with the inputs
        // in one allocation is refused even where no element is shared.
        let written = 1 + bufs.lse.is_some() as usize;
        for (i, &(w, w0, w1)) in spans[..written].iter().enumerate() {
            if let Some(&(other, ..)) = spans[i + 1..].iter().find(|&&(_, s0, s1)| w0 < s1 && s0 < w1) {
                return Err(Error::InvalidBuffer { tensor: w, reason: format!("overlaps {other}") });
            }
        }
        Ok(spans)
    }

    /// Checks the arrays the kernel reads besides the tensors: the layout's index arrays (block
    /// table and key counts, device offsets) and the modifications' (ALiBi slopes, sinks);
    /// returns their byte spans.
    pub fn index_spans(&self) -> Result<Vec<Span>> {
        let p = self.p;
        let mut spans = vec![];
        if let Some(a) = p.mods.alibi {
            let n = if a.per_batch { p.batch.checked_mul(p.heads_q).ok_or_else(|| shape_err("alibi_slopes", "entries overflow"))? } else { p.heads_q };
            spans.push(check_i32("alibi_slopes", a.slopes.buffer(), n)?);
        }
        if let Some(sinks) = p.mods.sinks {
            spans.push(check_i32("sinks", sinks.buffer(), p.heads_q)?);
        }
        for (name, array, n) in p.descale.arrays(p.batch, p.heads_kv)? {
            spans.push(check_i32(name, array.buffer(), n)?);
        }
        if let Some(user) = p.mods.user {
            // The caller's kernels may read any of it: no output may overlap the whole array.
            spans.push(check_i32("user_data", user.buffer(), user.buffer().len.max(1))?);
        }
        if let Some(mask) = p.mods.blocks {
            for (name, array, n) in mask.arrays()? {
                spans.push(check_i32(name, array.buffer(), n)?);
            }
        }
        if let (Kv::Paged(pg), Some(pages)) = (&p.layout.kv, self.paged) {
            // The kernel reads every table row it is launched for and a count per sequence.
            let entries = p.batch.checked_mul(pages.pages.pages_per_seq).ok_or_else(|| shape_err("block_table", "entries overflow"))?;
            spans.push(check_i32("block_table", pg.block_table.buffer(), entries)?);
            if let Some(used) = pg.seqused_k {
                spans.push(check_i32("seqused_k", used.buffer(), p.batch)?);
            }
        }
        if let Rows::Packed(Offsets::Device(o)) = &p.layout.rows {
            // The kernels read `batch + 1` offsets of each.
            let n = p.batch.checked_add(1).ok_or_else(|| shape_err("batch", "overflows"))?;
            spans.push(check_i32("cu_seqlens_q", o.cu_seqlens_q.buffer(), n)?);
            if let Some(k) = o.cu_seqlens_k {
                spans.push(check_i32("cu_seqlens_k", k.buffer(), n)?);
            }
        }
        Ok(spans)
    }

    /// True when the kernel reads K and V: with no keys it never does (any, even null, buffer
    /// will do).
    pub fn reads_kv(&self) -> bool {
        match (&self.paged, &self.packed) {
            (Some(_), _) => self.p.seqlen_k > 0,
            (None, Some(v)) => v.total_k > 0,
            (None, None) => self.p.seqlen_k > 0,
        }
    }
}

/// Checks a variable-length call's offsets: host ones entirely, device ones as far as the host
/// can (key offsets present where needed, totals in the kernels' 32-bit range).
fn check_offsets(p: &AttentionParams, o: &Offsets) -> Result<Packed> {
    let paged = matches!(p.layout.kv, Kv::Paged(_));
    match o {
        Offsets::Host { cu_seqlens_q, cu_seqlens_k } => {
            let keys = (!(cu_seqlens_k.is_empty() && paged)).then_some(("cu_seqlens_k", cu_seqlens_k, p.seqlen_k));
            for (what, cu, max) in std::iter::once(("cu_seqlens_q", cu_seqlens_q, p.seqlen_q)).chain(keys) {
                // `batch + 1` in u128: any usize batch, however hostile, is an error, not a wrap.
                if cu.len() as u128 != p.batch as u128 + 1 {
                    return Err(shape_err(what, format!("has {} offsets, batch {} needs {}", cu.len(), p.batch, p.batch as u128 + 1)));
                }
                if cu[0] != 0 {
                    return Err(shape_err(what, format!("starts at {}, not 0", cu[0])));
                }
                if let Some(w) = cu.windows(2).find(|w| w[1] < w[0]) {
                    return Err(shape_err(what, format!("decreases ({} then {})", w[0], w[1])));
                }
                if let Some(w) = cu.windows(2).find(|w| (w[1] - w[0]) as usize > max) {
                    let name = if what == "cu_seqlens_q" { "seqlen_q (max_seqlen_q)" } else { "seqlen_k (max_seqlen_k)" };
                    return Err(shape_err(what, format!("a sequence of {} rows exceeds {name} = {max}", w[1] - w[0])));
                }
            }
            let upload = if paged && cu_seqlens_k.is_empty() { cu_seqlens_q.clone() } else { [&cu_seqlens_q[..], &cu_seqlens_k[..]].concat() };
            Ok(Packed { total_q: o.total_q(), total_k: if paged { 0 } else { o.total_k() }, upload: Some(upload), cu_seqlens: [0; 2] })
        }
        Offsets::Device(d) => {
            if d.cu_seqlens_k.is_none() && !paged {
                let reason = "unpaged variable-length calls need key offsets".into();
                return Err(Error::InvalidBuffer { tensor: "cu_seqlens_k", reason });
            }
            // Row indices (and the kernels' clamps) are 32-bit.
            for (what, n) in [("total_q", d.total_q), ("total_k", d.total_k)] {
                if n > i32::MAX as usize {
                    return Err(shape_err(what, format!("{n} exceeds {}", i32::MAX)));
                }
            }
            Ok(Packed { total_q: d.total_q, total_k: if paged { 0 } else { d.total_k }, upload: None, cu_seqlens: [0; 2] })
        }
    }
}

/// Checks a call's attention modifications: a finite, positive softcap, a scale whose inverse
/// is finite under ALiBi, and none on a paged or split call (the arrays are checked with the
/// buffers). `None` for plain attention.
fn check_mods(p: &AttentionParams, scale: f32, paged: bool) -> Result<Option<ModParams>> {
    if p.mods.is_plain() {
        return Ok(None);
    }
    if let Some(cap) = p.mods.softcap {
        // The kernels scale by `cap / scale` and `2 log2(e) scale / cap`: both finite, nonzero.
        let pre = 2.0 * std::f32::consts::LOG2_E * scale / cap;
        let post = cap / scale;
        if !(cap > 0.0 && post.is_finite() && post > 0.0 && pre.is_finite() && pre > 0.0) {
            return Err(shape_err("softcap", format!("{cap} is not positive and finite (over the scale {scale})")));
        }
    }
    // ALiBi's slopes are divided by the scale into raw units: a subnormal scale overflows that.
    if p.mods.alibi.is_some() && !(1.0 / scale).is_finite() {
        return Err(shape_err("softmax_scale", format!("{scale}: ALiBi divides its slopes by the scale, and 1 / {scale} overflows f32")));
    }
    if let Some(mask) = p.mods.blocks {
        mask.check(p.batch, p.heads_q, p.seqlen_q, p.seqlen_k)?;
    }
    if paged {
        return Err(shape_err("mods", "paged K/V caches take no attention modifications (window, softcap, ALiBi, sinks, block masks) yet"));
    }
    if p.num_splits.is_some_and(|n| n > 1) {
        return Err(shape_err("num_splits", "calls with attention modifications run unsplit"));
    }
    Ok(Some(p.mods.params(p.causal, scale, p.heads_q)))
}

/// Checks what FP8 K/V caches need: head dimensions of whole 16-byte chunks, no modifications,
/// finite scalar factors; and that 16-bit K and V come with none.
fn check_kv(p: &AttentionParams, bufs: &Buffers) -> Result<()> {
    if bufs.query_fp8.is_none() && p.descale.q != Descale::default() {
        return Err(shape_err("q_descale", "16-bit queries take no dequantization factor"));
    }
    let Some(kv) = bufs.kv else {
        if !p.descale.kv_is_none() {
            return Err(shape_err("kv_descale", "K and V of the queries' type take no dequantization factors"));
        }
        return Ok(());
    };
    if let Some(q) = bufs.query_fp8 {
        if q != Fp8::E4m3 || kv != q {
            return Err(shape_err("dtype", format!("FP8 queries run as e4m3 Q, K and V; not {} Q with {} K/V", q.name(), kv.name())));
        }
        if matches!(p.layout.kv, Kv::Paged(_)) {
            return Err(shape_err("layout", "FP8 queries take contiguous K and V (paged caches take 16-bit queries)"));
        }
    }
    let (d, dv) = (p.head_dim, p.head_dim_v());
    if !d.is_multiple_of(16) || !dv.is_multiple_of(16) {
        return Err(shape_err("head_dim", format!("{} K/V caches need head dimensions that are multiples of 16, not {d} and {dv}", kv.name())));
    }
    if !p.mods.is_plain() {
        return Err(shape_err("mods", format!("{} K/V caches take no attention modifications (window, softcap, ALiBi, sinks, block masks) yet", kv.name())));
    }
    p.descale.check()
}

/// Checks a paged call's page geometry.
fn check_pages(p: &AttentionParams, pg: &Pages) -> Result<Pages> {
    if !pg.page_size.is_power_of_two() || pg.page_size < 16 || pg.page_size > 1 << 20 {
        return Err(shape_err("page_size", format!("{} is not a power of two from 16 to 2^20", pg.page_size)));
    }
    if pg.num_pages == 0 || pg.num_pages > i32::MAX as usize {
        return Err(shape_err("num_pages", format!("{} is not between 1 and {}", pg.num_pages, i32::MAX)));
    }
    if pg.pages_per_seq == 0 || pg.pages_per_seq > i32::MAX as usize {
        return Err(shape_err("pages_per_seq", format!("{} is not between 1 and {}", pg.pages_per_seq, i32::MAX)));
    }
    if p.seqlen_k > pg.pages_per_seq.saturating_mul(pg.page_size) {
        let reason = format!("{} keys do not fit {} pages of {} rows", p.seqlen_k, pg.pages_per_seq, pg.page_size);
        return Err(shape_err("seqlen_k", reason));
    }
    Ok(*pg)
}

/// A buffer's name and the byte range `[start, end)` a kernel touches of it.
pub(crate) type Span = (&'static str, u64, u64);

/// Checks a buffer of `needed` 4-byte elements (i32 or f32) the kernel reads; returns its byte
/// span.
pub(crate) fn check_i32(tensor: &'static str, buf: BufferRef, needed: usize) -> Result<Span> {
    if buf.ptr == 0 {
        return Err(Error::InvalidBuffer { tensor, reason: "null address".into() });
    }
    if !buf.ptr.is_multiple_of(4) {
        return Err(Error::Misaligned { tensor, reason: format!("base address {:#x} is not 4-byte aligned", buf.ptr) });
    }
    if buf.len < needed {
        return Err(Error::BufferTooSmall { tensor, needed: needed as u64, len: buf.len as u64 });
    }
    let end = (needed as u64).checked_mul(4).and_then(|b| buf.ptr.checked_add(b));
    let end = end.ok_or_else(|| Error::InvalidBuffer { tensor, reason: "addresses overflow 64 bits".into() })?;
    Ok((tensor, buf.ptr, end))
}

/// Checks one tensor's address, strides, alignment and extent; returns the end (exclusive) of
/// the bytes it spans.
pub(crate) fn check_tensor(tensor: &'static str, buf: BufferRef, strides: Strides, dims: [usize; 4], elem_bytes: u64) -> Result<u64> {
    let s = [strides.batch, strides.row, strides.head];
    if buf.ptr == 0 {
        return Err(Error::InvalidBuffer { tensor, reason: "null address".into() });
    }
    if s.iter().any(|&x| x < 0) {
        return Err(Error::InvalidStrides { tensor, reason: format!("negative stride in {s:?}") });
    }
    // The kernels move 16-byte chunks: 8 elements of every row must be one aligned vector.
    if !buf.ptr.is_multiple_of(16) {
        return Err(Error::Misaligned { tensor, reason: format!("base address {:#x} is not 16-byte aligned", buf.ptr) });
    }
    if let Some(bad) = s.iter().find(|&&x| !(x as u64).wrapping_mul(elem_bytes).is_multiple_of(16)) {
        return Err(Error::Misaligned { tensor, reason: format!("stride {bad} elements is not a multiple of 16 bytes") });
    }
    // Highest element offset reached, in checked 64-bit arithmetic.
    let overflow = || Error::InvalidStrides { tensor, reason: "element offsets overflow 64 bits".into() };
    let reach = |n: usize, stride: i64| i64::try_from(n - 1).ok().and_then(|n| n.checked_mul(stride));
    let last = [reach(dims[0], s[0]), reach(dims[1], s[1]), reach(dims[2], s[2])]
        .into_iter()
        .try_fold(dims[3] as i64, |acc, x| x.and_then(|x| acc.checked_add(x)))
        .ok_or_else(overflow)?;
    // Byte offsets must fit in signed 64 bits too (the kernels form addresses as base + offset
    // * 2), and so must the addresses.
    let end = last.checked_mul(elem_bytes as i64).and_then(|b| buf.ptr.checked_add(b as u64)).ok_or_else(overflow)?;
    if last as u64 > buf.len as u64 {
        return Err(Error::BufferTooSmall { tensor, needed: last as u64, len: buf.len as u64 });
    }
    Ok(end)
}

/// True when no two elements of a `dims` tensor with strides `s` share memory, by the usual
/// sufficient test: taken by increasing stride, each dimension of extent > 1 steps over all
/// the dimensions inside it. Only the output needs it: inputs may alias themselves (broadcast).
pub(crate) fn no_self_overlap(s: Strides, dims: [usize; 4]) -> bool {
    let mut by_stride = [(s.batch, dims[0]), (s.row, dims[1]), (s.head, dims[2])];
    by_stride.sort_unstable();
    let mut span = dims[3] as i64;
    by_stride.iter().filter(|&&(_, n)| n > 1).all(|&(stride, n)| {
        let clears = stride >= span;
        span += stride * (n as i64 - 1); // no overflow: check_tensor bounded the whole sum
        clears
    })
}
