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
use std::collections::BTreeMap;

use flashrs::attention::config::CONFIGS;
use flashrs::attention::{BufferRef, Buffers, FwdParams, LaunchPlan, Strides, TileConfig, kernel_name};
use flashrs::hopper;
use flashrs::{AttentionParams, DType, Error, KernelPath};
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
    // The Hopper launch: planned alongside (path Auto; sm_90a GPUs run it) or the plan itself
    // (path Wgmma). Same parameters and accesses, its own tiles (TMA reads the same boxes of
    // rows below seqlen and columns below head_dim).
    if let Some(w) = &plan.wgmma {
        ensure!(p.path != KernelPath::MmaSync, "mma.sync path with a wgmma plan");
        ensure!(w.kernel == hopper::kernel_name(p.dtype, &w.config), "wgmma kernel {}", w.kernel);
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
    ensure!(CONFIGS.contains(&c), "config {c:?} is not instantiated");
    if let Some(want) = p.config {
        ensure!(c == want, "forced config {want:?} not used ({c:?})");
    }
    ensure!(p.head_dim > 0 && p.head_dim % 8 == 0 && p.head_dim <= c.head_dim, "head_dim {} vs config {c:?}", p.head_dim);
    ensure!(plan.kernel == kernel_name(p.dtype, &c), "kernel {} for {:?} {c:?}", plan.kernel, p.dtype);
    ensure!(plan.block as usize == c.warps * 32, "block {} for {c:?}", plan.block);
    let smem = (c.block_m + 2 * c.stages * c.block_n) * c.head_dim * 2;
    ensure!(plan.smem as usize == smem, "smem {} for {c:?} (want {smem})", plan.smem);
    verify_launch(p, bufs, c, plan.grid, &plan.params)
}

/// Geometry, parameters and addresses of one launch with tiles `c`.
fn verify_launch(p: &AttentionParams, bufs: &Buffers, c: TileConfig, grid: u32, f: &FwdParams) -> Result<(), String> {
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
    let mut writes = vec![("out", out_range)];
    match bufs.lse {
        None => ensure!(f.lse == 0, "lse address {:#x} without an lse buffer", f.lse),
        Some(l) => {
            ensure!(f.lse != 0, "lse buffer given but the kernel would skip it (null address)");
            ensure!(f.lse == l.ptr, "lse address {:#x} vs {:#x}", f.lse, l.ptr);
            let count = bq * hq * sq;
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

/// Anything at all, from pools of hostile values.
fn hostile_case(rng: &mut StdRng) -> Case {
    let dim = |rng: &mut StdRng| -> usize {
        match rng.random_range(0..12) {
            0 => 0,
            1..=4 => rng.random_range(1..=5),
            5..=7 => rng.random_range(1..=400),
            8 => pick(rng, &[65535, 65536, 70000, 1 << 20]),
            9 => pick(rng, &[(i32::MAX / 2) as usize, (i32::MAX / 2) as usize + 1, i32::MAX as usize, 1 << 31, 1 << 32]),
            10 => pick(rng, &[usize::MAX, usize::MAX / 2, (1 << 63) + 1, 1 << 40]),
            _ => rng.random::<u64>() as usize,
        }
    };
    let stride = |rng: &mut StdRng| -> i64 {
        match rng.random_range(0..10) {
            0 => 0,
            1..=3 => 8 * rng.random_range(0..2000),
            4 => rng.random_range(-20..2000),
            5 => pick(rng, &[i64::MAX, i64::MAX - 7, i64::MIN, -8, 1 << 62, 1 << 61, (1 << 62) + 8, 1 << 40]),
            6 => -(8 * rng.random_range(1..1000)),
            7 => rng.random::<u64>() as i64,
            _ => 8 * rng.random_range(0..100_000),
        }
    };
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
            p.batch as i128 * p.heads_q as i128 * p.seqlen_q as i128
        } else if dims[i].iter().all(|&x| x > 0) {
            // Contiguous defaults in i128 (they may not fit i64 here).
            let [b, s, h, d] = dims[i].map(|x| x as i128);
            let st = given[i].map_or([h * d * s, h * d, d], |g| [g.batch as i128, g.row as i128, g.head as i128]);
            (b - 1) * st[0] + (s - 1) * st[1] + (h - 1) * st[2] + d
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

#[test]
fn plan_accepts_only_what_the_kernel_can_address() {
    let start = std::time::Instant::now();
    let mut rng = StdRng::seed_from_u64(0x5eed_0006);
    let mut stats: BTreeMap<&str, usize> = BTreeMap::new();
    let (mut valid, mut faults, mut hostile_ok, mut hostile_err, mut wgmma) = (0, 0, 0, 0, 0);

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
    assert!(stats.len() >= 18, "some fault kinds never drawn: {stats:?}");
    assert!(hostile_ok >= 50, "too few hostile calls accepted ({hostile_ok}) to exercise the model");
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
