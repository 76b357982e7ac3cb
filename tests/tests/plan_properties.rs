//! Property test of the host-side validation (`AttentionParams::plan`), CPU only.
//!
//! Thousands of seeded random calls, in three kinds:
//! - *valid* calls (plain, padded, transposed and packed layouts, tightly packed buffers): the
//!   planner must accept them (no false rejections);
//! - valid calls with *one injected fault* (a buffer one element short, a misaligned base or
//!   stride, a negative or overflowing stride, a null address, an unsupported head_dim, a bad
//!   GQA ratio, a too long sequence, a scale not positive and finite, a wrong tile config, a too large
//!   grid, output strides that alias, an output or lse overlapping an input): the planner
//!   must return exactly the typed error that fault calls for;
//! - *hostile* calls (every field drawn from pools of huge, zero, misaligned, negative-looking
//!   and tiny values): any typed error is fine.
//!
//! Every accepted plan is checked against an independent model of the addresses the kernel
//! touches (see [`verify_plan`]): every element it reads or writes must lie inside the given
//! buffers, be 16-byte aligned where it moves vectors, and what it writes must neither alias
//! itself nor overlap anything else it touches.
//!
//! Variable-length calls (packed rows, `cu_seqlens`, offsets on the host or on the GPU) run
//! through the same three kinds, from their own generators ([`varlen_case`],
//! [`inject_varlen`], [`hostile_varlen_case`]) and their own address model
//! ([`verify_varlen_launch`]).
use std::collections::BTreeMap;

use flashrs::attention::config::{CONFIGS, SPLIT_CONFIGS, VARLEN_CONFIGS};
use flashrs::attention::{BufferRef, Buffers, FwdParams, LaunchPlan, Strides, TileConfig, VarlenBuffers, kernel_name};
use flashrs::hopper;
use flashrs::{AttentionParams, DType, Error, KernelPath, Varlen};
use flashrs_tests::expect::{Want, error_matches};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Fake allocations live in distinct 1 TiB regions of the address space.
const REGION: u64 = 1 << 40;
const TENSORS: [&str; 5] = ["q", "k", "v", "out", "lse"];

fn pick<T: Copy>(rng: &mut StdRng, xs: &[T]) -> T {
    xs[rng.random_range(0..xs.len())]
}

/// The strides a call uses for (q, k, v, out), defaults resolved.
fn resolved(p: &AttentionParams) -> [Strides; 4] {
    let d = p.head_dim;
    [
        p.q_strides.unwrap_or_else(|| Strides::bshd(p.seqlen_q, p.heads_q, d)),
        p.k_strides.unwrap_or_else(|| Strides::bshd(p.seqlen_k, p.heads_kv, d)),
        p.v_strides.unwrap_or_else(|| Strides::bshd(p.seqlen_k, p.heads_kv, d)),
        p.o_strides.unwrap_or_else(|| Strides::bshd(p.seqlen_q, p.heads_q, d)),
    ]
}

/// Elements a tensor needs (highest offset + 1), in the test's own arithmetic.
fn needed(dims: [usize; 4], s: Strides) -> i128 {
    let st = [s.batch, s.row, s.head];
    (0..3).map(|i| (dims[i] as i128 - 1) * st[i] as i128).sum::<i128>() + dims[3] as i128
}

fn tensor_dims(p: &AttentionParams) -> [[usize; 4]; 4] {
    let d = p.head_dim;
    let q = [p.batch, p.seqlen_q, p.heads_q, d];
    let k = [p.batch, p.seqlen_k, p.heads_kv, d];
    [q, k, k, q]
}

// ------------------------------------------------------------------------------------------
// The address model.

/// Elements one tensor access pattern reaches: offsets `sum(idx_i * stride_i) + col` for
/// `idx_i in 0..extent_i`, `col in 0..cols`, from base address `ptr` (2-byte elements).
struct Access {
    name: &'static str,
    ptr: u64,
    strides: [i64; 3],
    extents: [u128; 3],
    cols: u128,
}

impl Access {
    /// (lowest, highest) element offset, exact (the set is a box).
    fn bounds(&self) -> (i128, i128) {
        let (mut lo, mut hi) = (0i128, self.cols as i128 - 1);
        for i in 0..3 {
            let reach = (self.extents[i] as i128 - 1) * self.strides[i] as i128;
            lo += reach.min(0);
            hi += reach.max(0);
        }
        (lo, hi)
    }

    /// Checks the access against the buffer `buf`; returns its byte range [start, end).
    fn check(&self, buf: BufferRef) -> Result<(i128, i128), String> {
        let n = self.name;
        if self.ptr != buf.ptr {
            return Err(format!("{n}: kernel address {:#x} is not the buffer's {:#x}", self.ptr, buf.ptr));
        }
        if self.ptr == 0 {
            return Err(format!("{n}: null address"));
        }
        let (lo, hi) = self.bounds();
        if lo < 0 {
            return Err(format!("{n}: element offset {lo} below the buffer"));
        }
        if hi >= buf.len as i128 {
            return Err(format!("{n}: element offset {hi} past the buffer's {} elements", buf.len));
        }
        let (start, end) = (self.ptr as i128 + 2 * lo, self.ptr as i128 + 2 * (hi + 1));
        if end > u64::MAX as i128 + 1 {
            return Err(format!("{n}: addresses wrap past 2^64"));
        }
        // 16-byte vectors: each row starts aligned (columns go in whole chunks of 8, and
        // head_dim is a multiple of 8, so no chunk crosses past head_dim).
        if self.ptr % 16 != 0 || self.cols % 8 != 0 {
            return Err(format!("{n}: base {:#x} or head_dim {} breaks 16-byte chunks", self.ptr, self.cols));
        }
        for i in 0..3 {
            if self.extents[i] > 1 && (2 * self.strides[i] as i128).rem_euclid(16) != 0 {
                return Err(format!("{n}: stride {} breaks 16-byte alignment", self.strides[i]));
            }
        }
        Ok((start, end))
    }

    /// For small tensors: true when no two of its rows (of `cols` elements) overlap.
    fn rows_disjoint(&self) -> Option<bool> {
        let rows = self.extents.iter().product::<u128>();
        if rows > 50_000 {
            return None;
        }
        let mut starts = Vec::with_capacity(rows as usize);
        for a in 0..self.extents[0] as i128 {
            for b in 0..self.extents[1] as i128 {
                for c in 0..self.extents[2] as i128 {
                    starts.push(a * self.strides[0] as i128 + b * self.strides[1] as i128 + c * self.strides[2] as i128);
                }
            }
        }
        starts.sort_unstable();
        Some(starts.windows(2).all(|w| w[1] - w[0] >= self.cols as i128))
    }
}

macro_rules! ensure {
    ($cond:expr, $($msg:tt)*) => {
        if !$cond {
            return Err(format!($($msg)*));
        }
    };
}

/// The independent check of an accepted plan: geometry, kernel parameters, and every address
/// the kernel (kernels-gpu/src/fwd) reads or writes.
///
/// The kernel, per CTA `block` of the 1-D grid: `(bh, m) = divmod(block, m_blocks)`,
/// `(batch, head) = divmod(bh, heads_q)`, query block `m_blocks - 1 - m`, kv head
/// `head / group`. It reads Q rows of its query block below `seqlen_q` and K/V rows below
/// `seqlen_k` (rows past them and chunks past head_dim are zero-filled, not read; a skipped
/// copy still names the matrix's row 0, chunk 0), writes output rows below `seqlen_q`, all
/// in 16-byte chunks of columns `0..head_dim`, and lse element
/// `(batch * heads_q + head) * seqlen_q + row`. Over the whole grid that is the box
/// `batch x rows x heads x columns` of each tensor.
fn verify_plan(p: &AttentionParams, bufs: &Buffers, plan: &LaunchPlan) -> Result<(), String> {
    // Variable-length calls: the offsets the plan carries (or points at), checked once here;
    // every launch's accesses in `verify_varlen_launch`.
    let totals = match &p.varlen {
        Some(v) => Some(verify_varlen_call(p, v, bufs, plan)?),
        None => None,
    };
    // The Hopper launch: planned alongside (path Auto; sm_90a GPUs run it) or the plan itself
    // (path Wgmma). Same parameters and accesses, its own tiles (TMA reads the same boxes of
    // rows below seqlen and columns below head_dim).
    if let Some(w) = &plan.wgmma {
        ensure!(p.path != KernelPath::MmaSync, "mma.sync path with a wgmma plan");
        match totals {
            None => {
                ensure!(w.kernel == hopper::kernel_name(p.dtype, &w.config), "wgmma kernel {}", w.kernel);
                ensure!(w.packed_rows.is_none(), "wgmma packed rows {:?} for a fixed-length call", w.packed_rows);
            }
            Some((tq, tk)) => {
                // The variable-length twin, its tensor maps over the packed rows.
                let want = hopper::varlen_kernel_name(p.dtype, &w.config);
                ensure!(want.as_deref() == Some(w.kernel.as_str()), "wgmma kernel {} for a variable-length call (want {want:?})", w.kernel);
                ensure!(w.kernel.starts_with("flash_fwd_sm90_varlen_"), "wgmma kernel {}", w.kernel);
                let rows = [tq, tk].map(|t| t as usize);
                ensure!(w.packed_rows == Some(rows), "wgmma packed rows {:?}, want {rows:?}", w.packed_rows);
            }
        }
        ensure!(hopper::config::CONFIGS.contains(&w.config), "wgmma config {:?} not instantiated", w.config);
        ensure!(p.head_dim <= w.config.head_dim && p.config.is_none(), "wgmma config {:?} for {p:?}", w.config);
        ensure!(w.block as usize == w.config.threads() && w.dtype == p.dtype, "wgmma block {} dtype {:?}", w.block, w.dtype);
        verify_launch(p, bufs, hopper::tile_config(&w.config), w.grid, &w.params).map_err(|e| format!("wgmma plan: {e}"))?;
    }
    if p.path == KernelPath::Wgmma {
        let w = plan.wgmma.as_ref().ok_or("wgmma path without a wgmma plan")?;
        ensure!(plan.kernel == w.kernel && plan.grid == w.grid && plan.params == w.params, "wgmma plan is not the launch");
        ensure!(plan.block == w.block && plan.smem == w.smem, "wgmma geometry is not the launch");
        return Ok(());
    }
    let c: TileConfig = plan.config;
    if let Some(want) = p.config {
        ensure!(c == want, "forced config {want:?} not used ({c:?})");
    }
    ensure!(p.head_dim > 0 && p.head_dim % 8 == 0 && p.head_dim <= c.head_dim, "head_dim {} vs config {c:?}", p.head_dim);
    if p.varlen.is_none() {
        ensure!(CONFIGS.contains(&c), "config {c:?} is not instantiated");
        ensure!(plan.kernel == kernel_name(p.dtype, &c), "kernel {} for {:?} {c:?}", plan.kernel, p.dtype);
    } else if plan.kernel.starts_with("flash_fwd_varlen_split_") {
        // Split variable-length calls: a split kernel's configuration for the padded head
        // dimension, `flash_fwd_varlen_split_<dtype>_...`, and (unless the call is empty) a
        // workspace of `num_splits` partial rows per (batch, head, row of the longest
        // sequence).
        ensure!(matches!(p.num_splits, Some(n) if n > 1), "split kernel {} for num_splits {:?}", plan.kernel, p.num_splits);
        ensure!(SPLIT_CONFIGS.contains(&c), "config {c:?} is not a split configuration for a variable-length call");
        let padded = VARLEN_CONFIGS.iter().filter(|v| v.head_dim >= p.head_dim).map(|v| v.head_dim).min();
        ensure!(padded == Some(c.head_dim), "split config {c:?} for a variable-length call with head_dim {}", p.head_dim);
        let name = kernel_name(p.dtype, &c).replacen("flash_fwd_", "flash_fwd_varlen_split_", 1);
        ensure!(plan.kernel == name, "kernel {} for a split variable-length {:?} {c:?}", plan.kernel, p.dtype);
        ensure!(plan.wgmma.is_none(), "split variable-length call with a wgmma launch");
        if let Some(s) = &plan.split {
            let n = s.num_splits as usize;
            ensure!((2..=32).contains(&n) && matches!(p.num_splits, Some(f) if f >= n), "{n} splits for num_splits {:?}", p.num_splits);
            ensure!(plan.params.num_splits as usize == n && plan.grid as usize % n == 0, "split-KV of {n}: {} splits in the launch, grid {}", plan.params.num_splits, plan.grid);
            let rows = p.batch * p.heads_q * p.seqlen_q;
            ensure!(s.counters_len == plan.grid as usize / n, "split-KV counters {} for grid {}", s.counters_len, plan.grid);
            let want = (n * rows * c.head_dim, n * rows);
            ensure!((s.o_accum_len, s.lse_accum_len) == want, "split-KV workspace {s:?} for {n} splits of {rows} rows");
        } else {
            ensure!(plan.is_empty() || plan.params.num_splits <= 1, "a {}-split launch without a split-KV workspace", plan.params.num_splits);
        }
    } else {
        // The variable-length kernels: one configuration per padded head dimension, the
        // smallest that holds head_dim; `flash_fwd_varlen_<dtype>_...` entry points.
        ensure!(plan.kernel.starts_with("flash_fwd_varlen_"), "kernel {} for a variable-length call", plan.kernel);
        ensure!(VARLEN_CONFIGS.contains(&c), "config {c:?} is not a variable-length configuration");
        let want = VARLEN_CONFIGS.iter().filter(|v| v.head_dim >= p.head_dim).min_by_key(|v| v.head_dim);
        ensure!(want == Some(&c), "config {c:?} for a variable-length call with head_dim {} (want {want:?})", p.head_dim);
        let name = kernel_name(p.dtype, &c).replacen("flash_fwd_", "flash_fwd_varlen_", 1);
        ensure!(plan.kernel.starts_with("flash_fwd_varlen_") && plan.kernel == name, "kernel {} for a variable-length {:?} {c:?}", plan.kernel, p.dtype);
        ensure!(plan.split.is_none(), "split-KV plan for the unsplit variable-length kernel");
    }
    ensure!(plan.block as usize == c.warps * 32, "block {} for {c:?}", plan.block);
    let smem = (c.block_m + 2 * c.stages * c.block_n) * c.head_dim * 2;
    ensure!(plan.smem as usize == smem, "smem {} for {c:?} (want {smem})", plan.smem);
    verify_launch(p, bufs, c, plan.grid, &plan.params)
}

/// Geometry, parameters and addresses of one launch with tiles `c`.
fn verify_launch(p: &AttentionParams, bufs: &Buffers, c: TileConfig, grid: u32, f: &FwdParams) -> Result<(), String> {
    if p.varlen.is_some() {
        return verify_varlen_launch(p, bufs, c, grid, f);
    }
    ensure!(p.head_dim > 0 && p.head_dim % 8 == 0 && p.head_dim <= c.head_dim, "head_dim {} vs config {c:?}", p.head_dim);
    let m_blocks = p.seqlen_q.div_ceil(c.block_m) as u128;
    let ctas = p.batch as u128 * p.heads_q as u128 * m_blocks;
    ensure!(grid as u128 == ctas, "grid {grid} for {ctas} CTAs");
    ensure!(ctas <= i32::MAX as u128, "grid {ctas} past the CUDA limit");
    if ctas == 0 {
        return Ok(());
    }
    // What the kernel sees is the call.
    ensure!(f.batch as usize == p.batch && f.heads_q as usize == p.heads_q, "batch/heads {}/{}", f.batch, f.heads_q);
    ensure!(f.seqlen_q as usize == p.seqlen_q && f.seqlen_k as usize == p.seqlen_k, "seqlens {}/{}", f.seqlen_q, f.seqlen_k);
    ensure!(f.head_dim as usize == p.head_dim && f.m_blocks as u128 == m_blocks, "head_dim/m_blocks {}/{}", f.head_dim, f.m_blocks);
    ensure!(f.causal == p.causal as u32, "causal {}", f.causal);
    ensure!(p.heads_kv > 0 && f.group as usize * p.heads_kv == p.heads_q, "group {} for {}/{}", f.group, p.heads_q, p.heads_kv);
    ensure!(f.scale_log2.to_bits() == (p.scale() * std::f32::consts::LOG2_E).to_bits(), "scale_log2 {}", f.scale_log2);
    ensure!(f.scale_log2.is_finite() && f.scale_log2 > 0.0, "scale_log2 {} not positive and finite", f.scale_log2);
    // The kernel's 32-bit mask arithmetic (kernels-gpu/src/fwd/{mod,mask}.rs): rows reach
    // m_blocks * block_m <= seqlen_q + block_m, columns keys + 2 * block_n, and the causal
    // bounds `m0 + block_m + (seqlen_k - seqlen_q)`, `row + (seqlen_k - seqlen_q) + 1` stay
    // below seqlen_k + block_m + 1.
    let reach = p.seqlen_q.max(p.seqlen_k) as i64 + 2 * c.block_m.max(c.block_n) as i64 + 1;
    ensure!(reach <= i32::MAX as i64, "32-bit mask arithmetic overflows ({reach})");

    let (bq, hq, sq, sk, d) = (p.batch as u128, p.heads_q as u128, p.seqlen_q as u128, p.seqlen_k as u128, p.head_dim as u128);
    let q = Access { name: "q", ptr: f.q, strides: f.q_strides, extents: [bq, sq, hq], cols: d };
    let o = Access { name: "out", ptr: f.o, strides: f.o_strides, extents: [bq, sq, hq], cols: d };
    let mut reads = vec![("q", q.check(bufs.q)?)];
    let out_range = o.check(bufs.o)?;
    if f.seqlen_k > 0 {
        // Heads the kernel reaches: head / group for head < heads_q.
        let hkv = (p.heads_q as u128 - 1) / f.group as u128 + 1;
        let k = Access { name: "k", ptr: f.k, strides: f.k_strides, extents: [bq, sk, hkv], cols: d };
        let v = Access { name: "v", ptr: f.v, strides: f.v_strides, extents: [bq, sk, hkv], cols: d };
        reads.push(("k", k.check(bufs.k)?));
        reads.push(("v", v.check(bufs.v)?));
    }
    if let Some(disjoint) = o.rows_disjoint() {
        ensure!(disjoint, "two output rows share memory (strides {:?})", f.o_strides);
    }
    let writes = vec![("out", out_range)];
    lse_and_overlaps(bufs, f, bq * hq * sq, &reads, writes)
}

/// A tensor's name and the byte range `[start, end)` a launch touches in it.
type Range = (&'static str, (i128, i128));

/// The log-sum-exp's `count` f32 elements (from the kernel's `f.lse`) within their buffer and
/// 4-byte aligned; then every write (the output's range in `writes`, and the lse) overlaps
/// neither another write nor anything read.
fn lse_and_overlaps(bufs: &Buffers, f: &FwdParams, count: u128, reads: &[Range], mut writes: Vec<Range>) -> Result<(), String> {
    match bufs.lse {
        None => ensure!(f.lse == 0, "lse address {:#x} without an lse buffer", f.lse),
        Some(l) => {
            ensure!(f.lse != 0, "lse buffer given but the kernel would skip it (null address)");
            ensure!(f.lse == l.ptr, "lse address {:#x} vs {:#x}", f.lse, l.ptr);
            ensure!(count <= l.len as u128, "lse offset {} past {} elements", count - 1, l.len);
            ensure!(l.ptr % 4 == 0, "lse {:#x} misaligned", l.ptr);
            let end = l.ptr as i128 + 4 * count as i128;
            ensure!(end <= u64::MAX as i128 + 1, "lse addresses wrap");
            writes.push(("lse", (l.ptr as i128, end)));
        }
    }
    // Writes overlap neither each other nor anything read.
    for (i, &(w, (w0, w1))) in writes.iter().enumerate() {
        for &(other, (s0, s1)) in writes[i + 1..].iter().chain(reads.iter()) {
            ensure!(w1 <= s0 || s1 <= w0, "{w} [{w0:#x}, {w1:#x}) overlaps {other} [{s0:#x}, {s1:#x})");
        }
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------
// The address model of variable-length calls.

/// The packed row totals (total_q, total_k) of a variable-length call, as the model reads the
/// call: host offsets must be what the planner promises to have validated (`batch + 1`
/// entries each, from 0, non-decreasing, no sequence longer than the maxima), and then their
/// last entries are the totals; device offsets come with the totals they are clamped into.
fn varlen_totals(p: &AttentionParams, v: &Varlen) -> Result<(u128, u128), String> {
    match v {
        Varlen::Host { cu_seqlens_q, cu_seqlens_k } => {
            let mut totals = [0u128; 2];
            let arrays = [("cu_seqlens_q", cu_seqlens_q, p.seqlen_q), ("cu_seqlens_k", cu_seqlens_k, p.seqlen_k)];
            for (total, (name, cu, most)) in totals.iter_mut().zip(arrays) {
                ensure!(cu.len() as u128 == p.batch as u128 + 1, "{name}: {} offsets accepted for batch {}", cu.len(), p.batch);
                ensure!(cu[0] == 0, "{name}: offsets starting at {} accepted", cu[0]);
                for w in cu.windows(2) {
                    ensure!(w[0] <= w[1], "{name}: decreasing offsets {} then {} accepted", w[0], w[1]);
                    let len = (w[1] as i64 - w[0] as i64) as u128;
                    ensure!(len <= most as u128, "{name}: a sequence of {len} rows accepted with a maximum of {most}");
                }
                *total = *cu.last().unwrap() as u128;
            }
            Ok((totals[0], totals[1]))
        }
        Varlen::Device { total_q, total_k } => Ok((*total_q as u128, *total_k as u128)),
    }
}

/// The plan-level part of a variable-length call: a split only where one was forced (the
/// planner without a GPU never chooses one), at most 32, the offsets valid (host) and
/// carried exactly by the plan for the launch to upload, or (device) given in buffers, not
/// uploaded, with totals the kernels' 32-bit row indices hold. Returns the totals.
fn verify_varlen_call(p: &AttentionParams, v: &Varlen, bufs: &Buffers, plan: &LaunchPlan) -> Result<(u128, u128), String> {
    ensure!(p.paged.is_none() && bufs.paged.is_none(), "paged variable-length calls are not modelled here");
    ensure!(p.num_splits.is_none_or(|n| n <= 32), "num_splits {:?} accepted", p.num_splits);
    ensure!(plan.split.is_none() || matches!(p.num_splits, Some(n) if n > 1), "split-KV plan for num_splits {:?}", p.num_splits);
    let (tq, tk) = varlen_totals(p, v)?;
    ensure!(tq <= i32::MAX as u128 && tk <= i32::MAX as u128, "packed totals {tq}/{tk} past the 32-bit row indices");
    match v {
        Varlen::Host { cu_seqlens_q, cu_seqlens_k } => {
            ensure!(bufs.varlen.is_none(), "device offset buffers accepted with host offsets: {:?}", bufs.varlen);
            let all: Vec<i32> = [&cu_seqlens_q[..], &cu_seqlens_k[..]].concat();
            // An empty plan launches nothing; it may leave the offsets out.
            let carried = plan.varlen_offsets.as_ref();
            ensure!(carried == Some(&all) || (plan.is_empty() && carried.is_none()), "host plan carries offsets {carried:?}, want {all:?}");
        }
        Varlen::Device { .. } => {
            ensure!(plan.varlen_offsets.is_none(), "device-offset plan carries offsets to upload: {:?}", plan.varlen_offsets);
            let vb = bufs.varlen.ok_or("device offsets accepted without Buffers::varlen")?;
            ensure!(vb.cu_seqlens_k.is_some(), "unpaged device-offset call accepted without key offsets");
        }
    }
    Ok((tq, tk))
}

/// The byte range [start, end) of `count` i32 offsets the kernel reads from `buf` at `ptr`.
fn offsets_range(name: &str, ptr: u64, buf: BufferRef, count: u128) -> Result<(i128, i128), String> {
    ensure!(ptr == buf.ptr, "{name}: kernel address {ptr:#x} is not the buffer's {:#x}", buf.ptr);
    ensure!(ptr != 0, "{name}: null address");
    ensure!(ptr % 4 == 0, "{name}: {ptr:#x} not 4-byte aligned");
    ensure!(count <= buf.len as u128, "{name}: offset {} past the buffer's {} elements", count - 1, buf.len);
    let end = ptr as i128 + 4 * count as i128;
    ensure!(end <= u64::MAX as i128 + 1, "{name}: addresses wrap past 2^64");
    Ok((ptr as i128, end))
}

/// One launch of a variable-length call with tiles `c` (the mma.sync `flash_fwd_varlen_*`
/// kernel or its Hopper twin).
///
/// The kernel, per CTA: (batch `b`, head, query block) as for fixed-length calls over
/// `batch * heads_q * ceil(seqlen_q / block_m)` CTAs (`seqlen_q` the maximum), unless there
/// are no packed query rows (then nothing launches). Sequence `b`'s rows are clamped into
/// `[0, total)` and to the maxima (device offsets; host offsets are exact), so it reads Q
/// rows `b * q_strides[0] + (q_start + row) * q_strides[1]` with `q_start + row < total_q`,
/// likewise K and V below `total_k` (and only when a sequence can have keys: `seqlen_k > 0`
/// and `total_k > 0`), writes output rows like Q's and lse elements `head * total_q + q_start
/// + row` (f32 `[heads_q, total_q]`). Over the grid that is the box `batch x total x heads x
/// columns` of each tensor with its strides (with a zero batch stride: `[1, total, heads]`).
/// Device offsets: `batch + 1` i32 each, read from the offset buffers; host offsets: from the
/// launch's own upload, which the plan leaves the kernel addresses of at 0.
fn verify_varlen_launch(p: &AttentionParams, bufs: &Buffers, c: TileConfig, grid: u32, f: &FwdParams) -> Result<(), String> {
    let v = p.varlen.as_ref().ok_or("not a variable-length call")?;
    let (tq, tk) = varlen_totals(p, v)?;
    ensure!(p.head_dim > 0 && p.head_dim % 8 == 0 && p.head_dim <= c.head_dim, "head_dim {} vs config {c:?}", p.head_dim);
    let m_blocks = p.seqlen_q.div_ceil(c.block_m) as u128;
    // Split launches run `num_splits` CTAs per query block.
    let splits = f.num_splits.max(1) as u128;
    let ctas = p.batch as u128 * p.heads_q as u128 * m_blocks * splits;
    ensure!(ctas <= i32::MAX as u128, "grid {ctas} past the CUDA limit");
    let want = if tq == 0 { 0 } else { ctas };
    ensure!(grid as u128 == want, "grid {grid} for {want} CTAs ({ctas} CTAs, {tq} packed query rows)");
    if want == 0 {
        return Ok(());
    }
    // What the kernel sees is the call: the maxima as sequence lengths, the packed totals.
    ensure!(f.batch as usize == p.batch && f.heads_q as usize == p.heads_q, "batch/heads {}/{}", f.batch, f.heads_q);
    ensure!(f.seqlen_q as usize == p.seqlen_q && f.seqlen_k as usize == p.seqlen_k, "seqlens {}/{}", f.seqlen_q, f.seqlen_k);
    ensure!(f.total_q as u128 == tq && f.total_k as u128 == tk, "totals {}/{} for {tq}/{tk}", f.total_q, f.total_k);
    ensure!(f.head_dim as usize == p.head_dim && f.m_blocks as u128 == m_blocks, "head_dim/m_blocks {}/{}", f.head_dim, f.m_blocks);
    ensure!(f.causal == p.causal as u32, "causal {}", f.causal);
    ensure!(f.num_splits <= 32, "num_splits {} in a variable-length launch", f.num_splits);
    if f.num_splits > 1 {
        // Every key tile of the longest sequence is in some split.
        let tiles = p.seqlen_k.div_ceil(c.block_n) as u128;
        ensure!(f.split_tiles as u128 * splits >= tiles, "{} splits of {} tiles for {tiles} tiles", f.num_splits, f.split_tiles);
    }
    ensure!(p.heads_kv > 0 && f.group as usize * p.heads_kv == p.heads_q, "group {} for {}/{}", f.group, p.heads_q, p.heads_kv);
    ensure!(f.scale_log2.to_bits() == (p.scale() * std::f32::consts::LOG2_E).to_bits(), "scale_log2 {}", f.scale_log2);
    ensure!(f.scale_log2.is_finite() && f.scale_log2 > 0.0, "scale_log2 {} not positive and finite", f.scale_log2);
    // 32-bit masks as for fixed-length calls (per sequence, within the maxima), and 32-bit
    // packed row indices `q_start + row < total`.
    let reach = p.seqlen_q.max(p.seqlen_k) as i128 + 2 * c.block_m.max(c.block_n) as i128 + 1;
    ensure!(reach <= i32::MAX as i128, "32-bit mask arithmetic overflows ({reach})");
    ensure!(tq <= i32::MAX as u128 && tk <= i32::MAX as u128, "packed totals {tq}/{tk} past 32-bit row indices");
    // Packed: one "batch" of total rows.
    ensure!(f.q_strides[0] == 0 && f.o_strides[0] == 0, "packed Q/out with batch strides {}/{}", f.q_strides[0], f.o_strides[0]);

    let (bq, hq, d) = (p.batch as u128, p.heads_q as u128, p.head_dim as u128);
    let q = Access { name: "q", ptr: f.q, strides: f.q_strides, extents: [bq, tq, hq], cols: d };
    let o = Access { name: "out", ptr: f.o, strides: f.o_strides, extents: [bq, tq, hq], cols: d };
    let mut reads = vec![("q", q.check(bufs.q)?)];
    let out_range = o.check(bufs.o)?;
    if f.seqlen_k > 0 && tk > 0 {
        ensure!(f.k_strides[0] == 0 && f.v_strides[0] == 0, "packed K/V with batch strides {}/{}", f.k_strides[0], f.v_strides[0]);
        let hkv = (p.heads_q as u128 - 1) / f.group as u128 + 1;
        let k = Access { name: "k", ptr: f.k, strides: f.k_strides, extents: [bq, tk, hkv], cols: d };
        let v = Access { name: "v", ptr: f.v, strides: f.v_strides, extents: [bq, tk, hkv], cols: d };
        reads.push(("k", k.check(bufs.k)?));
        reads.push(("v", v.check(bufs.v)?));
    }
    // Each packed output row is one sequence's (valid offsets) or, for wrong device offsets,
    // several sequences' (wrong numbers, by design); distinct packed rows must not alias.
    let rows = Access { extents: [1, tq, hq], ..o };
    if let Some(disjoint) = rows.rows_disjoint() {
        ensure!(disjoint, "two packed output rows share memory (strides {:?})", f.o_strides);
    }
    match v {
        Varlen::Host { .. } => {
            // The launch uploads the plan's offsets and points the kernel at them.
            ensure!(f.cu_seqlens_q == 0 && f.cu_seqlens_k == 0, "host offsets, but the plan points at {:#x}/{:#x}", f.cu_seqlens_q, f.cu_seqlens_k);
        }
        Varlen::Device { .. } => {
            let vb = bufs.varlen.ok_or("device offsets without Buffers::varlen")?;
            let ck = vb.cu_seqlens_k.ok_or("unpaged device offsets without key offsets")?;
            reads.push(("cu_seqlens_q", offsets_range("cu_seqlens_q", f.cu_seqlens_q, vb.cu_seqlens_q, bq + 1)?));
            reads.push(("cu_seqlens_k", offsets_range("cu_seqlens_k", f.cu_seqlens_k, ck, bq + 1)?));
        }
    }
    let writes = vec![("out", out_range)];
    lse_and_overlaps(bufs, f, hq * tq, &reads, writes)
}

// ------------------------------------------------------------------------------------------
// Generators.

#[derive(Clone, Debug)]
struct Case {
    p: AttentionParams,
    b: Buffers,
}

/// A valid call: plain, padded, transposed or packed layouts; buffers in their own regions
/// or packed back to back; exact or generous capacities.
fn valid_case(rng: &mut StdRng) -> Case {
    let hkv = pick(rng, &[1, 1, 2, 3, 4]);
    let group = pick(rng, &[1, 1, 2, 4]);
    let d = 8 * rng.random_range(1..=32);
    let mut p = AttentionParams::new(rng.random_range(1..=3), rng.random_range(1..=300), rng.random_range(1..=300), hkv * group, d)
        .heads_kv(hkv)
        .causal(rng.random_bool(0.5))
        .dtype(pick(rng, &[DType::F16, DType::Bf16]));
    if rng.random_bool(0.2) {
        p = p.softmax_scale(pick(rng, &[f32::MIN_POSITIVE, 1e-3, 1.0, 1e4, 1e30, 2e38]));
    }
    if rng.random_bool(0.3) {
        let fits: Vec<TileConfig> = CONFIGS.iter().copied().filter(|c| c.head_dim >= d).collect();
        p = p.config(pick(rng, &fits));
    } else {
        // The wgmma path takes every valid call without a forced config and without zero strides.
        p = p.path(pick(rng, &[KernelPath::Auto, KernelPath::Auto, KernelPath::MmaSync, KernelPath::Wgmma]));
    }
    let packed_kv = rng.random_range(0..4) == 3;
    match rng.random_range(0..3) {
        _ if packed_kv => {
            // K and V as views of one packed [b, s, 2, h, d] tensor (V starts h*d elements in).
            let row = (2 * p.heads_kv * d) as i64;
            let kv = Strides { batch: row * p.seqlen_k as i64, row, head: d as i64 };
            let q = Strides::bshd(p.seqlen_q, p.heads_q, d);
            p = p.strides(q, kv, kv, q);
        }
        0 => {}
        1 => p = p.layout_bhsd(),
        _ => {
            // Rows padded by a multiple of 8 elements.
            let pad = |rng: &mut StdRng, s: usize, h: usize| {
                let row = (h * d + 8 * rng.random_range(0..4)) as i64;
                Strides { batch: row * s as i64 + 8 * rng.random_range(0..3), row, head: d as i64 }
            };
            let (q, k, v, o) = (pad(rng, p.seqlen_q, p.heads_q), pad(rng, p.seqlen_k, p.heads_kv), pad(rng, p.seqlen_k, p.heads_kv), pad(rng, p.seqlen_q, p.heads_q));
            p = p.strides(q, k, v, o);
        }
    }
    let [qs, ks, vs, os] = resolved(&p);
    let [dq, dk, _, _] = tensor_dims(&p);
    let slack = |rng: &mut StdRng| if rng.random_bool(0.5) { 0 } else { rng.random_range(0..100) };
    let lens = [
        needed(dq, qs) as usize + slack(rng),
        needed(dk, ks) as usize + slack(rng) + if packed_kv { p.heads_kv * d } else { 0 },
        needed(dk, vs) as usize + slack(rng),
        needed(dq, os) as usize + slack(rng),
        p.batch * p.heads_q * p.seqlen_q + slack(rng),
    ];
    let tight = rng.random_bool(0.3);
    let mut at = REGION;
    let mut ptrs = [0u64; 5];
    for i in 0..5 {
        let bytes = lens[i] as u64 * if i == 4 { 4 } else { 2 };
        ptrs[i] = if tight { at } else { (i as u64 + 1) * REGION };
        at += bytes.next_multiple_of(16); // back to back: adjacent but disjoint
    }
    if packed_kv {
        ptrs[2] = ptrs[1] + 2 * (p.heads_kv * d) as u64; // inside K's allocation
    }
    let r = |i: usize| BufferRef { ptr: ptrs[i], len: lens[i] };
    let lse = rng.random_bool(0.6).then(|| r(4));
    Case { p, b: Buffers { q: r(0), k: r(1), v: r(2), o: r(3), lse, paged: None, varlen: None } }
}

fn buf_mut(b: &mut Buffers, i: usize) -> &mut BufferRef {
    match i {
        0 => &mut b.q,
        1 => &mut b.k,
        2 => &mut b.v,
        3 => &mut b.o,
        _ => b.lse.as_mut().unwrap(),
    }
}

fn set_strides(p: &mut AttentionParams, i: usize, s: Strides) {
    let [q, k, v, o] = resolved(p);
    let mut all = [q, k, v, o];
    all[i] = s;
    *p = p.clone().strides(all[0], all[1], all[2], all[3]);
}

/// Injects one fault into a valid case; returns the error it must give, or `None` when the
/// fault does not apply to this case (the caller draws again).
fn inject(rng: &mut StdRng, c: &mut Case) -> Option<(&'static str, Want)> {
    let p = &mut c.p;
    let has_lse = c.b.lse.is_some();
    // Tensors the kernel touches: K and V only when there are keys; lse when given.
    let t = *pick(rng, &[0, 1, 2, 3, 4].iter().filter(|&&i| i < 4 || has_lse).collect::<Vec<_>>());
    let name = TENSORS[t];
    let dims = tensor_dims(p);
    let strides = resolved(p);
    Some(match rng.random_range(0..16) {
        0 => {
            let b = buf_mut(&mut c.b, t);
            let need = if t == 4 { (p.batch * p.heads_q * p.seqlen_q) as u64 } else { needed(dims[t], strides[t]) as u64 };
            b.len = need as usize - 1;
            ("buffer one element short", Want::TooSmall(name, need, need - 1))
        }
        1 => {
            buf_mut(&mut c.b, t).ptr += if t == 4 { 2 } else { pick(rng, &[2, 4, 8]) };
            ("misaligned base", Want::Misaligned(name))
        }
        2 if t < 4 => {
            let mut s = strides[t];
            let bump = pick(rng, &[1, 2, 4, 12]);
            match rng.random_range(0..3) {
                0 => s.batch += bump,
                1 => s.row += bump,
                _ => s.head += bump,
            }
            set_strides(p, t, s);
            ("stride not a multiple of 16 bytes", Want::Misaligned(name))
        }
        3 if t < 4 => {
            let mut s = strides[t];
            let neg = pick(rng, &[-8, -16, i64::MIN, -(1 << 40)]);
            match rng.random_range(0..3) {
                0 => s.batch = neg,
                1 => s.row = neg,
                _ => s.head = neg,
            }
            set_strides(p, t, s);
            ("negative stride", Want::Strides(name))
        }
        4 if t < 4 => {
            // Element offsets past i64 (or byte offsets past i64, or addresses past 2^64).
            let n = dims[t][1];
            match rng.random_range(0..3) {
                0 | 1 if n >= 2 => {
                    let mut s = strides[t];
                    let target: i64 = if rng.random_bool(0.5) { i64::MAX } else { 1 << 62 };
                    s.row = ((target / (n as i64 - 1)).saturating_add(8)) & !7;
                    set_strides(p, t, s);
                }
                2 => buf_mut(&mut c.b, t).ptr = u64::MAX - 15, // any tensor spans >= 16 bytes
                _ => return None,
            }
            ("offsets overflowing 64 bits", Want::Strides(name))
        }
        5 => {
            buf_mut(&mut c.b, t).ptr = 0;
            ("null address", Want::Buffer(name))
        }
        6 => {
            let d = pick(rng, &[0, 1, 7, 12, 100, 257, 264, 512, usize::MAX]);
            p.head_dim = d;
            ("unsupported head_dim", Want::HeadDim(d))
        }
        7 => {
            p.heads_kv = if rng.random_bool(0.5) { p.heads_q + 1 } else { pick(rng, &[3, 5, 7]) };
            if p.heads_q % p.heads_kv == 0 {
                return None;
            }
            ("heads_q not a multiple of heads_kv", Want::Gqa(p.heads_q, p.heads_kv))
        }
        8 => {
            p.heads_kv = 0;
            ("zero heads_kv", Want::Shape("heads_kv"))
        }
        9 => {
            let n = pick(rng, &[(i32::MAX / 2) as usize + 1, i32::MAX as usize, 1 << 31, 1 << 40, usize::MAX]);
            if rng.random_bool(0.5) {
                p.seqlen_q = n;
                ("seqlen_q past i32::MAX / 2", Want::Shape("seqlen_q"))
            } else {
                p.seqlen_k = n;
                ("seqlen_k past i32::MAX / 2", Want::Shape("seqlen_k"))
            }
        }
        10 => {
            *p = p.clone().softmax_scale(pick(rng, &[f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, -1.0, 3e38]));
            ("softmax_scale not positive and finite", Want::Shape("softmax_scale"))
        }
        11 => {
            let small: Vec<TileConfig> = CONFIGS.iter().copied().filter(|c| c.head_dim < p.head_dim).collect();
            let bogus = TileConfig { block_m: 96, ..CONFIGS[0] };
            *p = p.clone().config(if small.is_empty() || rng.random_bool(0.3) { bogus } else { pick(rng, &small) });
            ("config that does not fit", Want::Shape("config"))
        }
        12 => {
            // batch * heads_q * m_blocks past i32::MAX, including products that wrap 64 bits.
            p.batch = pick(rng, &[1 << 31, usize::MAX, (1usize << 63) + 1, 1 << 40]);
            p.heads_q = p.heads_q.max(2);
            p.heads_kv = p.heads_q;
            ("grid past i32::MAX CTAs", Want::Launch)
        }
        13 => {
            // Output strides under which two output elements share memory.
            let [b, s, h, _] = dims[3];
            let mut o = strides[3];
            match rng.random_range(0..4) {
                0 if s > 1 => o.row = 0,
                1 if h > 1 => o.head = 0,
                2 if h > 1 && s > 1 => o.head = o.row, // (row r, head h+1) is (row r+1, head h)
                3 if b > 1 => o.batch = 0,
                _ => return None,
            }
            set_strides(p, 3, o);
            // A zero-stride layout can shrink the extent; growing the buffer keeps the fault
            // single.
            c.b.o.len = c.b.o.len.max(needed(dims[3], o) as usize);
            ("aliasing output strides", Want::Strides("out"))
        }
        14 => {
            // The output (or lse) lands inside an input, or output and lse overlap.
            let victim = pick(rng, &[0usize, 1, 2]);
            let vb = *buf_mut(&mut c.b, victim);
            let write = if has_lse && rng.random_bool(0.4) { 4 } else { 3 };
            let w = buf_mut(&mut c.b, write);
            // Inside the bytes the kernel reads (not just the buffer's slack).
            let span = 2 * needed(dims[victim], strides[victim]) as u64;
            w.ptr = vb.ptr + 16 * rng.random_range(0..=(span / 16).saturating_sub(1).min(1000));
            w.len = w.len.max(1);
            if write == 4 {
                // The planner checks out first: if the moved lse also reaches into out (tightly
                // packed buffers), that is the error.
                let (l0, l1) = (c.b.lse.unwrap().ptr, c.b.lse.unwrap().ptr + 4 * (p.batch * p.heads_q * p.seqlen_q) as u64);
                let (o0, o1) = (c.b.o.ptr, c.b.o.ptr + 2 * needed(dims[3], strides[3]) as u64);
                let hit = if l0 < o1 && o0 < l1 { "out" } else { "lse" };
                return Some(("lse inside an input", Want::Buffer(hit)));
            }
            ("output inside an input", Want::Buffer("out"))
        }
        15 if has_lse => {
            let lse = c.b.lse.unwrap();
            c.b.o.ptr = lse.ptr;
            ("output over the lse", Want::Buffer("out"))
        }
        _ => return None,
    })
}

/// A hostile size.
fn hostile_dim(rng: &mut StdRng) -> usize {
    match rng.random_range(0..12) {
        0 => 0,
        1..=4 => rng.random_range(1..=5),
        5..=7 => rng.random_range(1..=400),
        8 => pick(rng, &[65535, 65536, 70000, 1 << 20]),
        9 => pick(rng, &[(i32::MAX / 2) as usize, (i32::MAX / 2) as usize + 1, i32::MAX as usize, 1 << 31, 1 << 32]),
        10 => pick(rng, &[usize::MAX, usize::MAX / 2, (1 << 63) + 1, 1 << 40]),
        _ => rng.random::<u64>() as usize,
    }
}

/// A hostile stride.
fn hostile_stride(rng: &mut StdRng) -> i64 {
    match rng.random_range(0..10) {
        0 => 0,
        1..=3 => 8 * rng.random_range(0..2000),
        4 => rng.random_range(-20..2000),
        5 => pick(rng, &[i64::MAX, i64::MAX - 7, i64::MIN, -8, 1 << 62, 1 << 61, (1 << 62) + 8, 1 << 40]),
        6 => -(8 * rng.random_range(1..1000)),
        7 => rng.random::<u64>() as i64,
        _ => 8 * rng.random_range(0..100_000),
    }
}

/// Anything at all, from pools of hostile values.
fn hostile_case(rng: &mut StdRng) -> Case {
    let dim = hostile_dim;
    let stride = hostile_stride;
    let strides = |rng: &mut StdRng| Strides { batch: stride(rng), row: stride(rng), head: stride(rng) };
    let mut p = AttentionParams::new(dim(rng), dim(rng), dim(rng), dim(rng), 0)
        .heads_kv(dim(rng))
        .causal(rng.random_bool(0.5))
        .dtype(pick(rng, &[DType::F16, DType::Bf16]));
    p.head_dim = if rng.random_bool(0.7) { 8 * rng.random_range(0..=33) } else { dim(rng) };
    if rng.random_bool(0.5) {
        p.heads_kv = pick(rng, &[1, p.heads_q, p.heads_q / 2, p.heads_q.saturating_add(1)]);
    }
    if rng.random_bool(0.3) {
        p = p.softmax_scale(pick(rng, &[f32::NAN, f32::INFINITY, 0.0, -1.0, 1e38, f32::MIN_POSITIVE]));
    }
    if rng.random_bool(0.3) {
        p = p.config(pick(rng, &CONFIGS));
    }
    p = p.path(pick(rng, &[KernelPath::Auto, KernelPath::MmaSync, KernelPath::Wgmma]));
    if rng.random_bool(0.6) {
        p = p.strides(strides(rng), strides(rng), strides(rng), strides(rng));
    }
    let dims = tensor_dims(&p);
    let given = [p.q_strides, p.k_strides, p.v_strides, p.o_strides];
    let len = |rng: &mut StdRng, i: usize| -> usize {
        let n = if i == 4 {
            (p.batch as i128).saturating_mul(p.heads_q as i128).saturating_mul(p.seqlen_q as i128)
        } else if dims[i].iter().all(|&x| x > 0) {
            // Contiguous defaults in i128 (they may not fit i64 here; saturating, as three
            // hostile sizes may not fit i128 either).
            let [b, s, h, d] = dims[i].map(|x| x as i128);
            let st = given[i].map_or([h.saturating_mul(d).saturating_mul(s), h.saturating_mul(d), d], |g| [g.batch as i128, g.row as i128, g.head as i128]);
            [(b - 1).saturating_mul(st[0]), (s - 1).saturating_mul(st[1]), (h - 1).saturating_mul(st[2]), d].into_iter().fold(0i128, i128::saturating_add)
        } else {
            0
        };
        let n = n.clamp(0, usize::MAX as i128) as usize;
        match rng.random_range(0..6) {
            0 => 0,
            1 => n.saturating_sub(1),
            2 => usize::MAX,
            3 => rng.random_range(0..1000),
            _ => n,
        }
    };
    let ptr = |rng: &mut StdRng, i: u64| -> u64 {
        match rng.random_range(0..10) {
            0 => 0,
            1 => pick(rng, &[u64::MAX - 15, u64::MAX, 1 << 63, 2, 8]),
            2 => (i + 1) * REGION + pick(rng, &[2, 4, 8, 12]),
            3 => REGION, // everything on top of each other
            _ => (i + 1) * REGION,
        }
    };
    let mut r = |i: usize| BufferRef { ptr: ptr(rng, i as u64), len: len(rng, i) };
    let (q, k, v, o, l) = (r(0), r(1), r(2), r(3), r(4));
    let lse = rng.random_bool(0.5).then_some(l);
    Case { p, b: Buffers { q, k, v, o, lse, paged: None, varlen: None } }
}

// ------------------------------------------------------------------------------------------
// Variable-length generators.

/// The variable-length kernels' configuration for `head_dim`: the smallest padded head
/// dimension that holds it.
fn varlen_config_for(head_dim: usize) -> TileConfig {
    *VARLEN_CONFIGS.iter().filter(|c| c.head_dim >= head_dim).min_by_key(|c| c.head_dim).expect("head_dim up to 256")
}

/// The packed totals of a variable-length call as the planner takes them (host offsets: the
/// last entries).
fn totals(p: &AttentionParams) -> (usize, usize) {
    p.varlen.as_ref().map_or((0, 0), |v| (v.total_q(), v.total_k()))
}

/// The strides a variable-length call uses for (q, k, v, out), defaults resolved: contiguous
/// packed rows `[total, heads, head_dim]` (the batch stride is ignored; wrapping arithmetic,
/// as hostile calls reach here too).
fn packed_strides(p: &AttentionParams) -> [Strides; 4] {
    let (tq, tk) = totals(p);
    let d = p.head_dim as i64;
    let packed = |rows: usize, heads: usize| {
        let row = (heads as i64).wrapping_mul(d);
        Strides { batch: row.wrapping_mul(rows as i64), row, head: d }
    };
    [
        p.q_strides.unwrap_or_else(|| packed(tq, p.heads_q)),
        p.k_strides.unwrap_or_else(|| packed(tk, p.heads_kv)),
        p.v_strides.unwrap_or_else(|| packed(tk, p.heads_kv)),
        p.o_strides.unwrap_or_else(|| packed(tq, p.heads_q)),
    ]
}

/// Elements each of (q, k, v, out) needs in a (valid) variable-length call: the packed
/// `[1, total, heads, head_dim]` tensor's highest offset + 1, 0 without rows.
fn packed_needs(p: &AttentionParams) -> [usize; 4] {
    let (tq, tk) = totals(p);
    let s = packed_strides(p);
    let n = |rows: usize, heads: usize, s: Strides| if rows == 0 || heads == 0 { 0 } else { needed([1, rows, heads, p.head_dim], s) as usize };
    [n(tq, p.heads_q, s[0]), n(tk, p.heads_kv, s[1]), n(tk, p.heads_kv, s[2]), n(tq, p.heads_q, s[3])]
}

/// A valid variable-length call: 1 to 8 sequences of random lengths (0 and 1 included), the
/// offsets on the host or on the GPU (then the packed tensors may hold more rows than the
/// sequences use, and the maxima may exceed the longest sequence, as serving engines pass
/// them), GQA, every head_dim, causal or not, f16 or bf16; contiguous packed rows, explicit
/// ones with a batch stride of any value (ignored), padded rows or heads, head-major rows, K
/// and V as views of one packed tensor; buffers in their own regions or back to back, exact
/// or generous; device offsets 4-byte aligned.
fn varlen_case(rng: &mut StdRng) -> Case {
    let batch = rng.random_range(1..=8);
    let len = |rng: &mut StdRng| match rng.random_range(0..10) {
        0 => 0,
        1 => 1,
        2..=7 => rng.random_range(0..=200),
        _ => rng.random_range(200..=600),
    };
    let (mut cq, mut ck) = (vec![0i32], vec![0i32]);
    for _ in 0..batch {
        let lq = len(rng);
        let lk = if rng.random_bool(0.3) { lq } else { len(rng) };
        cq.push(cq[cq.len() - 1] + lq as i32);
        ck.push(ck[ck.len() - 1] + lk as i32);
    }
    let hkv = pick(rng, &[1, 1, 2, 3, 4]);
    let group = pick(rng, &[1, 1, 2, 4]);
    let d = 8 * rng.random_range(1..=32);
    let mut p = if rng.random_bool(0.5) {
        let longest = |cu: &[i32]| cu.windows(2).map(|w| (w[1] - w[0]) as usize).max().unwrap_or(0);
        let pad = |rng: &mut StdRng| if rng.random_bool(0.7) { 0 } else { rng.random_range(1..=64) };
        let (tq, tk) = (cq[batch] as usize + pad(rng), ck[batch] as usize + pad(rng));
        let (mq, mk) = (longest(&cq) + pad(rng), longest(&ck) + pad(rng));
        AttentionParams::new_varlen_device(batch, mq, mk, tq, tk, hkv * group, d)
    } else {
        AttentionParams::new_varlen(&cq, &ck, hkv * group, d)
    };
    p = p.heads_kv(hkv).causal(rng.random_bool(0.5)).dtype(pick(rng, &[DType::F16, DType::Bf16]));
    if rng.random_bool(0.2) {
        p = p.softmax_scale(pick(rng, &[f32::MIN_POSITIVE, 1e-3, 1.0, 1e4, 1e30, 2e38]));
    }
    if rng.random_bool(0.15) {
        // The variable-length kernels' own configuration may be forced (any other is refused).
        p = p.config(varlen_config_for(d));
    } else {
        // The wgmma path takes every valid call without a forced config and without zero strides.
        p = p.path(pick(rng, &[KernelPath::Auto, KernelPath::Auto, KernelPath::MmaSync, KernelPath::Wgmma]));
    }
    if rng.random_bool(0.1) {
        p = p.num_splits(Some(pick(rng, &[0, 1]))); // no split: fine
    } else if rng.random_bool(0.1) && p.config.is_none() && p.path != KernelPath::Wgmma {
        // Forced splits: the split variable-length kernels (mma.sync).
        p = p.num_splits(Some(pick(rng, &[2, 5, 32])));
    }
    let (tq, tk) = totals(&p);
    let any_batch = |rng: &mut StdRng| pick(rng, &[0, 0, 8, -8, 3, i64::MAX, i64::MIN, 1 << 40]);
    let layout = |rng: &mut StdRng, rows: usize, h: usize| -> Option<Strides> {
        let (rows, h, d) = (rows as i64, h as i64, d as i64);
        match rng.random_range(0..6) {
            0 | 1 => None,
            2 => Some(Strides { batch: any_batch(rng), row: h * d, head: d }),
            // Rows padded by a multiple of 8 elements.
            3 => Some(Strides { batch: any_batch(rng), row: h * d + 8 * rng.random_range(1..4), head: d }),
            // Heads padded, rows too.
            4 => {
                let head = d + 8 * rng.random_range(1..3);
                Some(Strides { batch: any_batch(rng), row: h * head + 8 * rng.random_range(0..3), head })
            }
            // Head-major: [heads, total, head_dim].
            _ => {
                let row = d + 8 * rng.random_range(0..2);
                Some(Strides { batch: any_batch(rng), row, head: rows * row + 8 * rng.random_range(0..3) })
            }
        }
    };
    let packed_kv = rng.random_range(0..4) == 3;
    p.q_strides = layout(rng, tq, p.heads_q);
    p.o_strides = layout(rng, tq, p.heads_q);
    if packed_kv {
        // K and V as views of one packed [total_k, 2, heads_kv, head_dim] tensor.
        let kv = Strides { batch: any_batch(rng), row: (2 * hkv * d) as i64, head: d as i64 };
        (p.k_strides, p.v_strides) = (Some(kv), Some(kv));
    } else {
        p.k_strides = layout(rng, tk, hkv);
        p.v_strides = layout(rng, tk, hkv);
    }
    let needs = packed_needs(&p);
    let slack = |rng: &mut StdRng| if rng.random_bool(0.5) { 0 } else { rng.random_range(0..100) };
    let lens = [
        needs[0] + slack(rng),
        needs[1] + slack(rng) + if packed_kv && tk > 0 { hkv * d } else { 0 },
        needs[2] + slack(rng),
        needs[3] + slack(rng),
        p.heads_q * tq + slack(rng),
        batch + 1 + slack(rng),
        batch + 1 + slack(rng),
    ];
    // q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k.
    const BYTES: [u64; 7] = [2, 2, 2, 2, 4, 4, 4];
    let tight = rng.random_bool(0.3);
    let mut at = REGION;
    let mut ptrs = [0u64; 7];
    for i in 0..7 {
        // The offsets need only 4-byte alignment.
        let align = if i >= 5 { 4 } else { 16 };
        ptrs[i] = if tight { at } else { (i as u64 + 1) * REGION + if i >= 5 { 4 * rng.random_range(0..4) } else { 0 } };
        at += (lens[i] as u64 * BYTES[i]).next_multiple_of(align); // back to back: adjacent but disjoint
    }
    if packed_kv {
        ptrs[2] = ptrs[1] + 2 * (hkv * d) as u64; // inside K's allocation
    }
    let r = |i: usize| BufferRef { ptr: ptrs[i], len: lens[i] };
    let (mut k, mut v) = (r(1), r(2));
    if tk == 0 && rng.random_bool(0.3) {
        // No packed keys: K and V are never read (any, even null, buffers will do).
        (k.ptr, v.ptr) = (0, pick(rng, &[0, 3]));
    }
    let lse = rng.random_bool(0.6).then(|| r(4));
    let device = matches!(p.varlen, Some(Varlen::Device { .. }));
    let varlen = device.then(|| VarlenBuffers { cu_seqlens_q: r(5), cu_seqlens_k: Some(r(6)) });
    Case { p, b: Buffers { q: r(0), k, v, o: r(3), lse, paged: None, varlen } }
}

/// What the planner must answer for a faulty variable-length call once it is emptied (no
/// packed query rows, see [`make_empty`]).
#[derive(Clone, Copy, Debug, PartialEq)]
enum WhenEmpty {
    /// The same error: the fault is caught before the planner looks at the rows.
    Same,
    /// An empty plan: the fault is in a buffer, which an empty call never touches.
    Accepted,
    /// Emptying removes the fault itself.
    Skip,
}

/// Empties a call without touching its buffers: no packed query rows (host offsets all 0,
/// device total_q 0), or for a fixed-length call batch 0.
fn make_empty(p: &mut AttentionParams) {
    match &mut p.varlen {
        Some(Varlen::Host { cu_seqlens_q, .. }) => *cu_seqlens_q = vec![0; p.batch + 1],
        Some(Varlen::Device { total_q, .. }) => *total_q = 0,
        None => p.batch = 0,
    }
}

/// Injects one fault into a valid variable-length case; returns the error it must give and
/// what the emptied call must give, or `None` when the fault does not apply to this case (the
/// caller draws again).
fn inject_varlen(rng: &mut StdRng, c: &mut Case) -> Option<(&'static str, Want, WhenEmpty)> {
    use WhenEmpty::{Accepted, Same, Skip};
    let (tq, tk) = totals(&c.p);
    let batch = c.p.batch;
    let device = matches!(c.p.varlen, Some(Varlen::Device { .. }));
    // A non-empty call: the planner checks the buffers (K and V where a sequence can have keys).
    let live = tq > 0 && c.p.seqlen_q > 0;
    let reads_kv = live && tk > 0 && c.p.seqlen_k > 0;
    let has_lse = c.b.lse.is_some();
    let strides = packed_strides(&c.p);
    let needs = packed_needs(&c.p);
    let touched: Vec<usize> = (0..5).filter(|&t| if t == 1 || t == 2 { reads_kv } else { t != 4 || has_lse }).collect();
    let t = pick(rng, &touched);
    let name = TENSORS[t];
    let need = if t == 4 { c.p.heads_q * tq } else { needs[t] };
    let f = rng.random_range(0..20);
    Some(match f {
        0..=3 if !device => {
            let Some(Varlen::Host { cu_seqlens_q, cu_seqlens_k }) = &mut c.p.varlen else { unreachable!() };
            let keys = rng.random_bool(0.5);
            let (what, cu, most) = if keys { ("cu_seqlens_k", cu_seqlens_k, &mut c.p.seqlen_k) } else { ("cu_seqlens_q", cu_seqlens_q, &mut c.p.seqlen_q) };
            let fault = match f {
                0 => {
                    match rng.random_range(0..4) {
                        0 => drop(cu.pop()),
                        1 => cu.push(cu[cu.len() - 1]),
                        2 => cu.clear(),
                        _ => drop(cu.remove(0)),
                    }
                    "host offsets: wrong count"
                }
                1 => {
                    cu[0] = pick(rng, &[1, -1, 8, i32::MIN, i32::MAX]);
                    "host offsets: not starting at 0"
                }
                2 => {
                    let j = rng.random_range(1..=batch);
                    cu[j] = cu[j - 1] - rng.random_range(1..=3);
                    "host offsets: decreasing"
                }
                _ => {
                    // The maximum lowered below the longest sequence, or one sequence lengthened
                    // past it.
                    let lens: Vec<usize> = cu.windows(2).map(|w| (w[1] - w[0]) as usize).collect();
                    let longest = lens.iter().copied().max().unwrap();
                    if longest > 0 && rng.random_bool(0.5) {
                        *most = longest - 1;
                    } else {
                        let j = rng.random_range(0..batch);
                        let extra = (*most - lens[j] + 1 + rng.random_range(0..3)) as i32;
                        cu[j + 1..].iter_mut().for_each(|x| *x += extra);
                    }
                    "host offsets: a sequence longer than the maximum"
                }
            };
            // Emptying rewrites the query offsets: a fault there goes with them.
            (fault, Want::Shape(what), if keys { Same } else { Skip })
        }
        4 if !device => {
            let r = |ptr: u64| BufferRef { ptr, len: batch + 1 };
            c.b.varlen = Some(VarlenBuffers { cu_seqlens_q: r(6 * REGION), cu_seqlens_k: Some(r(7 * REGION)) });
            ("host offsets with device offset buffers", Want::Buffer("cu_seqlens_q"), Same)
        }
        5..=7 if device && live => {
            let vb = c.b.varlen.as_mut().unwrap();
            let (what, buf) = if rng.random_bool(0.5) { ("cu_seqlens_q", &mut vb.cu_seqlens_q) } else { ("cu_seqlens_k", vb.cu_seqlens_k.as_mut().unwrap()) };
            match f {
                5 => {
                    buf.len = batch;
                    ("device offsets one element short", Want::TooSmall(what, batch as u64 + 1, batch as u64), Accepted)
                }
                6 => {
                    buf.ptr += pick(rng, &[1, 2, 3]);
                    ("device offsets misaligned", Want::Misaligned(what), Accepted)
                }
                _ => {
                    buf.ptr = 0;
                    ("device offsets null", Want::Buffer(what), Accepted)
                }
            }
        }
        8 if device => {
            c.b.varlen = None;
            ("device offsets without Buffers::varlen", Want::Buffer("cu_seqlens_q"), Same)
        }
        9 if device => {
            c.b.varlen.as_mut().unwrap().cu_seqlens_k = None;
            ("unpaged device offsets without key offsets", Want::Buffer("cu_seqlens_k"), Same)
        }
        10 if device && live => {
            // The output (or lse) over offsets the kernel reads while it writes.
            let (o, lse) = (c.b.o, c.b.lse);
            let vb = c.b.varlen.as_mut().unwrap();
            let buf = if rng.random_bool(0.5) { &mut vb.cu_seqlens_q } else { vb.cu_seqlens_k.as_mut().unwrap() };
            match lse {
                Some(l) if rng.random_bool(0.4) => {
                    buf.ptr = l.ptr + 4 * rng.random_range(0..c.p.heads_q * tq) as u64;
                    ("lse over device offsets", Want::Buffer("lse"), Accepted)
                }
                _ => {
                    buf.ptr = o.ptr + 4 * rng.random_range(0..needs[3] / 2) as u64;
                    ("output over device offsets", Want::Buffer("out"), Accepted)
                }
            }
        }
        11 if device => {
            let big = pick(rng, &[i32::MAX as usize + 1, 1 << 32, 1 << 40, usize::MAX]);
            let Some(Varlen::Device { total_q, total_k }) = &mut c.p.varlen else { unreachable!() };
            if rng.random_bool(0.5) {
                *total_q = big;
                ("device total_q past i32::MAX", Want::Shape("total_q"), Skip)
            } else {
                *total_k = big;
                ("device total_k past i32::MAX", Want::Shape("total_k"), Same)
            }
        }
        12 if device && c.p.seqlen_q > 0 => {
            // batch * heads_q * m_blocks past i32::MAX, including products that wrap 64 bits.
            c.p.batch = pick(rng, &[1 << 31, 1 << 40, (1 << 63) + 1, usize::MAX]);
            ("device offsets: grid past i32::MAX CTAs", Want::Launch, Same)
        }
        13 if device => {
            c.p.varlen = None;
            ("device offset buffers for a fixed-length call", Want::Buffer("cu_seqlens_q"), Same)
        }
        14 => {
            c.p.num_splits = Some(pick(rng, &[33, 64, usize::MAX]));
            ("varlen split-KV past 32", Want::Shape("num_splits"), Same)
        }
        15 => {
            // Without a split: split calls take the split kernels' configurations instead.
            c.p.num_splits = None;
            let own = varlen_config_for(c.p.head_dim);
            let bogus = TileConfig { block_m: 96, ..own };
            let others: Vec<TileConfig> = CONFIGS.iter().chain(&SPLIT_CONFIGS).chain(&VARLEN_CONFIGS).copied().chain([bogus]).filter(|&x| x != own).collect();
            c.p.config = Some(pick(rng, &others));
            ("varlen config other than its own", Want::Shape("config"), Same)
        }
        16 if live => {
            buf_mut(&mut c.b, t).len = need - 1;
            ("packed buffer one element short", Want::TooSmall(name, need as u64, need as u64 - 1), Accepted)
        }
        17 if live => {
            if t < 4 && rng.random_bool(0.5) {
                let mut s = strides;
                let bump = pick(rng, &[1, 2, 4, 12]);
                if rng.random_bool(0.5) {
                    s[t].row += bump;
                } else {
                    s[t].head += bump;
                }
                c.p = c.p.clone().strides(s[0], s[1], s[2], s[3]);
                ("packed stride not a multiple of 16 bytes", Want::Misaligned(name), Accepted)
            } else {
                buf_mut(&mut c.b, t).ptr += if t == 4 { 2 } else { pick(rng, &[2, 4, 8]) };
                ("packed base misaligned", Want::Misaligned(name), Accepted)
            }
        }
        18 if live && t < 4 => {
            let mut s = strides;
            let neg = pick(rng, &[-8, -16, i64::MIN, -(1 << 40)]);
            if rng.random_bool(0.5) {
                s[t].row = neg;
            } else {
                s[t].head = neg;
            }
            c.p = c.p.clone().strides(s[0], s[1], s[2], s[3]);
            ("packed negative stride", Want::Strides(name), Accepted)
        }
        19 if live => {
            // The output inside the bytes the kernel reads of Q (or K, V).
            let victim = pick(rng, &touched.iter().copied().filter(|&i| i < 3).collect::<Vec<_>>());
            let vb = *buf_mut(&mut c.b, victim);
            let span = 2 * needs[victim] as u64;
            c.b.o.ptr = vb.ptr + 16 * rng.random_range(0..=(span / 16).saturating_sub(1).min(1000));
            ("packed output inside an input", Want::Buffer("out"), Accepted)
        }
        _ => return None,
    })
}

/// A hostile variable-length call: half of them a valid one with one to three fields replaced
/// by hostile values (so that many are still accepted and modelled), half a hostile call
/// ([`hostile_case`]) made variable-length with hostile offsets, totals and offset buffers.
fn hostile_varlen_case(rng: &mut StdRng) -> Case {
    let hostile_i32 = |rng: &mut StdRng| pick(rng, &[0, 1, -1, 7, 8, 600, 1 << 20, i32::MAX / 2, i32::MAX, i32::MIN]);
    let hostile_buf = |rng: &mut StdRng, region: u64, len: usize| BufferRef {
        ptr: match rng.random_range(0..8) {
            0 => 0,
            1 => pick(rng, &[u64::MAX - 3, u64::MAX, 1 << 63, 2, 4, 6]),
            2 => region * REGION + pick(rng, &[1, 2, 4, 8]),
            _ => region * REGION,
        },
        len: match rng.random_range(0..6) {
            0 => 0,
            1 => len.saturating_sub(1),
            2 => usize::MAX,
            3 => rng.random_range(0..20),
            _ => len,
        },
    };
    if rng.random_bool(0.5) {
        let mut c = varlen_case(rng);
        for _ in 0..rng.random_range(1..=3) {
            let rows = c.p.batch.saturating_add(1);
            match rng.random_range(0..13) {
                0 => c.p.batch = hostile_dim(rng),
                1 => c.p.seqlen_q = hostile_dim(rng),
                2 => c.p.seqlen_k = hostile_dim(rng),
                3 => match &mut c.p.varlen {
                    Some(Varlen::Device { total_q, total_k }) => *(if rng.random_bool(0.5) { total_q } else { total_k }) = hostile_dim(rng),
                    Some(Varlen::Host { cu_seqlens_q, cu_seqlens_k }) => {
                        let cu = if rng.random_bool(0.5) { cu_seqlens_q } else { cu_seqlens_k };
                        let j = rng.random_range(0..cu.len().max(1));
                        if let Some(x) = cu.get_mut(j) {
                            *x = hostile_i32(rng);
                        }
                    }
                    None => {}
                },
                4 => {
                    let b = buf_mut(&mut c.b, rng.random_range(0..4));
                    b.len = pick(rng, &[0, b.len.saturating_sub(1), usize::MAX, b.len.saturating_add(1000)]);
                }
                5 => buf_mut(&mut c.b, rng.random_range(0..4)).ptr = pick(rng, &[0, 8, u64::MAX - 15, 1 << 63, REGION]),
                6 => {
                    let mut s = packed_strides(&c.p);
                    let t = rng.random_range(0..4);
                    match rng.random_range(0..3) {
                        0 => s[t].batch = hostile_stride(rng),
                        1 => s[t].row = hostile_stride(rng),
                        _ => s[t].head = hostile_stride(rng),
                    }
                    c.p = c.p.clone().strides(s[0], s[1], s[2], s[3]);
                }
                7 => {
                    c.b.varlen = match rng.random_range(0..4) {
                        0 => None,
                        1 => c.b.varlen.map(|v| VarlenBuffers { cu_seqlens_k: None, ..v }),
                        _ => Some(VarlenBuffers { cu_seqlens_q: hostile_buf(rng, 6, rows), cu_seqlens_k: Some(hostile_buf(rng, 7, rows)) }),
                    }
                }
                8 => c.p.num_splits = Some(pick(rng, &[0, 1, 2, 5, 32, 33, usize::MAX])),
                9 => {
                    let n = c.p.heads_q.saturating_mul(totals(&c.p).0);
                    c.b.lse = if rng.random_bool(0.3) { None } else { Some(hostile_buf(rng, 5, n)) };
                }
                10 => {
                    c.p.path = pick(rng, &[KernelPath::Auto, KernelPath::MmaSync, KernelPath::Wgmma]);
                    c.p.config = if rng.random_bool(0.5) { None } else { Some(pick(rng, &[&CONFIGS[..], &VARLEN_CONFIGS[..]].concat())) };
                }
                11 => {
                    c.p.heads_q = hostile_dim(rng);
                    let any = hostile_dim(rng);
                    c.p.heads_kv = pick(rng, &[1, c.p.heads_q, c.p.heads_q / 2, any]);
                }
                _ => c.p.head_dim = pick(rng, &[0, 8, 64, 72, 128, 136, 256, 264, usize::MAX]),
            }
        }
        return c;
    }
    let mut c = hostile_case(rng);
    let p = &mut c.p;
    let offsets = |rng: &mut StdRng, n: usize| -> Vec<i32> {
        match rng.random_range(0..4) {
            0 => (0..n).map(|_| hostile_i32(rng)).collect(),
            1 => vec![0; n],
            _ => {
                // Prefix sums of hostile lengths (saturating), from 0.
                let mut at = 0i32;
                (0..n)
                    .map(|j| {
                        if j > 0 {
                            at = at.saturating_add(pick(rng, &[0, 1, 2, 100, 600, 1 << 20, i32::MAX / 2]));
                        }
                        at
                    })
                    .collect()
            }
        }
    };
    if rng.random_bool(0.5) {
        let n = match rng.random_range(0..6) {
            0 => 0,
            1 => 1,
            2 => p.batch.saturating_add(1).min(64),
            _ => rng.random_range(2..=10),
        };
        let cq = offsets(rng, n);
        let nk = if rng.random_bool(0.8) { n } else { rng.random_range(0..=10) };
        let ck = offsets(rng, nk);
        let derived = AttentionParams::new_varlen(&cq, &ck, p.heads_q, 8);
        if rng.random_bool(0.6) {
            p.batch = derived.batch;
        } else if rng.random_bool(0.2) {
            // `batch + 1` offsets: a count that wraps.
            p.batch = usize::MAX;
        }
        if rng.random_bool(0.6) {
            p.seqlen_q = derived.seqlen_q;
        }
        if rng.random_bool(0.6) {
            p.seqlen_k = derived.seqlen_k;
        }
        p.varlen = derived.varlen;
    } else {
        let total = |rng: &mut StdRng| if rng.random_bool(0.5) { rng.random_range(0..=2000) } else { hostile_dim(rng) };
        p.varlen = Some(Varlen::Device { total_q: total(rng), total_k: total(rng) });
    }
    if rng.random_bool(0.5) {
        // Buffers sized for the packed totals (contiguous, or the given strides).
        let (tq, tk) = totals(p);
        let d = p.head_dim as i128;
        let packed = |rows: usize, h: usize, s: Option<Strides>| -> usize {
            let (rows, h) = (rows as i128, h as i128);
            if rows == 0 || h == 0 || d == 0 {
                return 0;
            }
            let n = match s {
                None => rows.checked_mul(h).and_then(|x| x.checked_mul(d)),
                Some(s) => ((rows - 1) * s.row as i128).checked_add((h - 1) * s.head as i128).and_then(|x| x.checked_add(d)),
            };
            n.unwrap_or(i128::MAX).clamp(0, usize::MAX as i128) as usize
        };
        c.b.q.len = packed(tq, p.heads_q, p.q_strides);
        c.b.k.len = packed(tk, p.heads_kv, p.k_strides);
        c.b.v.len = packed(tk, p.heads_kv, p.v_strides);
        c.b.o.len = packed(tq, p.heads_q, p.o_strides);
        if let Some(l) = &mut c.b.lse {
            l.len = p.heads_q.saturating_mul(tq);
        }
    }
    let rows = p.batch.saturating_add(1);
    let host = matches!(p.varlen, Some(Varlen::Host { .. }));
    c.b.varlen = match rng.random_range(0..5) {
        // Host offsets with offset buffers are refused at once: mostly leave them out.
        _ if host && rng.random_bool(0.8) => None,
        0 => None,
        1 => Some(VarlenBuffers { cu_seqlens_q: hostile_buf(rng, 6, rows), cu_seqlens_k: None }),
        _ => Some(VarlenBuffers { cu_seqlens_q: hostile_buf(rng, 6, rows), cu_seqlens_k: Some(hostile_buf(rng, 7, rows)) }),
    };
    if rng.random_bool(0.2) {
        p.num_splits = Some(pick(rng, &[0, 1, 2, 33]));
    }
    c
}

// ------------------------------------------------------------------------------------------

/// Counts of the variable-length rounds.
#[derive(Default)]
struct VarlenStats {
    valid: usize,
    device: usize,
    empty: usize,
    wgmma: usize,
    faults: BTreeMap<&'static str, usize>,
    hostile_ok: usize,
    hostile_err: usize,
    /// Hostile calls the planner panicked on (a planner bug: it must answer with a typed
    /// error), kept to report at the end so that every other check still runs.
    panics: Vec<String>,
}

/// One round of variable-length calls: a valid one, one with a fault, two hostile ones.
fn varlen_round(rng: &mut StdRng, i: usize, st: &mut VarlenStats) {
    // Valid: accepted, empty exactly when there are no query rows, and the plan passes the model.
    let c = varlen_case(rng);
    let (tq, _) = totals(&c.p);
    match c.p.plan(&c.b) {
        Ok(plan) => {
            let empty = tq == 0 || c.p.seqlen_q == 0;
            assert_eq!(plan.is_empty(), empty, "varlen case {i}: empty plan for {tq} packed query rows: {c:?}\n{plan:?}");
            verify_plan(&c.p, &c.b, &plan).unwrap_or_else(|e| panic!("varlen case {i}: {e}\n{c:?}\n{plan:?}"));
            // Variable-length calls run on the Hopper kernels where the path allows.
            if c.p.path == KernelPath::Auto && c.p.config.is_none() && !plan.kernel.starts_with("flash_fwd_varlen_split_") {
                assert!(plan.wgmma.is_some(), "varlen case {i}: no Hopper launch beside the mma.sync one: {c:?}\n{plan:?}");
            }
            st.valid += 1;
            st.device += c.b.varlen.is_some() as usize;
            st.empty += empty as usize;
            st.wgmma += plan.wgmma.is_some() as usize;
        }
        Err(e) => panic!("varlen case {i}: valid variable-length call rejected: {e}\n{c:?}"),
    }

    // One fault: exactly its error; the emptied call: the same error or an empty plan.
    let (mut c, (what, want, when_empty)) = loop {
        let mut c = varlen_case(rng);
        if let Some(w) = inject_varlen(rng, &mut c) {
            break (c, w);
        }
    };
    match c.p.plan(&c.b) {
        Ok(plan) => panic!("varlen case {i}: {what} accepted: {c:?}\n{plan:?}"),
        Err(e) => assert!(error_matches(&e, &want), "varlen case {i}: {what}: got `{e}` ({e:?}), want {want:?}\n{c:?}"),
    }
    *st.faults.entry(what).or_default() += 1;
    assert_eq!(format!("{:?}", c.p.plan(&c.b)), format!("{:?}", c.p.plan(&c.b)));
    make_empty(&mut c.p);
    match when_empty {
        WhenEmpty::Same => {
            let r = c.p.plan(&c.b);
            assert!(r.as_ref().is_err_and(|e| error_matches(e, &want)), "varlen case {i}: emptied call with {what}: {r:?}, want {want:?}\n{c:?}");
        }
        WhenEmpty::Accepted => {
            let r = c.p.plan(&c.b);
            assert!(r.as_ref().is_ok_and(|p| p.is_empty()), "varlen case {i}: emptied call with {what}: {r:?}\n{c:?}");
        }
        WhenEmpty::Skip => {}
    }

    // Anything: a typed error, or a plan that passes the model; never a panic.
    for _ in 0..2 {
        let c = hostile_varlen_case(rng);
        let Ok(planned) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.p.plan(&c.b))) else {
            st.panics.push(format!("varlen case {i}: {c:?}"));
            continue;
        };
        match planned {
            Ok(plan) => {
                verify_plan(&c.p, &c.b, &plan).unwrap_or_else(|e| panic!("varlen case {i}: hostile call accepted wrongly: {e}\n{c:?}\n{plan:?}"));
                st.hostile_ok += 1;
            }
            Err(Error::NoGpu(_) | Error::UnsupportedGpu { .. } | Error::PathUnavailable { .. } | Error::Cuda(_) | Error::Driver { .. }) => {
                panic!("varlen case {i}: the planner returned a GPU error")
            }
            Err(_) => st.hostile_err += 1,
        }
    }
}

#[test]
fn plan_accepts_only_what_the_kernel_can_address() {
    let start = std::time::Instant::now();
    let mut rng = StdRng::seed_from_u64(0x5eed_0006);
    let mut stats: BTreeMap<&str, usize> = BTreeMap::new();
    let (mut valid, mut faults, mut hostile_ok, mut hostile_err, mut wgmma) = (0, 0, 0, 0, 0);
    // Variable-length calls draw from their own stream: the fixed-length calls stay as they were.
    let mut vrng = StdRng::seed_from_u64(0x5eed_0007);
    let mut vst = VarlenStats::default();

    for i in 0..10000 {
        // Valid calls: accepted, and the plan passes the model.
        let c = valid_case(&mut rng);
        match c.p.plan(&c.b) {
            Ok(plan) => {
                assert!(!plan.is_empty(), "case {i}: valid call gave an empty plan: {c:?}");
                verify_plan(&c.p, &c.b, &plan).unwrap_or_else(|e| panic!("case {i}: {e}\n{c:?}\n{plan:?}"));
                valid += 1;
                wgmma += plan.wgmma.is_some() as usize;
            }
            Err(e) => panic!("case {i}: valid call rejected: {e}\n{c:?}"),
        }

        // One fault: exactly its error.
        let (mut c, (what, want)) = loop {
            let mut c = valid_case(&mut rng);
            if let Some(w) = inject(&mut rng, &mut c) {
                break (c, w);
            }
        };
        match c.p.plan(&c.b) {
            Ok(plan) => panic!("case {i}: {what} accepted: {c:?}\n{plan:?}"),
            Err(e) => assert!(error_matches(&e, &want), "case {i}: {what}: got `{e}` ({e:?}), want {want:?}\n{c:?}"),
        }
        *stats.entry(what).or_default() += 1;
        faults += 1;
        // Planning is pure: the same call gives the same answer.
        assert_eq!(format!("{:?}", c.p.plan(&c.b)), format!("{:?}", c.p.plan(&c.b)));
        c.p.batch = 0; // an empty call is fine whatever the buffers
        if matches!(want, Want::HeadDim(_) | Want::Gqa(..) | Want::Shape(_)) {
            // shape errors come first even for empty calls
        } else {
            assert!(c.p.plan(&c.b).is_ok_and(|p| p.is_empty()), "case {i}: empty call with {what} rejected");
        }

        // Anything: a typed error, or a plan that passes the model.
        for _ in 0..2 {
            let c = hostile_case(&mut rng);
            match c.p.plan(&c.b) {
                Ok(plan) => {
                    verify_plan(&c.p, &c.b, &plan).unwrap_or_else(|e| panic!("case {i}: hostile call accepted wrongly: {e}\n{c:?}\n{plan:?}"));
                    hostile_ok += 1;
                }
                Err(Error::NoGpu(_) | Error::UnsupportedGpu { .. } | Error::PathUnavailable { .. } | Error::Cuda(_) | Error::Driver { .. }) => {
                    panic!("case {i}: the planner returned a GPU error")
                }
                Err(_) => hostile_err += 1,
            }
        }

        // Variable-length calls.
        varlen_round(&mut vrng, i, &mut vst);
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "plan properties: {valid} valid calls accepted and modelled ({wgmma} with a wgmma launch), {faults} single faults each rejected with its error \
         ({} kinds), {hostile_ok} hostile calls accepted and modelled, {hostile_err} rejected, in {secs:.2} s",
        stats.len()
    );
    for (what, n) in &stats {
        println!("  fault {what}: {n}");
    }
    let VarlenStats { valid: v_valid, device, empty, wgmma: v_wgmma, faults: v_faults, hostile_ok: v_ok, hostile_err: v_err, panics } = vst;
    println!(
        "variable-length: {v_valid} valid calls accepted and modelled ({device} with device offsets, {empty} empty, {v_wgmma} with a wgmma launch), \
         {} single faults each rejected with its error ({} kinds), {v_ok} hostile calls accepted and modelled, {v_err} rejected, {} panicked",
        v_faults.values().sum::<usize>(),
        v_faults.len(),
        panics.len()
    );
    for (what, n) in &v_faults {
        println!("  varlen fault {what}: {n}");
    }
    assert!(stats.len() >= 18, "some fault kinds never drawn: {stats:?}");
    assert!(hostile_ok >= 50, "too few hostile calls accepted ({hostile_ok}) to exercise the model");
    assert!(v_faults.len() >= 23, "some variable-length fault kinds never drawn: {v_faults:?}");
    assert!(device >= 100 && v_valid - device >= 100 && empty >= 10, "variable-length calls too one-sided: {device} device, {empty} empty of {v_valid}");
    assert!(v_ok >= 50, "too few hostile variable-length calls accepted ({v_ok}) to exercise the model");
    // Last, so that everything above is checked whatever happens here.
    assert!(panics.is_empty(), "the planner panicked on {} hostile variable-length calls, first: {}", panics.len(), panics[0]);
}

/// Fixed cases at the edges of the limits, accepted or rejected as documented.
#[test]
fn plan_limits_at_the_edges() {
    let b = |q: usize, k: usize, o: usize, lse: Option<usize>| Buffers {
        q: BufferRef { ptr: REGION, len: q },
        k: BufferRef { ptr: 2 * REGION, len: k },
        v: BufferRef { ptr: 3 * REGION, len: k },
        o: BufferRef { ptr: 4 * REGION, len: o },
        lse: lse.map(|len| BufferRef { ptr: 5 * REGION, len }),
        paged: None,
        varlen: None,
    };
    // Longest sequences: i32::MAX / 2 rows (addresses only; fake buffers).
    let n = (i32::MAX / 2) as usize;
    let p = AttentionParams::new(1, n, n, 1, 64).causal(true);
    let plan = p.plan(&b(n * 64, n * 64, n * 64, Some(n))).expect("i32::MAX / 2 rows");
    verify_plan(&p, &b(n * 64, n * 64, n * 64, Some(n)), &plan).unwrap();
    for (sq, sk, what) in [(n + 1, 1, "seqlen_q"), (1, n + 1, "seqlen_k")] {
        let p = AttentionParams::new(1, sq, sk, 1, 64);
        let e = p.plan(&b(usize::MAX, usize::MAX, usize::MAX, None)).unwrap_err();
        assert!(matches!(&e, Error::InvalidShape { what: w, .. } if *w == what), "{e:?}");
    }
    // Grid: batch * heads beyond 65535 is fine (1-D grid); past i32::MAX CTAs is not.
    let p = AttentionParams::new(70000, 3, 3, 1, 64);
    let plan = p.plan(&b(70000 * 3 * 64, 70000 * 3 * 64, 70000 * 3 * 64, Some(70000 * 3))).unwrap();
    assert_eq!(plan.grid, 70000);
    let p = AttentionParams::new(1, 1, 1, i32::MAX as usize, 8);
    assert_eq!(p.plan(&b(usize::MAX, usize::MAX, usize::MAX, None)).unwrap().grid, i32::MAX as u32);
    let p = AttentionParams::new(2, 1, 1, i32::MAX as usize / 2 + 1, 8);
    assert!(matches!(p.plan(&b(usize::MAX, usize::MAX, usize::MAX, None)), Err(Error::LaunchLimit(_))));
    // A product that wraps 64 bits to a small grid is still refused.
    let p = AttentionParams::new((1 << 63) + 1, 1, 1, 2, 8);
    assert!(matches!(p.plan(&b(usize::MAX, usize::MAX, usize::MAX, None)), Err(Error::LaunchLimit(_))));
    let p = AttentionParams::new(1 << 32, 1, 1, 1 << 32, 8);
    assert!(matches!(p.plan(&b(usize::MAX, usize::MAX, usize::MAX, None)), Err(Error::LaunchLimit(_))));
    // Zero sizes.
    for p in [AttentionParams::new(0, 5, 5, 2, 64), AttentionParams::new(2, 5, 5, 0, 64).heads_kv(0), AttentionParams::new(2, 0, 5, 2, 64)] {
        let nulls = Buffers { q: BufferRef { ptr: 0, len: 0 }, k: BufferRef { ptr: 0, len: 0 }, v: BufferRef { ptr: 0, len: 0 }, o: BufferRef { ptr: 0, len: 0 }, lse: None, paged: None, varlen: None };
        assert!(p.plan(&nulls).unwrap().is_empty(), "{p:?}");
    }
    // No keys: K and V may be anything, even null.
    let p = AttentionParams::new(2, 5, 0, 2, 64);
    let mut bufs = b(2 * 5 * 2 * 64, 0, 2 * 5 * 2 * 64, Some(20));
    bufs.k.ptr = 0;
    bufs.v.ptr = 3;
    let plan = p.plan(&bufs).unwrap();
    verify_plan(&p, &bufs, &plan).unwrap();
}

/// Planner bug found by the hostile variable-length calls above: host offsets with `batch =
/// usize::MAX` make `check_varlen` compute `batch + 1` unchecked (debug builds: "attempt to
/// add with overflow"; release builds: it wraps to 0, an empty offset array passes the count
/// check, and `cu[0]` panics out of bounds). The planner must answer with a typed error.
#[test]
fn varlen_host_offsets_with_a_wrapping_batch_are_a_typed_error() {
    let null = BufferRef { ptr: 0, len: 0 };
    let bufs = Buffers { q: null, k: null, v: null, o: null, lse: None, paged: None, varlen: None };
    for cu in [vec![], vec![0]] {
        let mut p = AttentionParams::new_varlen(&cu, &cu, 1, 64);
        p.batch = usize::MAX;
        let r = std::panic::catch_unwind(|| p.plan(&bufs));
        let r = r.unwrap_or_else(|_| panic!("the planner panicked on host offsets {cu:?} with batch usize::MAX"));
        assert!(matches!(r, Err(Error::InvalidShape { what: "cu_seqlens_q", .. })), "{r:?}");
    }
}

/// The variable-length model is not vacuous: valid plans edited to be wrong (or checked
/// against edited buffers or calls) in each way it looks for fail it, each with the check
/// meant for it. A planner that produced any of these would fail the property test.
#[test]
fn varlen_model_rejects_wrong_plans() {
    type Edit = Box<dyn Fn(&mut AttentionParams, &mut Buffers, &mut LaunchPlan)>;
    // Applies `f` to every launch's parameters (the mma.sync plan's and the Hopper one's).
    fn all_params(pl: &mut LaunchPlan, f: impl Fn(&mut FwdParams)) {
        f(&mut pl.params);
        if let Some(w) = &mut pl.wgmma {
            f(&mut w.params);
        }
    }
    let mut rng = StdRng::seed_from_u64(0x5eed_0008);
    let mut caught: BTreeMap<&str, usize> = BTreeMap::new();
    let mut planned = 0;
    while planned < 400 {
        let c = varlen_case(&mut rng);
        let plan = c.p.plan(&c.b).expect("valid variable-length call");
        if plan.is_empty() {
            continue;
        }
        planned += 1;
        verify_plan(&c.p, &c.b, &plan).unwrap();
        let device = c.b.varlen.is_some();
        let (tq, tk) = totals(&c.p);
        let (reads_kv, hq) = (tk > 0 && c.p.seqlen_k > 0, c.p.heads_q);
        let needs = packed_needs(&c.p);
        let is_wgmma = plan.is_wgmma();
        let mut edits: Vec<(&'static str, &'static str, Edit)> = vec![
            ("grid", "grid", Box::new(|_, _, pl| {
                pl.grid += 1;
                if let Some(w) = &mut pl.wgmma {
                    w.grid += 1;
                }
            })),
            ("Q batch stride", "batch strides", Box::new(|_, _, pl| all_params(pl, |f| f.q_strides[0] = 8))),
            ("total_q", "totals", Box::new(|_, _, pl| all_params(pl, |f| f.total_q += 1))),
            ("total_k", "totals", Box::new(|_, _, pl| all_params(pl, |f| f.total_k += 1))),
            ("seqlen_q", "seqlens", Box::new(|_, _, pl| all_params(pl, |f| f.seqlen_q += 1))),
            ("split", "split-KV", Box::new(|_, _, pl| {
                pl.split = Some(flashrs::attention::SplitPlan { num_splits: 2, counters_len: 1, o_accum_len: 1, lse_accum_len: 1 })
            })),
            ("split past 32", "num_splits", Box::new(|p, _, _| p.num_splits = Some(33))),
            ("Q one short", "past the buffer", Box::new(move |_, b, _| b.q.len = needs[0] - 1)),
            ("out one short", "past the buffer", Box::new(move |_, b, _| b.o.len = needs[3] - 1)),
            ("out over Q", "overlaps q", Box::new(|_, b, pl| {
                b.o.ptr = b.q.ptr;
                all_params(pl, |f| f.o = f.q);
            })),
        ];
        if reads_kv {
            edits.push(("K batch stride", "batch strides", Box::new(|_, _, pl| all_params(pl, |f| f.k_strides[0] = 8))));
            edits.push(("V one short", "past the buffer", Box::new(move |_, b, _| b.v.len = needs[2] - 1)));
        }
        if tq > 1 && tq * hq <= 50_000 {
            edits.push(("out rows alias", "share memory", Box::new(|_, _, pl| all_params(pl, |f| f.o_strides[1] = 0))));
        }
        if c.b.lse.is_some() {
            edits.push(("lse one short", "lse offset", Box::new(move |_, b, _| b.lse.as_mut().unwrap().len = hq * tq - 1)));
            edits.push(("lse misaligned", "misaligned", Box::new(|_, b, pl| {
                b.lse.as_mut().unwrap().ptr += 2;
                all_params(pl, |f| f.lse += 2);
            })));
            edits.push(("lse over out", "overlaps", Box::new(|_, b, pl| {
                b.lse.as_mut().unwrap().ptr = b.o.ptr;
                all_params(pl, |f| f.lse = f.o);
            })));
        }
        if device {
            let batch = c.p.batch;
            edits.push(("offsets not the buffer's", "not the buffer's", Box::new(|_, _, pl| all_params(pl, |f| f.cu_seqlens_q += 4))));
            edits.push(("offsets uploaded", "carries offsets", Box::new(|_, _, pl| pl.varlen_offsets = Some(vec![0; 2]))));
            edits.push(("offsets one short", "past the buffer's", Box::new(move |_, b, _| b.varlen.as_mut().unwrap().cu_seqlens_k.as_mut().unwrap().len = batch)));
            edits.push(("offsets misaligned", "not 4-byte aligned", Box::new(|_, b, pl| {
                b.varlen.as_mut().unwrap().cu_seqlens_q.ptr += 2;
                all_params(pl, |f| f.cu_seqlens_q += 2);
            })));
            edits.push(("offsets null", "null", Box::new(|_, b, pl| {
                b.varlen.as_mut().unwrap().cu_seqlens_q.ptr = 0;
                all_params(pl, |f| f.cu_seqlens_q = 0);
            })));
            edits.push(("out over offsets", "overlaps cu_seqlens_k", Box::new(|_, b, pl| {
                b.varlen.as_mut().unwrap().cu_seqlens_k.as_mut().unwrap().ptr = b.o.ptr + 4;
                all_params(pl, |f| f.cu_seqlens_k = f.o + 4);
            })));
            edits.push(("no offset buffers", "without Buffers::varlen", Box::new(|_, b, _| b.varlen = None)));
            edits.push(("no key offsets", "without key offsets", Box::new(|_, b, _| b.varlen.as_mut().unwrap().cu_seqlens_k = None)));
        } else {
            edits.push(("offsets not carried", "carries offsets", Box::new(|_, _, pl| pl.varlen_offsets = None)));
            edits.push(("other offsets carried", "carries offsets", Box::new(|_, _, pl| *pl.varlen_offsets.as_mut().unwrap().last_mut().unwrap() += 1)));
            edits.push(("kernel pointed at offsets", "points at", Box::new(|_, _, pl| all_params(pl, |f| f.cu_seqlens_q = 6 * REGION))));
            edits.push(("offset buffers with host offsets", "device offset buffers accepted", Box::new(|_, b, _| {
                b.varlen = Some(VarlenBuffers { cu_seqlens_q: BufferRef { ptr: 6 * REGION, len: 100 }, cu_seqlens_k: None })
            })));
            let edit_host = |f: fn(&mut Vec<i32>, &mut usize)| -> Edit {
                Box::new(move |p, _, _| {
                    let AttentionParams { varlen: Some(Varlen::Host { cu_seqlens_k, .. }), seqlen_k, .. } = p else { unreachable!() };
                    f(cu_seqlens_k, seqlen_k)
                })
            };
            edits.push(("host offsets: count", "offsets accepted for batch", edit_host(|cu, _| {
                cu.pop();
            })));
            edits.push(("host offsets: start", "starting at", edit_host(|cu, _| cu[0] = 1)));
            if tk > 0 {
                edits.push(("host offsets: decreasing", "decreasing", edit_host(|cu, _| *cu.last_mut().unwrap() = -1)));
                edits.push(("host offsets: too long", "with a maximum of", edit_host(|_, most| *most -= 1)));
            }
        }
        if !is_wgmma {
            edits.push(("mma kernel", "kernel", Box::new(|p, _, pl| pl.kernel = kernel_name(p.dtype, &pl.config))));
            if let Some(&other) = VARLEN_CONFIGS.iter().find(|v| v.head_dim > plan.config.head_dim && c.p.config.is_none()) {
                edits.push(("mma config", "for a variable-length call", Box::new(move |_, _, pl| pl.config = other)));
            }
        }
        if plan.wgmma.is_some() {
            edits.push(("wgmma packed rows", "packed rows", Box::new(|_, _, pl| pl.wgmma.as_mut().unwrap().packed_rows = None)));
            edits.push(("wgmma kernel", "wgmma kernel", Box::new(|p, _, pl| {
                let w = pl.wgmma.as_mut().unwrap();
                w.kernel = hopper::kernel_name(p.dtype, &w.config);
            })));
        }
        for (what, want, edit) in edits {
            let (mut p, mut b, mut pl) = (c.p.clone(), c.b, plan.clone());
            edit(&mut p, &mut b, &mut pl);
            match verify_plan(&p, &b, &pl) {
                Ok(()) => panic!("the model passed a plan with {what}: {c:?}\n{pl:?}"),
                Err(e) => assert!(e.contains(want), "{what}: the model said `{e}`, want `{want}`\n{c:?}"),
            }
            *caught.entry(what).or_default() += 1;
        }
    }
    println!("variable-length model: {} kinds of wrong plans caught over {planned} plans: {caught:?}", caught.len());
    assert!(caught.len() >= 36, "some edits never tried: {caught:?}");
}
