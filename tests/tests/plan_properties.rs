//! Property test of the planner (`AttentionParams::plan`), CPU only.
//!
//! Seeded random calls (`FLASHRS_SEED` replays them; a failure names its family, case and
//! seed), each planned for a target drawn from `Target::PRESETS` (A100, A10, L4, H100), so that
//! every shared-memory class, SM count and kernel family is planned for. Three families:
//! - fixed-length calls: prefill shapes, and decode shapes (1 to 16 query rows against up to
//!   128k keys, a few sequences) that split their keys for the target's SMs and pack GQA heads
//!   into one query block;
//! - variable-length calls, prefill or decode, offsets on the host or on the GPU;
//! - paged K/V caches under fixed-length or variable-length queries;
//!
//! each in three kinds:
//! - *valid* calls (plain, padded, head-major and packed-KV layouts; buffers tight or
//!   generous; V and the output of K's head dimension or of their own (`head_dim_v`, narrower
//!   or wider); tile configurations, kernel families and split counts forced where
//!   the target has them; a quarter of the fixed-length and variable-length ones with attention
//!   modifications: a sliding window, a softcap, ALiBi slopes per head or per batch entry,
//!   sinks): the planner must accept them;
//! - valid calls with *one injected fault* (a tensor or index array one element short; a null
//!   or misaligned address; a misaligned, negative or overflowing stride; an unsupported
//!   head_dim or head_dim_v, GQA ratio, sequence length, scale, tile configuration (one that
//!   holds head_dim but not a wider head_dim_v too), split count, page geometry or offsets; a
//!   paged V not of K's head_dim; a grid past the limit; aliasing output strides; an output,
//!   lse or index array overlapping what the kernel writes or reads; a kernel family or shared
//!   memory the target lacks; a GQA group whose packed rows pass the kernels' 32-bit masks; a
//!   softcap not positive and finite, or whose factors overflow with the scale; ALiBi slopes or
//!   sinks short, null, misaligned or over the output; modifications with a split, a
//!   configuration without modification kernels, or a paged cache): the planner must return
//!   exactly the typed error that fault calls for, twice alike (planning is pure), and for the
//!   same call without rows the same error (a fault in the shape) or an empty plan (a fault in
//!   a buffer, which an empty call never touches);
//! - *hostile* calls (valid ones with fields replaced by, or calls made entirely of, huge, zero,
//!   misaligned, negative and tiny values): a typed error, or a plan that passes the model;
//!   never a panic. Their `contiguous_lens` and `tensor_strides` must be exact or typed errors.
//!
//! Every accepted plan is checked against an independent model ([`verify_plan`]): the call is
//! valid as documented; the kernel is instantiated, fits the target's shared memory, is a
//! Hopper one only on sm_90a, and is the one the selection rules name (the family asked for,
//! the variant of the call's shape, its configuration for the larger of head_dim and
//! head_dim_v or, on Hopper, the pair's own, GQA packing, split count, persistence);
//! the grid and every kernel parameter hold their true, untruncated values (the modifications'
//! as the kernels take them: causal masking folded into the window, the scale into the softcap
//! and ALiBi factors); a call with modifications runs a modification kernel (unsplit, unpacked,
//! its own configuration), a plain call a plain one; every element the kernel reads or writes
//! (Q, K and V or the paged caches through the block table, the output, the log-sum-exp, the
//! offsets and key counts, the ALiBi slopes and sinks; Q and K of head_dim columns, V and the
//! output of head_dim_v) lies inside its buffer, 16-byte aligned where it moves vectors, and
//! what it writes neither aliases itself nor overlaps anything else it touches; GQA-packed
//! strides address exactly the call's query heads; the split-KV workspace holds every partial
//! row within its 32-bit indices, and every key tile is in a split; a Hopper launch's tensor
//! maps are ones TMA takes.
//!
//! A family runs all its rounds and reports every kind of failure with its first example, so
//! that one planner bug does not hide another. Fixed cases cover the limits' edges and huge
//! sizes, and the model's own strength: plans edited to be wrong in each way it looks for fail
//! it ([`model_rejects_wrong_plans`]).
use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};

use flashrs::plan::PERSISTENT_MAX_KEYS;
use flashrs::sm90::{self, HopperConfig};
use flashrs::tiles::{CONFIGS, MODS_CONFIGS, SMALL_D256, SPLIT_CONFIGS, TileConfig, VARLEN_CONFIGS};
use flashrs::{
    Arch, AttentionParams, AttentionParamsBuilder, BufferRef, Buffers, DType, DeviceArray, DeviceOffsets, DimOrder, Error, Flavor, FwdParams, Kernel, KernelChoice,
    Kv, LaunchPlan, ModParams, Mods, Offsets, PagedKv, Pages, Rows, Strides, Target, Variant,
};
use flashrs_tests::expect::{Want, error_matches};
use flashrs_tests::{case_rng, params, planning_index};
use rand::rngs::StdRng;
use rand::Rng;

/// Fake allocations live in distinct 1 TiB regions of the address space: tensors in regions
/// 1-5 (q, k, v, out, lse), index arrays in 6-9 (ALiBi slopes and sinks in 8 and 9).
const REGION: u64 = 1 << 40;
const TENSORS: [&str; 5] = ["q", "k", "v", "out", "lse"];
/// Longest sequence the kernels' 32-bit masks take (the documented limit).
const MAX_SEQLEN: usize = (i32::MAX / 2) as usize;
/// Most split-KV CTAs per query block (one merge lane each).
const MAX_SPLITS: usize = 32;
/// Largest byte stride (exclusive) a TMA tensor map describes.
const TMA_MAX_STRIDE_BYTES: i128 = 1 << 40;
/// Shared memory a Hopper CTA may have (its Q tiles are doubled where they fit).
const SM90_SMEM: usize = 227 * 1024;
/// A window side that bounds nothing, and the most a side is clamped to (the documented
/// `i32::MAX / 2`: no row reaches this far).
const WINDOW_UNBOUNDED: i32 = i32::MAX / 2;
/// Regions of the ALiBi slopes, the sinks and the user data.
const MOD_REGIONS: [u64; 3] = [8, 9, 10];

fn pick<T: Copy>(rng: &mut StdRng, xs: &[T]) -> T {
    xs[rng.random_range(0..xs.len())]
}

fn target_name(t: &Target) -> &'static str {
    match t.compute_capability {
        (8, 0) => "A100",
        (8, 6) => "A10",
        (8, 9) => "L4",
        (9, 0) => "H100",
        _ => "other",
    }
}

/// One call: parameters, buffers, and the GPU it is planned for.
#[derive(Clone, Debug)]
struct Case {
    p: AttentionParams<'static>,
    b: Buffers,
    t: Target,
}

impl Case {
    /// The planner's answer, or the panic it raised (a planner bug: it must answer with a
    /// typed error).
    fn plan(&self) -> Result<flashrs::Result<LaunchPlan>, String> {
        catch_unwind(AssertUnwindSafe(|| self.p.plan(&self.b, &self.t))).map_err(|e| {
            let msg = e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()));
            format!("the planner panicked: {}", msg.unwrap_or_default())
        })
    }
}

macro_rules! ensure {
    ($cond:expr, $($msg:tt)*) => {
        if !$cond {
            return Err(format!($($msg)*));
        }
    };
}


// ------------------------------------------------------------------------------------------
// The model's reading of a call: what is valid, the strides, the packed rows.

/// The padded head dimension the kernels compute (`head_dim` valid).
fn padded(d: usize) -> usize {
    [64, 128, 256].into_iter().find(|&x| d <= x).unwrap_or(usize::MAX)
}

/// V's and the output's head dimension as documented: `head_dim_v`, else `head_dim`.
fn dim_v(p: &AttentionParams) -> usize {
    p.head_dim_v.unwrap_or(p.head_dim)
}

/// The head dimension a kernel must hold: the larger of head_dim and head_dim_v (it zero-fills
/// the narrower operands' extra columns).
fn kernel_dim(p: &AttentionParams) -> usize {
    p.head_dim.max(dim_v(p))
}

/// Shared memory of an `mma.sync` tile: the Q tile, then K and V stages.
fn mma_smem(c: &TileConfig) -> usize {
    (c.block_m + 2 * c.stages * c.block_n) * c.head_dim * 2
}

/// Bytes of a Hopper tile's Q tile and of its K and V rings (V's of its own padded head_dim).
fn sm90_tiles(c: &HopperConfig) -> (usize, usize) {
    (64 * c.consumers * c.head_dim * 2, c.stages * c.block_n * (c.head_dim + c.head_dim_v) * 2)
}

/// Q tiles a Hopper kernel keeps: two where they fit.
fn sm90_q_tiles(c: &HopperConfig) -> usize {
    let (q, ring) = sm90_tiles(c);
    if 2048 + 2 * q + ring <= SM90_SMEM { 2 } else { 1 }
}

/// Shared memory of a Hopper tile: alignment slack, its Q tiles, the K and V rings, barriers.
fn sm90_smem(c: &HopperConfig) -> usize {
    let (q, ring) = sm90_tiles(c);
    1024 + sm90_q_tiles(c) * q + ring + 1024
}

/// (block_m, block_n, threads, shared memory, padded head_dim) of a kernel, from its tile shape
/// (a Hopper kernel's V may be narrower: [`kernel_dims`]).
fn geometry_of(k: &Kernel) -> (usize, usize, usize, usize, usize) {
    match k {
        Kernel::Mma { config: c, .. } => (c.block_m, c.block_n, 32 * c.warps, mma_smem(c), c.head_dim),
        Kernel::Sm90 { config: c, .. } => (64 * c.consumers, c.block_n, 128 * (1 + c.consumers), sm90_smem(c), c.head_dim),
        Kernel::Bwd { .. } | Kernel::Merge { .. } => panic!("the forward planner chose a backward or merge kernel: {k}"),
    }
}

/// The padded head dimensions of (Q and K, V and the output) a kernel computes: an `mma.sync`
/// tile's one for all, a Hopper tile's its own for V.
fn kernel_dims(k: &Kernel) -> (usize, usize) {
    match k {
        Kernel::Mma { config: c, .. } => (c.head_dim, c.head_dim),
        Kernel::Sm90 { config: c, .. } => (c.head_dim, c.head_dim_v),
        Kernel::Bwd { .. } | Kernel::Merge { .. } => panic!("the forward planner chose a backward or merge kernel: {k}"),
    }
}

fn fits(c: &TileConfig, t: &Target) -> bool {
    mma_smem(c) <= t.max_smem_per_block as usize
}

/// The split-KV (paged, decode) configuration for query blocks of `rows` rows: of the split
/// table's configurations for the padded head_dim that fit the target (the small-memory
/// fallback only where no other does), the smallest block that holds every row, else the
/// largest; the first listed among equals.
fn split_config(padded: usize, rows: usize, t: &Target) -> Option<TileConfig> {
    let fit_all: Vec<TileConfig> = SPLIT_CONFIGS.iter().copied().filter(|c| c.head_dim == padded && fits(c, t)).collect();
    let preferred: Vec<TileConfig> = fit_all.iter().copied().filter(|c| *c != SMALL_D256).collect();
    let fit = if preferred.is_empty() { fit_all } else { preferred };
    let holds = fit.iter().copied().filter(|c| c.block_m >= rows).min_by_key(|c| c.block_m);
    holds.or_else(|| fit.iter().copied().reduce(|best, c| if c.block_m > best.block_m { c } else { best }))
}

/// The variable-length kernels' configuration: the first of their table for the padded
/// head_dim that fits the target.
fn varlen_config(padded: usize, t: &Target) -> Option<TileConfig> {
    VARLEN_CONFIGS.iter().copied().find(|c| c.head_dim == padded && fits(c, t))
}

/// The plain kernels' configuration when none is forced: the default for head_dim `d` (the
/// kernel's, [`kernel_dim`]) if it fits (else the first of its padded head_dim that does), or a
/// decode tile where a split configuration's smaller block holds the rows.
fn plain_config(d: usize, rows: usize, t: &Target) -> Option<TileConfig> {
    let p = padded(d);
    let default = flashrs::tiles::default_config(d).filter(|c| fits(c, t)).or_else(|| CONFIGS.iter().copied().find(|c| c.head_dim == p && fits(c, t)))?;
    Some(match split_config(p, rows, t) {
        Some(c) if rows <= c.block_m && c.block_m < default.block_m => c,
        _ => default,
    })
}

/// Contiguous strides of entries of `rows` rows of `heads` heads in `order`, in exact
/// arithmetic; `None` when a size or a stride does not fit i64.
fn contiguous(order: DimOrder, rows: usize, heads: usize, d: usize) -> Option<Strides> {
    let fit = |x: i128| i64::try_from(x).ok();
    let (r, h, dd) = (fit(rows as i128)? as i128, fit(heads as i128)? as i128, fit(d as i128)? as i128);
    match order {
        DimOrder::Bshd => {
            let row = fit(h * dd)?;
            Some(Strides { batch: fit(row as i128 * r)?, row, head: dd as i64 })
        }
        DimOrder::Bhsd => {
            let head = fit(r * dd)?;
            Some(Strides { batch: fit(head as i128 * h)?, row: dd as i64, head })
        }
        _ => unreachable!("a dim order the model does not know: {order:?}"),
    }
}

/// The packed totals (query rows, key rows) of offsets as documented: host offsets' last
/// entries (negative ones count 0), or the totals given with device offsets.
fn offset_totals(o: &Offsets) -> (usize, usize) {
    let last = |cu: &[i32]| cu.last().map_or(0, |&x| x.max(0) as usize);
    match o {
        Offsets::Host { cu_seqlens_q, cu_seqlens_k } => (last(cu_seqlens_q), last(cu_seqlens_k)),
        Offsets::Device(d) => (d.total_q, d.total_k),
        _ => unreachable!("a layout the model does not know"),
    }
}

/// Rows of one Q (and output) and one K/V batch entry: the sequences', the packed totals, a
/// page.
fn entry_rows(p: &AttentionParams) -> (usize, usize) {
    let packed = match &p.layout.rows {
        Rows::Packed(o) => Some(offset_totals(o)),
        Rows::Batched => None,
        _ => unreachable!("a layout the model does not know"),
    };
    let rows_q = packed.map_or(p.seqlen_q, |t| t.0);
    let rows_k = match (&p.layout.kv, packed) {
        (Kv::Paged(pg), _) => pg.pages.page_size,
        (Kv::Tensors, Some(t)) => t.1,
        (Kv::Tensors, None) => p.seqlen_k,
        _ => unreachable!("a layout the model does not know"),
    };
    (rows_q, rows_k)
}

/// The strides of (q, k, v, out) as the call gives them, defaults resolved as documented
/// (the dim order's over the entry rows, of head_dim columns for Q and K and head_dim_v for V
/// and the output; a paged cache's contiguous pages); `Err(tensor)` for the first tensor whose
/// default overflows i64.
fn call_strides(p: &AttentionParams) -> Result<[Strides; 4], &'static str> {
    let (rows_q, rows_k) = entry_rows(p);
    let kv_order = if matches!(p.layout.kv, Kv::Paged(_)) { DimOrder::Bshd } else { p.dim_order };
    let (d, dv) = (p.head_dim, dim_v(p));
    let one = |name, given: Option<Strides>, rows, heads, d, order| given.or_else(|| contiguous(order, rows, heads, d)).ok_or(name);
    Ok([
        one("q", p.q_strides, rows_q, p.heads_q, d, p.dim_order)?,
        one("k", p.k_strides, rows_k, p.heads_kv, d, kv_order)?,
        one("v", p.v_strides, rows_k, p.heads_kv, dv, kv_order)?,
        one("out", p.o_strides, rows_q, p.heads_q, dv, p.dim_order)?,
    ])
}

/// Elements a tensor of `dims` (`[batch, rows, heads, head_dim]`) reaches with strides `s`:
/// highest offset + 1, 0 when empty (exact arithmetic).
fn extent(dims: [usize; 4], s: Strides) -> i128 {
    if dims.contains(&0) {
        return 0;
    }
    let st = [s.batch, s.row, s.head];
    (0..3).map(|i| (dims[i] as i128 - 1) * st[i] as i128).sum::<i128>() + dims[3] as i128
}

/// A call as the model reads it.
#[derive(Clone, Debug)]
struct Model {
    /// Head dimension of Q and K.
    d: usize,
    /// Head dimension of V and the output.
    dv: usize,
    /// Head dimension the kernel must hold: the larger of the two.
    kd: usize,
    /// Query heads per K/V head.
    group: usize,
    /// Variable-length calls: packed query and key rows (key rows 0 in paged calls).
    packed: Option<(usize, usize)>,
    paged: Option<PagedKv<'static>>,
    /// The call's strides (meaningful only for a non-empty call).
    strides: [Strides; 4],
    /// No batch entry, head or query row: nothing runs.
    empty: bool,
    /// The kernel reads K and V (some sequence can have keys).
    reads_kv: bool,
    /// The attention modifications as the kernels take them; `None` for a plain call.
    mods: Option<ModParams>,
}

/// The packed totals of a variable-length call, from offsets the planner promises to have
/// validated: host offsets `batch + 1` each (paged calls may leave the key offsets out), from
/// 0, non-decreasing, no sequence longer than the maxima; device totals in the kernels' 32-bit
/// row indices, with key offsets unless paged.
fn varlen_totals(p: &AttentionParams, o: &Offsets, paged: bool) -> Result<(usize, usize), String> {
    match o {
        Offsets::Host { cu_seqlens_q, cu_seqlens_k } => {
            let keys = !(paged && cu_seqlens_k.is_empty());
            let arrays = [("cu_seqlens_q", cu_seqlens_q, p.seqlen_q, true), ("cu_seqlens_k", cu_seqlens_k, p.seqlen_k, keys)];
            for (name, cu, most, checked) in arrays {
                if !checked {
                    continue;
                }
                ensure!(cu.len() as u128 == p.batch as u128 + 1, "{name}: {} offsets accepted for batch {}", cu.len(), p.batch);
                ensure!(cu[0] == 0, "{name}: offsets starting at {} accepted", cu[0]);
                for w in cu.windows(2) {
                    ensure!(w[0] <= w[1], "{name}: decreasing offsets {} then {} accepted", w[0], w[1]);
                    let len = (w[1] as i64 - w[0] as i64) as u128;
                    ensure!(len <= most as u128, "{name}: a sequence of {len} rows accepted with a maximum of {most}");
                }
            }
            let (tq, tk) = offset_totals(o);
            Ok((tq, if paged { 0 } else { tk }))
        }
        Offsets::Device(dev) => {
            ensure!(paged || dev.cu_seqlens_k.is_some(), "unpaged device offsets accepted without key offsets");
            ensure!(dev.total_q <= i32::MAX as usize && dev.total_k <= i32::MAX as usize, "device totals {}/{} past 32-bit row indices", dev.total_q, dev.total_k);
            Ok((dev.total_q, if paged { 0 } else { dev.total_k }))
        }
        _ => unreachable!("a layout the model does not know"),
    }
}

/// Reads a call the planner accepted: everything the documentation says a valid call is.
fn read_call(p: &AttentionParams<'static>) -> Result<Model, String> {
    let d = p.head_dim;
    ensure!(d > 0 && d.is_multiple_of(8) && d <= 256, "head_dim {d} accepted");
    let dv = dim_v(p);
    ensure!(dv > 0 && dv.is_multiple_of(8) && dv <= 256, "head_dim_v {dv} accepted");
    ensure!(p.heads_q == 0 || (p.heads_kv > 0 && p.heads_q.is_multiple_of(p.heads_kv)), "heads {}/{} accepted", p.heads_q, p.heads_kv);
    ensure!(p.seqlen_q <= MAX_SEQLEN && p.seqlen_k <= MAX_SEQLEN, "seqlens {}/{} past {MAX_SEQLEN} accepted", p.seqlen_q, p.seqlen_k);
    let scale = p.softmax_scale.unwrap_or(1.0 / (d as f32).sqrt());
    ensure!(scale > 0.0 && (scale * std::f32::consts::LOG2_E).is_finite(), "softmax scale {scale} accepted");
    ensure!(p.num_splits.is_none_or(|n| n <= MAX_SPLITS), "num_splits {:?} accepted", p.num_splits);
    let paged = match p.layout.kv {
        Kv::Paged(pg) => {
            let g = pg.pages;
            ensure!(g.page_size.is_power_of_two() && (16..=1 << 20).contains(&g.page_size), "page_size {} accepted", g.page_size);
            ensure!((1..=i32::MAX as usize).contains(&g.num_pages), "num_pages {} accepted", g.num_pages);
            ensure!((1..=i32::MAX as usize).contains(&g.pages_per_seq), "pages_per_seq {} accepted", g.pages_per_seq);
            ensure!(
                p.seqlen_k as u128 <= g.pages_per_seq as u128 * g.page_size as u128,
                "{} keys accepted for table rows of {} pages of {} rows",
                p.seqlen_k,
                g.pages_per_seq,
                g.page_size
            );
            // Paged calls run on either path.
            Some(pg)
        }
        Kv::Tensors => None,
        _ => unreachable!("a layout the model does not know"),
    };
    let packed = match &p.layout.rows {
        Rows::Packed(o) => Some(varlen_totals(p, o, paged.is_some())?),
        Rows::Batched => None,
        _ => unreachable!("a layout the model does not know"),
    };
    let empty = p.batch == 0 || p.heads_q == 0 || p.seqlen_q == 0 || packed.is_some_and(|(tq, _)| tq == 0);
    let zero = Strides { batch: 0, row: 0, head: 0 };
    let strides = if empty { [zero; 4] } else { call_strides(p).map_err(|t| format!("{t}: default strides overflow 64 bits, yet accepted"))? };
    let reads_kv = p.seqlen_k > 0 && packed.is_none_or(|(_, tk)| paged.is_some() || tk > 0);
    let group = p.heads_q.checked_div(p.heads_kv).unwrap_or(1).max(1);
    let mods = read_mods(p, paged.is_some())?;
    Ok(Model { d, dv, kd: d.max(dv), group, packed, paged, strides, empty, reads_kv, mods })
}

/// The scale of the scores: the given one, or `1 / sqrt(head_dim)`.
fn call_scale(p: &AttentionParams) -> f32 {
    p.softmax_scale.unwrap_or(1.0 / (p.head_dim as f32).sqrt())
}

/// True for plain attention: no window side, softcap, ALiBi or sinks.
fn plain_mods(m: &Mods) -> bool {
    m.window.left.is_none() && m.window.right.is_none() && m.softcap.is_none() && m.alibi.is_none() && m.sinks.is_none() && m.blocks.is_none() && m.user.is_none()
}

/// The softcap's factors as the kernels take them, `(2 log2(e) scale / cap, cap / scale)`, in
/// f32 and in that order (the documented formulas).
fn softcap_factors(cap: f32, scale: f32) -> (f32, f32) {
    (2.0 * std::f32::consts::LOG2_E * scale / cap, cap / scale)
}

/// True for a softcap the kernels can apply at `scale`: positive, both factors finite and
/// nonzero.
fn softcap_ok(cap: f32, scale: f32) -> bool {
    let (pre, post) = softcap_factors(cap, scale);
    cap > 0.0 && pre.is_finite() && pre > 0.0 && post.is_finite() && post > 0.0
}

/// A call's modifications, which the planner promises to have validated (a softcap the kernels
/// can apply, no paged cache, no split asked for), as the kernels take them: each window side
/// clamped to [`WINDOW_UNBOUNDED`] (`None`: unbounded), the right one 0 under causal masking;
/// the softcap's factors (0 without one); ALiBi's `1 / scale` (slopes are in units of the
/// scaled scores, the kernels' scores raw), `heads_q` slopes between batch entries when there
/// is one per entry, else 0; the arrays' addresses (0: none). `None` for a plain call.
fn read_mods(p: &AttentionParams, paged: bool) -> Result<Option<ModParams>, String> {
    let mods = &p.mods;
    if plain_mods(mods) {
        return Ok(None);
    }
    let scale = call_scale(p);
    if let Some(cap) = mods.softcap {
        ensure!(softcap_ok(cap, scale), "softcap {cap} accepted at scale {scale}");
    }
    ensure!(!paged, "modifications on a paged call accepted: {mods:?}");
    ensure!(p.num_splits.is_none_or(|n| n <= 1), "num_splits {:?} accepted with modifications", p.num_splits);
    let side = |w: Option<usize>| match w {
        Some(x) if x < WINDOW_UNBOUNDED as usize => x as i32,
        _ => WINDOW_UNBOUNDED,
    };
    let (softcap_pre, softcap_post) = mods.softcap.map_or((0.0, 0.0), |cap| softcap_factors(cap, scale));
    Ok(Some(ModParams {
        alibi: mods.alibi.map_or(0, |a| a.slopes.buffer().ptr),
        sinks: mods.sinks.map_or(0, |s| s.buffer().ptr),
        window_left: side(mods.window.left),
        window_right: if p.causal { 0 } else { side(mods.window.right) },
        softcap_pre,
        softcap_post,
        alibi_scale: 1.0 / scale,
        // Saturated: a call of more heads than u32 holds is refused for its heads_q field.
        alibi_batch_stride: if mods.alibi.is_some_and(|a| a.per_batch) { p.heads_q.min(u32::MAX as usize) as u32 } else { 0 },
        // A block mask's rows: one per query block, heads then batch entries outside, a shared
        // dimension not advancing.
        blocks: mods.blocks.map_or(flashrs::BlockSparse::NONE, |m| flashrs::BlockSparse {
            counts: m.counts.buffer().ptr,
            indices: m.indices.buffer().ptr,
            full_counts: m.full.map_or(0, |f| f.0.buffer().ptr),
            full_indices: m.full.map_or(0, |f| f.1.buffer().ptr),
            batch_stride: if m.batch > 1 { (m.q_blocks * m.heads) as u32 } else { 0 },
            head_stride: if m.heads > 1 { m.q_blocks as u32 } else { 0 },
            kv_blocks: m.kv_blocks as u32,
            _pad: 0,
        }),
        user: mods.user.map_or(0, |u| u.buffer().ptr),
    }))
}

/// The modification kernels' `mma.sync` configuration when none is forced: the first of their
/// table for the padded head_dim that fits the target.
fn mods_config(padded: usize, t: &Target) -> Option<TileConfig> {
    MODS_CONFIGS.iter().copied().find(|c| c.head_dim == padded && fits(c, t))
}

/// The modification kernels' Hopper configuration when none is forced: the default for the
/// head_dim, but two consumer warpgroups at head_dim 64 (three leave too few registers).
fn sm90_mods_config(d: usize) -> Option<HopperConfig> {
    sm90::default_config(d).map(|c| if c.head_dim == 64 { HopperConfig { consumers: 2, ..c } } else { c })
}

/// True when Hopper configuration `c` holds Q and K of head_dim `d` and V of `dv`.
fn sm90_holds(c: &HopperConfig, d: usize, dv: usize) -> bool {
    c.head_dim >= d && c.head_dim_v >= dv
}

/// The Hopper kernel of a pair of head dimensions' own (V narrower than Q and K, DeepSeek's
/// 192 / 128): the value-dims configuration whose padded pair holds (`d`, `dv`), each within
/// one 64-column padding step of it; `None` where there is none.
fn sm90_native(d: usize, dv: usize) -> Option<HopperConfig> {
    let within = |x: usize, padded: usize| x <= padded && x + 64 > padded;
    sm90::VALUE_DIMS.iter().map(|&i| sm90::CONFIGS[i]).find(|c| within(d, c.head_dim) && within(dv, c.head_dim_v))
}

/// The Hopper configuration of an unforced call `p` on `t`: the pair's own kernel, else the
/// default (or, with modifications, the modification one) for the wider of head_dim and
/// head_dim_v; plain fixed-length calls of head_dim 64 take two consumers of 64 rows (serial)
/// when causal with at most 1024 keys, and (pipelined) when not causal where 192-row tiles would
/// make at most two CTAs per SM.
fn sm90_config(m: &Model, p: &AttentionParams, t: &Target) -> Option<HopperConfig> {
    if m.paged.is_some() {
        // Paged kernels: their own table (of the wider head dimension).
        return sm90::paged_config(m.kd);
    }
    let plain64 = m.mods.is_none() && m.packed.is_none() && m.kd == 64;
    let short = plain64 && p.causal && p.seqlen_k <= 1024;
    let small = plain64 && !p.causal && (p.batch as u128 * p.heads_q as u128 * p.seqlen_q.div_ceil(192) as u128) <= 2 * t.sm_count as u128;
    let two = HopperConfig { consumers: 2, ..sm90::default_config(64).unwrap() };
    sm90_native(m.d, m.dv).or(match () {
        _ if m.mods.is_some() => sm90_mods_config(m.kd),
        _ if short => Some(HopperConfig { pipelined: false, ..two }),
        _ if small => Some(two),
        _ => sm90::default_config(m.kd),
    })
}

/// True for a kernel that compiles in the attention modifications.
fn kernel_mods(k: &Kernel) -> bool {
    matches!(k, Kernel::Mma { flavor: Flavor::Mods | Flavor::Sparse, .. } | Kernel::Sm90 { flavor: Flavor::Mods | Flavor::Sparse, .. })
}

/// True when the Hopper kernels' tensor maps can describe the call's tensors: every stride of
/// a dimension of more than one index nonzero and below 2^40 bytes (negative ones are the
/// buffer checks' to refuse).
fn tma_describable(p: &AttentionParams, m: &Model) -> bool {
    if m.empty {
        return true;
    }
    let (nb, rows_q, rows_k) = match m.packed {
        Some((tq, tk)) => (1, tq, tk),
        None => (p.batch, p.seqlen_q, p.seqlen_k),
    };
    let q_ext = [nb, rows_q, p.heads_q];
    // Paged caches: pages of rows, mapped wherever the call has keys.
    let (k_ext, kv_mapped) = match m.paged {
        Some(pg) => ([pg.pages.num_pages, pg.pages.page_size, p.heads_kv], p.seqlen_k > 0),
        // K and V maps are made wherever there are key rows (packed ones, or the sequences').
        None => ([nb, rows_k, p.heads_kv], rows_k > 0),
    };
    let tensors = [(m.strides[0], q_ext, true, false), (m.strides[1], k_ext, kv_mapped, true), (m.strides[2], k_ext, kv_mapped, true), (m.strides[3], q_ext, true, false)];
    tensors.iter().all(|&(s, ext, used, kv)| {
        let st = [if m.packed.is_some() && !(kv && m.paged.is_some()) { 0 } else { s.batch }, s.row, s.head];
        !used || ext.contains(&0) || (0..3).all(|i| ext[i] <= 1 || st[i] < 0 || (st[i] != 0 && (2 * st[i] as i128) < TMA_MAX_STRIDE_BYTES))
    })
}

// ------------------------------------------------------------------------------------------
// The model of an accepted plan.

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
        ensure!(self.ptr == buf.ptr, "{n}: kernel address {:#x} is not the buffer's {:#x}", self.ptr, buf.ptr);
        ensure!(self.ptr != 0, "{n}: null address");
        let (lo, hi) = self.bounds();
        ensure!(lo >= 0, "{n}: element offset {lo} below the buffer");
        ensure!(hi < buf.len as i128, "{n}: element offset {hi} past the buffer's {} elements", buf.len);
        let (start, end) = (self.ptr as i128 + 2 * lo, self.ptr as i128 + 2 * (hi + 1));
        ensure!(end <= u64::MAX as i128 + 1, "{n}: addresses wrap past 2^64");
        // 16-byte vectors: each row starts aligned (columns go in whole chunks of 8, and
        // head_dim is a multiple of 8, so no chunk crosses past head_dim).
        ensure!(self.ptr.is_multiple_of(16) && self.cols.is_multiple_of(8), "{n}: base {:#x} or head_dim {} breaks 16-byte chunks", self.ptr, self.cols);
        for i in 0..3 {
            ensure!(self.extents[i] <= 1 || (2 * self.strides[i] as i128).rem_euclid(16) == 0, "{n}: stride {} breaks 16-byte alignment", self.strides[i]);
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

/// A tensor's name and the byte range `[start, end)` a launch touches in it.
type Range = (&'static str, (i128, i128));

/// The byte range [start, end) of `count` 4-byte entries (i32 indices, f32 slopes or sinks)
/// the kernel reads from `buf` at `ptr`.
fn index_range(name: &'static str, ptr: u64, buf: BufferRef, count: u128) -> Result<Range, String> {
    ensure!(ptr == buf.ptr, "{name}: kernel address {ptr:#x} is not the buffer's {:#x}", buf.ptr);
    ensure!(ptr != 0, "{name}: null address");
    ensure!(ptr.is_multiple_of(4), "{name}: {ptr:#x} not 4-byte aligned");
    ensure!(count <= buf.len as u128, "{name}: entry {} past the buffer's {} elements", count - 1, buf.len);
    let end = ptr as i128 + 4 * count as i128;
    ensure!(end <= u64::MAX as i128 + 1, "{name}: addresses wrap past 2^64");
    Ok((name, (ptr as i128, end)))
}

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
    for (i, &(w, (w0, w1))) in writes.iter().enumerate() {
        for &(other, (s0, s1)) in writes[i + 1..].iter().chain(reads.iter()) {
            ensure!(w1 <= s0 || s1 <= w0, "{w} [{w0:#x}, {w1:#x}) overlaps {other} [{s0:#x}, {s1:#x})");
        }
    }
    Ok(())
}

/// The independent check of a plan the planner accepted for `c`: the call valid as documented,
/// the kernel one the target runs (instantiated, its shared memory within the target's, Hopper
/// only on sm_90a) and the one the selection rules name, the geometry, every kernel parameter
/// equal to its true value, and every address the kernel (kernels-gpu/src/fwd, hopper) reads or
/// writes.
///
/// The `mma.sync` kernel, per CTA `block` of the 1-D grid: split `block % num_splits` of query
/// block `block / num_splits` (`flashrs_abi::grid::tile_for_block`: a (batch, head, query
/// block)), K/V head `head / group`. It reads Q rows of its block below `seqlen_q` and K/V rows
/// below `seqlen_k` (in a paged call through the block table: entries `b * table_stride + r >>
/// page_shift` for rows `r < seqlen_k`, pages clamped to `last_page`, rows `r % page_size`; in
/// a variable-length call within `[0, total)` from its sequence's first row), writes output
/// rows below `seqlen_q` and lse elements `(batch * heads_q + head) * seqlen_q + row` (`head *
/// total_q + row` packed), all in 16-byte chunks of columns `0..head_dim` (Q and K) or
/// `0..head_dim_v` (V and the output; the kernel zero-fills the columns past either up to its
/// padded head_dim). Over the grid that is the box `batch x rows x heads x columns` of each
/// tensor. A split writes f32 partial rows
/// `(split * batch * heads_q + bh) * seqlen_q + row` of the workspace and counts in at counter
/// `block / num_splits`. The Hopper kernels read the same boxes through tensor maps and write
/// the same rows.
fn verify_plan(c: &Case, plan: &LaunchPlan) -> Result<(), String> {
    let m = read_call(&c.p)?;
    verify_kernel(c, &m, plan)?;
    if m.empty {
        ensure!(plan.is_empty() && plan.tiles == 0, "a call without rows launches {} CTAs ({} tiles)", plan.grid, plan.tiles);
        ensure!(plan.split.is_none() && !plan.persistent && plan.upload.is_none(), "an empty plan with a workspace or upload: {plan:?}");
        return Ok(());
    }
    ensure!(!plan.is_empty(), "an empty plan for a call with rows");
    verify_launch(c, &m, plan)
}

/// The kernel: one the target runs, of the family asked for, and the one the selection rules
/// (select.rs) name.
fn verify_kernel(c: &Case, m: &Model, plan: &LaunchPlan) -> Result<(), String> {
    let (p, t) = (&c.p, &c.t);
    let k = plan.kernel;
    let (_, bn, threads, smem, _) = geometry_of(&k);
    let tn = target_name(t);
    let mods = m.mods.is_some();
    ensure!(plan.arch == t.arch, "a plan for {:?} on the {tn}", plan.arch);
    // Only the modification kernels apply the modifications; the plain ones are the fast path.
    ensure!(kernel_mods(&k) == mods, "kernel {k} {} modifications for a call {} them", if mods { "without" } else { "with" }, if mods { "with" } else { "without" });
    // Block masks: the block-sparse kernels, and only for them.
    let sparse = m.mods.is_some_and(|x| x.blocks.counts != 0);
    ensure!(matches!(k, Kernel::Mma { flavor: Flavor::Sparse, .. } | Kernel::Sm90 { flavor: Flavor::Sparse, .. }) == sparse, "kernel {k} for a call {} a block mask", if sparse { "with" } else { "without" });
    ensure!(k.is_instantiated(), "kernel {k} is not instantiated");
    ensure!(!matches!(k, Kernel::Sm90 { .. }) || t.arch == Arch::Sm90a, "Hopper kernel {k} planned for the {tn}, which has no sm_90a module");
    ensure!(k.dtype() == c.b.dtype, "kernel {k} for {:?} tensors", c.b.dtype);
    ensure!(plan.block as usize == threads, "block {} for {k} ({threads} threads)", plan.block);
    ensure!(plan.smem as usize == smem, "shared memory {} for {k} (its tiles take {smem})", plan.smem);
    ensure!(smem <= t.max_smem_per_block as usize, "kernel {k} needs {smem} bytes of shared memory, the {tn} allows {}", t.max_smem_per_block);
    // The kernel holds Q/K and V (head_dim_v narrower or wider).
    let (kd, kdv) = kernel_dims(&k);
    ensure!(kd >= m.d && kdv >= m.dv && kd % 64 == 0 && kdv % 64 == 0, "kernel {k} computes head_dim {kd}/{kdv} for head_dim {} and head_dim_v {}", m.d, m.dv);
    let pd = padded(m.kd);
    let splits = plan.split.as_ref().map_or(1, |s| s.num_splits as usize);
    let block_rows = if plan.packs_gqa { m.group } else { p.seqlen_q };
    let forced = match p.kernel {
        KernelChoice::MmaSync { config } => config,
        _ => None,
    };
    match (p.kernel, k) {
        (KernelChoice::Wgmma { config, persistent }, Kernel::Sm90 { config: kc, .. }) => {
            let want = config.or(sm90_config(m, p, t));
            ensure!(want == Some(kc), "wgmma config {kc:?} planned for {config:?}");
            if let Some(want) = persistent {
                ensure!(m.empty || plan.persistent == want, "persistent {want} asked, {} planned", plan.persistent);
            }
        }
        (KernelChoice::Wgmma { .. }, _) => return Err(format!("the wgmma path planned {k}")),
        (KernelChoice::MmaSync { config }, Kernel::Mma { config: kc, .. }) => {
            if let Some(f) = config {
                ensure!(kc == f, "forced config {f:?} not used ({kc:?})");
            }
        }
        (KernelChoice::MmaSync { .. }, _) => return Err(format!("the mma.sync path planned {k}")),
        (KernelChoice::Auto, _) => {}
        _ => unreachable!("a kernel choice the model does not know: {:?}", p.kernel),
    }
    // GQA packing: one query row per sequence, GQA/MQA, fixed-length, mma.sync, no
    // modifications (ALiBi slopes and sinks are per query head, one CTA's rows one head's).
    let pack = !matches!(p.kernel, KernelChoice::Wgmma { .. }) && p.seqlen_q == 1 && p.heads_q > p.heads_kv && m.packed.is_none() && !mods;
    ensure!(plan.packs_gqa == pack, "GQA packing {} for seqlen_q {}, heads {}/{}, {:?}", plan.packs_gqa, p.seqlen_q, p.heads_q, p.heads_kv, p.kernel);
    let split_cfg = match forced {
        Some(f) if f.head_dim == pd && SPLIT_CONFIGS.contains(&f) => Some(f),
        _ => split_config(pd, block_rows, t),
    };
    match k {
        Kernel::Mma { variant, config, .. } => {
            let kind = |yes: bool, what: &str| if yes { what.to_string() } else { format!("non-{what}") };
            ensure!(variant.varlen() == m.packed.is_some(), "kernel {k} for a {} call", kind(m.packed.is_some(), "variable-length"));
            ensure!(variant.paged() == m.paged.is_some(), "kernel {k} for a {} call", kind(m.paged.is_some(), "paged"));
            ensure!(splits == 1 || variant.split(), "{splits} splits on {k}, which does not split");
            ensure!(!plan.persistent && plan.packed_rows.is_none(), "an mma.sync plan persistent or with packed rows: {plan:?}");
            match variant {
                _ if mods => verify_mods_kernel(m, k, forced, t)?,
                Variant::Plain if forced.is_none() => {
                    let want = plain_config(m.kd, block_rows, t);
                    ensure!(want == Some(config), "config {config:?} for head_dim {} in blocks of {block_rows} rows on the {tn} (want {want:?})", m.kd);
                }
                Variant::Plain => {}
                Variant::Varlen => {
                    // A forced configuration of the variable-length table for the head_dim, else
                    // the table's first that fits.
                    let want = match forced {
                        Some(f) if f.head_dim == pd && VARLEN_CONFIGS.contains(&f) => Some(f),
                        _ => varlen_config(pd, t),
                    };
                    ensure!(want == Some(config), "config {config:?} for a variable-length call of head_dim {} on the {tn} (want {want:?})", m.kd);
                }
                _ => ensure!(Some(config) == split_cfg, "config {config:?} of {k} (want the split configuration {split_cfg:?})"),
            }
            // Auto takes the Hopper kernels on sm_90a wherever they take the call: paged ones
            // where no decode tile (16 rows) holds the rows and the call is unsplit (no split
            // asked, and too many rows for an automatic one), 16-bit.
            let unsplit = splits == 1 && p.num_splits.map_or(p.seqlen_q > 16, |n| n <= 1);
            let paged_prefill = variant.paged() && unsplit && config.block_m > 16 && !matches!(k, Kernel::Mma { kv: Some(_), .. });
            if matches!(p.kernel, KernelChoice::Auto) && t.arch == Arch::Sm90a && (matches!(variant, Variant::Plain | Variant::Varlen) || paged_prefill) && !plan.packs_gqa {
                ensure!(!tma_describable(p, m), "Auto planned {k} on the {tn} although the Hopper kernel takes the call");
            }
        }
        Kernel::Sm90 { varlen, paged, config, .. } => {
            ensure!(varlen == m.packed.is_some() && paged == m.paged.is_some(), "Hopper kernel {k} for {:?}", p.layout);
            ensure!(splits == 1, "{splits} splits on {k}");
            ensure!(!paged || (sm90::has_paged(&config) && !mods), "paged Hopper kernel of a configuration without one: {k}");
            // Plain: only the defaults have variable-length twins; modifications: the modification
            // configurations, fixed-length and variable-length alike.
            ensure!(mods || paged || !varlen || sm90::is_default(&config), "variable-length Hopper kernel of a non-default configuration: {k}");
            ensure!(!mods || sm90::has_mods(&config), "Hopper kernel with modifications in a configuration without them: {k}");
            if matches!(p.kernel, KernelChoice::Auto) {
                let want = sm90_config(m, p, t);
                ensure!(want == Some(config), "Hopper config {config:?} for head_dim {} and head_dim_v {} under Auto (want {want:?})", m.d, m.dv);
            }
            if !m.empty && !matches!(p.kernel, KernelChoice::Wgmma { persistent: Some(_), .. }) {
                // Causal and block-sparse calls visit a part of the keys: short work tiles.
                let sparse = p.mods.blocks.is_some();
                let pays = sm90_q_tiles(&config) == 2 && (p.causal || sparse || p.seqlen_k <= PERSISTENT_MAX_KEYS);
                ensure!(plan.persistent == pays, "persistent {} for {k} (causal {}, block mask {sparse}, {} keys)", plan.persistent, p.causal, p.seqlen_k);
            }
            let rows = m.packed.map(|(tq, tk)| [tq, tk]);
            ensure!(m.empty || plan.packed_rows == rows, "Hopper packed rows {:?}, want {rows:?}", plan.packed_rows);
        }
        Kernel::Bwd { .. } | Kernel::Merge { .. } => ensure!(false, "the forward planner chose a backward or merge kernel: {k}"),
    }
    ensure!(!mods || splits == 1, "{splits} splits of a call with modifications ({k})");
    if m.empty {
        return Ok(());
    }
    // Split counts: at most the forced count, and at least two where forced with two key tiles;
    // automatic ones only for decode shapes, with at least two key tiles each.
    match p.num_splits {
        Some(n) => {
            ensure!(splits <= n.max(1), "{splits} splits for num_splits {n}");
            let tiles = split_cfg.map_or(0, |c| p.seqlen_k.div_ceil(c.block_n));
            ensure!(n < 2 || tiles < 2 || splits >= 2, "num_splits {n} over {tiles} key tiles planned unsplit ({k})");
        }
        None if splits > 1 => {
            ensure!((1..=16).contains(&p.seqlen_q), "an automatic split of a call of {} query rows", p.seqlen_q);
            let most = (p.seqlen_k.div_ceil(bn) / 2).max(1);
            ensure!(splits <= most, "{splits} automatic splits of {} keys in tiles of {bn}: fewer than two tiles each", p.seqlen_k);
        }
        None => {}
    }
    Ok(())
}

/// The `mma.sync` kernel of a call with modifications: the plain or variable-length variant
/// (never split, paged or a decode tile), in the forced configuration, which must be one of the
/// modification table's for the padded head_dim, else the table's first that fits the target.
fn verify_mods_kernel(m: &Model, k: Kernel, forced: Option<TileConfig>, t: &Target) -> Result<(), String> {
    let Kernel::Mma { variant, config, .. } = k else { unreachable!("an mma.sync kernel") };
    let want_variant = if m.packed.is_some() { Variant::Varlen } else { Variant::Plain };
    ensure!(variant == want_variant, "kernel {k} for a call with modifications (want the {want_variant:?} variant)");
    let pd = padded(m.kd);
    if let Some(f) = forced {
        ensure!(f.head_dim == pd && MODS_CONFIGS.contains(&f), "forced config {f:?} accepted for a call with modifications of head_dim {}", m.kd);
    }
    let want = forced.or_else(|| mods_config(pd, t));
    ensure!(want == Some(config), "config {config:?} for a call with modifications of head_dim {} on the {} (want {want:?})", m.kd, target_name(t));
    Ok(())
}

/// The launch of a non-empty call: geometry, parameters, addresses, workspace, tensor maps.
fn verify_launch(c: &Case, m: &Model, plan: &LaunchPlan) -> Result<(), String> {
    let (p, t) = (&c.p, &c.t);
    let k = plan.kernel;
    let (bm, bn, _, _, _) = geometry_of(&k);
    let f = &plan.params;
    // GQA packing: the kernel sees heads_kv heads of `group` rows.
    let (heads, rows) = if plan.packs_gqa { (p.heads_kv, m.group) } else { (p.heads_q, p.seqlen_q) };
    ensure!(rows <= MAX_SEQLEN, "{rows} rows per query block accepted");
    let m_blocks = rows.div_ceil(bm) as u128;
    let splits = plan.split.as_ref().map_or(1, |s| s.num_splits as u128);
    let tiles = (p.batch as u128).checked_mul(heads as u128).and_then(|x| x.checked_mul(m_blocks * splits));
    let tiles = tiles.filter(|&t| t <= i32::MAX as u128).ok_or_else(|| format!("{} x {heads} x {m_blocks} x {splits} CTAs past the grid limit", p.batch))?;
    ensure!(plan.tiles as u128 == tiles, "{} tiles for {tiles} (batch {} x {heads} heads x {m_blocks} blocks x {splits} splits)", plan.tiles, p.batch);
    let grid = if plan.persistent { tiles.min(t.sm_count as u128) } else { tiles };
    ensure!(plan.grid as u128 == grid, "grid {} for {tiles} tiles (persistent {}, {} SMs)", plan.grid, plan.persistent, t.sm_count);
    if plan.packs_gqa {
        verify_packing(c, m, plan)?;
    }

    // Every kernel parameter its true value.
    let field = |what: &str, got: u32, want: u128| -> Result<(), String> {
        ensure!(want <= u32::MAX as u128 && got as u128 == want, "params.{what} = {got}, want {want}");
        Ok(())
    };
    field("batch", f.batch, p.batch as u128)?;
    field("heads_q", f.heads_q, heads as u128)?;
    field("group", f.group, if plan.packs_gqa { 1 } else { m.group as u128 })?;
    field("seqlen_q", f.seqlen_q, rows as u128)?;
    field("seqlen_k", f.seqlen_k, p.seqlen_k as u128)?;
    field("head_dim", f.head_dim, m.d as u128)?;
    field("head_dim_v", f.head_dim_v, m.dv as u128)?;
    field("m_blocks", f.m_blocks, m_blocks)?;
    field("num_splits", f.num_splits, splits)?;
    field("causal", f.causal, (p.causal && !plan.packs_gqa) as u128)?;
    let scale = p.softmax_scale.unwrap_or(1.0 / (m.d as f32).sqrt()) * std::f32::consts::LOG2_E;
    ensure!(f.scale_log2.to_bits() == scale.to_bits(), "params.scale_log2 = {}, want {scale}", f.scale_log2);
    verify_mod_params(m, &f.mods)?;
    ensure!(f.q == c.b.q.ptr && f.o == c.b.o.ptr, "params.q/o = {:#x}/{:#x}, want the buffers'", f.q, f.o);
    if m.reads_kv {
        ensure!(f.k == c.b.k.ptr && f.v == c.b.v.ptr, "params.k/v = {:#x}/{:#x}, want the buffers'", f.k, f.v);
    }
    let varlen = m.packed.is_some();
    let s = m.strides.map(|s| [s.batch, s.row, s.head]);
    let unbatched = |s: [i64; 3], packed: bool| if packed { [0, s[1], s[2]] } else { s };
    let packed_heads = |s: [i64; 3]| -> Result<[i64; 3], String> {
        if !plan.packs_gqa {
            return Ok(s);
        }
        let h = i64::try_from(s[2] as i128 * m.group as i128).map_err(|_| format!("a packed head stride {} x {} past 64 bits", s[2], m.group))?;
        Ok([s[0], s[2], h])
    };
    let (want_q, want_o) = (packed_heads(unbatched(s[0], varlen))?, packed_heads(unbatched(s[3], varlen))?);
    ensure!(f.q_strides == want_q && f.o_strides == want_o, "params q/o strides {:?}/{:?}, want {want_q:?}/{want_o:?}", f.q_strides, f.o_strides);
    if m.reads_kv {
        let kv_packed = varlen && m.paged.is_none();
        let (want_k, want_v) = (unbatched(s[1], kv_packed), unbatched(s[2], kv_packed));
        ensure!(f.k_strides == want_k && f.v_strides == want_v, "params k/v strides {:?}/{:?}, want {want_k:?}/{want_v:?}", f.k_strides, f.v_strides);
    }
    ensure!(f.o_accum == 0 && f.lse_accum == 0 && f.split_counters == 0 && f.tile_counter == 0, "workspace addresses in a plan: {f:?}");
    let pairs = p.batch as u128 * heads as u128;
    ensure!(f.interleave >= 1 && f.interleave as u128 <= pairs, "interleave {} for {pairs} (batch, head) pairs", f.interleave);
    ensure!(f.interleave == 1 || f.causal == 1, "interleave {} without causal masking", f.interleave);
    // Split-capable kernels walk `split_tiles` key tiles per split, unsplit too.
    let key_tiles = (p.seqlen_k as u128).div_ceil(bn as u128);
    ensure!(f.split_tiles >= 1 && f.split_tiles as u128 * splits >= key_tiles, "{splits} splits of {} tiles cover {} keys in tiles of {bn}", f.split_tiles, p.seqlen_k);
    ensure!(splits == 1 || (splits - 1) * (f.split_tiles as u128) < key_tiles, "an empty split: {splits} of {} tiles for {key_tiles} tiles", f.split_tiles);
    // The kernels' 32-bit mask arithmetic (kernels-gpu/src/mask.rs): rows reach m_blocks *
    // block_m <= seqlen_q + block_m, columns keys + 2 * block_n, the causal bounds below
    // seqlen_k + block_m + 1.
    let reach = rows.max(p.seqlen_k) as u128 + 2 * bm.max(bn) as u128 + 1;
    ensure!(reach <= i32::MAX as u128, "32-bit mask arithmetic overflows ({reach})");

    match (&p.layout.rows, m.packed) {
        (Rows::Packed(o), Some((tq, tk))) => {
            field("total_q", f.total_q, tq as u128)?;
            if m.paged.is_none() {
                field("total_k", f.total_k, tk as u128)?;
            }
            match o {
                Offsets::Host { cu_seqlens_q, cu_seqlens_k } => {
                    ensure!(f.cu_seqlens_q == 0 && f.cu_seqlens_k == 0, "host offsets, but the plan points at {:#x}/{:#x}", f.cu_seqlens_q, f.cu_seqlens_k);
                    let want = if m.paged.is_some() && cu_seqlens_k.is_empty() { cu_seqlens_q.clone() } else { [&cu_seqlens_q[..], &cu_seqlens_k[..]].concat() };
                    ensure!(plan.upload.as_ref() == Some(&want), "the plan carries offsets {:?} to upload, want {want:?}", plan.upload);
                }
                Offsets::Device(dev) => {
                    ensure!(plan.upload.is_none(), "a device-offset plan carries offsets to upload: {:?}", plan.upload);
                    let want = [dev.cu_seqlens_q.buffer().ptr, dev.cu_seqlens_k.map_or(0, |k| k.buffer().ptr)];
                    ensure!([f.cu_seqlens_q, f.cu_seqlens_k] == want, "params offsets {:#x}/{:#x} are not the buffer's {want:x?}", f.cu_seqlens_q, f.cu_seqlens_k);
                }
                _ => unreachable!("a layout the model does not know"),
            }
        }
        _ => ensure!(plan.upload.is_none() && f.cu_seqlens_q == 0 && f.cu_seqlens_k == 0, "offsets in a fixed-length plan: {:?}", plan.upload),
    }
    match m.paged {
        Some(pg) => {
            let g = pg.pages;
            field("table_stride", f.table_stride, g.pages_per_seq as u128)?;
            field("last_page", f.last_page, g.num_pages as u128 - 1)?;
            ensure!(f.page_shift < 31 && 1usize << f.page_shift == g.page_size, "params.page_shift {} for pages of {}", f.page_shift, g.page_size);
            let want = [pg.block_table.buffer().ptr, pg.seqused_k.map_or(0, |u| u.buffer().ptr)];
            ensure!([f.block_table, f.seqused_k] == want, "params table/seqused_k {:#x}/{:#x} are not the buffers' {want:x?}", f.block_table, f.seqused_k);
        }
        None => ensure!(f.block_table == 0 && f.seqused_k == 0, "a block table in an unpaged plan"),
    }
    if matches!(k, Kernel::Sm90 { .. }) {
        verify_tensor_maps(plan)?;
    }
    verify_addresses(c, m, plan)?;
    verify_split(plan)
}

/// The modification parameters: the model's for a call with modifications, every one off for a
/// plain call. Compared bit for bit, the f32 factors too: the documented formulas evaluated in
/// f32 give exactly one value.
fn verify_mod_params(m: &Model, got: &ModParams) -> Result<(), String> {
    // A plain call: every modification off at its neutral value (the ABI's `NONE`).
    let want = m.mods.unwrap_or(ModParams::NONE);
    let fields = [
        ("alibi", got.alibi, want.alibi),
        ("sinks", got.sinks, want.sinks),
        ("window_left", got.window_left as u64, want.window_left as u64),
        ("window_right", got.window_right as u64, want.window_right as u64),
        ("softcap_pre", got.softcap_pre.to_bits() as u64, want.softcap_pre.to_bits() as u64),
        ("softcap_post", got.softcap_post.to_bits() as u64, want.softcap_post.to_bits() as u64),
        ("alibi_scale", got.alibi_scale.to_bits() as u64, want.alibi_scale.to_bits() as u64),
        ("alibi_batch_stride", got.alibi_batch_stride as u64, want.alibi_batch_stride as u64),
        ("user", got.user, want.user),
    ];
    for (name, g, w) in fields {
        ensure!(g == w, "params.mods.{name} differs: {got:?}, want {want:?}");
    }
    Ok(())
}

/// GQA packing: kernel element (batch b, row r, head h) must be the call's query head `h *
/// group + r` (row 0) of batch b, for Q and the output; then the log-sum-exp element `(b *
/// heads + h) * group + r` is the call's `b * heads_q + h * group + r`, and the K/V head the
/// kernel reads for its head h (h / 1) is the call's for each of those query heads.
fn verify_packing(c: &Case, m: &Model, plan: &LaunchPlan) -> Result<(), String> {
    let (p, f) = (&c.p, &plan.params);
    let group = m.group;
    ensure!(
        f.seqlen_q as usize == group && f.heads_q as usize == p.heads_kv && f.group == 1 && f.causal == 0,
        "GQA-packed launch: params heads_q/seqlen_q/group/causal {}/{}/{}/{}, want {}/{group}/1/0",
        f.heads_q,
        f.seqlen_q,
        f.group,
        f.causal,
        p.heads_kv
    );
    for (name, kernel, call) in [("q", f.q_strides, m.strides[0]), ("out", f.o_strides, m.strides[3])] {
        let [kb, kr, kh] = kernel.map(|x| x as i128);
        let exact = (p.batch <= 1 || kb == call.batch as i128) && (group <= 1 || kr == call.head as i128) && (p.heads_kv <= 1 || kh == group as i128 * call.head as i128);
        ensure!(exact, "GQA-packed {name} strides {kernel:?} do not address the call's query heads (its strides {call:?}, group {group})");
    }
    Ok(())
}

/// Every element the launch reads or writes, within the buffers, aligned, and nothing written
/// sharing memory with anything else touched.
fn verify_addresses(c: &Case, m: &Model, plan: &LaunchPlan) -> Result<(), String> {
    let (p, bufs, f) = (&c.p, &c.b, &plan.params);
    // Q and K rows of head_dim columns, V and output rows of head_dim_v.
    let (bq, hq, d, dv) = (f.batch as u128, f.heads_q as u128, m.d as u128, m.dv as u128);
    // Packed rows: one batch entry of the totals.
    let (nb, rows_q) = match m.packed {
        Some((tq, _)) => {
            ensure!(f.q_strides[0] == 0 && f.o_strides[0] == 0, "packed Q/out with batch strides {}/{}", f.q_strides[0], f.o_strides[0]);
            (1, tq as u128)
        }
        None => (bq, f.seqlen_q as u128),
    };
    let q = Access { name: "q", ptr: f.q, strides: f.q_strides, extents: [nb, rows_q, hq], cols: d };
    let o = Access { name: "out", ptr: f.o, strides: f.o_strides, extents: [nb, rows_q, hq], cols: dv };
    let mut reads = vec![("q", q.check(bufs.q)?)];
    let out_range = o.check(bufs.o)?;
    if let Some(disjoint) = o.rows_disjoint() {
        ensure!(disjoint, "two output rows share memory (strides {:?})", f.o_strides);
    }
    if m.reads_kv {
        ensure!(f.group >= 1, "group 0");
        // K/V heads the query heads reach: head / group.
        let hkv = (hq - 1) / f.group as u128 + 1;
        ensure!(hkv <= p.heads_kv as u128, "query heads reach K/V head {} of {}", hkv - 1, p.heads_kv);
        let (kb, krows) = match m.paged {
            Some(_) => {
                // Table entries `r >> page_shift` for rows below seqlen_k stay in the row.
                ensure!(f.page_shift < 31, "page_shift {}", f.page_shift);
                let page = 1u128 << f.page_shift;
                ensure!(f.seqlen_k as u128 <= f.table_stride as u128 * page, "{} keys past table rows of {} pages of {page}", f.seqlen_k, f.table_stride);
                (f.last_page as u128 + 1, page)
            }
            None => match m.packed {
                Some((_, tk)) => {
                    ensure!(f.k_strides[0] == 0 && f.v_strides[0] == 0, "packed K/V with batch strides {}/{}", f.k_strides[0], f.v_strides[0]);
                    (1, tk as u128)
                }
                None => (bq, f.seqlen_k as u128),
            },
        };
        let k = Access { name: "k", ptr: f.k, strides: f.k_strides, extents: [kb, krows, hkv], cols: d };
        let v = Access { name: "v", ptr: f.v, strides: f.v_strides, extents: [kb, krows, hkv], cols: dv };
        reads.push(("k", k.check(bufs.k)?));
        reads.push(("v", v.check(bufs.v)?));
    }
    if let Some(pg) = m.paged {
        reads.push(index_range("block_table", f.block_table, pg.block_table.buffer(), bq * f.table_stride as u128)?);
        if let Some(u) = pg.seqused_k {
            reads.push(index_range("seqused_k", f.seqused_k, u.buffer(), bq)?);
        }
    }
    // The modifications' f32 arrays: a slope per query head (or per batch entry and query head),
    // a sink per query head (never GQA-packed: the kernel's heads are the call's).
    if let Some(a) = p.mods.alibi {
        let n = if a.per_batch { bq * hq } else { hq };
        reads.push(index_range("alibi_slopes", f.mods.alibi, a.slopes.buffer(), n)?);
    }
    if let Some(sinks) = p.mods.sinks {
        reads.push(index_range("sinks", f.mods.sinks, sinks.buffer(), hq)?);
    }
    if let Rows::Packed(Offsets::Device(dev)) = &p.layout.rows {
        reads.push(index_range("cu_seqlens_q", f.cu_seqlens_q, dev.cu_seqlens_q.buffer(), bq + 1)?);
        if let Some(k) = dev.cu_seqlens_k {
            reads.push(index_range("cu_seqlens_k", f.cu_seqlens_k, k.buffer(), bq + 1)?);
        }
    }
    // `[batch, heads, seqlen_q]`, or `[heads_q, total_q]` packed.
    let lse = match m.packed {
        Some((tq, _)) => hq * tq as u128,
        None => bq * hq * f.seqlen_q as u128,
    };
    lse_and_overlaps(bufs, f, lse, &reads, vec![("out", out_range)])
}

/// The split-KV workspace: partial rows `[num_splits, batch * heads, seqlen_q]` of the kernel's
/// padded head_dim and their log-sum-exps, indexed in 32 bits, and a counter per query block.
fn verify_split(plan: &LaunchPlan) -> Result<(), String> {
    let f = &plan.params;
    let Some(s) = &plan.split else {
        ensure!(f.num_splits == 1, "{} splits without a split workspace", f.num_splits);
        return Ok(());
    };
    let n = s.num_splits as u128;
    ensure!((2..=MAX_SPLITS as u128).contains(&n), "a split plan of {n} splits");
    let rows = f.batch as u128 * f.heads_q as u128 * f.seqlen_q as u128;
    ensure!(n * rows <= u32::MAX as u128, "the split workspace's 32-bit indices overflow: {n} splits of {rows} rows");
    ensure!((plan.tiles as u128).is_multiple_of(n) && s.counters_len as u128 == plan.tiles as u128 / n, "{} split counters for {} query blocks", s.counters_len, plan.tiles as u128 / n);
    let d = plan.kernel.head_dim() as u128;
    ensure!(s.o_accum_len as u128 == n * rows * d && s.lse_accum_len as u128 == n * rows, "split workspace {s:?} for {n} splits of {rows} rows of {d} columns");
    let ws = (s.counters_len, (s.o_accum_len + s.lse_accum_len) * 4);
    ensure!(plan.workspace() == ws, "workspace {:?}, want {ws:?}", plan.workspace());
    Ok(())
}

/// The Hopper launch's tensor maps (host/src/launch.rs): Q, and K and V where there are key
/// rows, as 4-D `[head_dim, rows, heads, batch]` views (V's of `head_dim_v` columns) whose
/// strides TMA takes (multiples of 16 bytes below 2^40, nonzero where a dimension has more than
/// one index), from 16-byte aligned addresses, in boxes of at most 256 rows.
fn verify_tensor_maps(plan: &LaunchPlan) -> Result<(), String> {
    let f = &plan.params;
    let (bm, bn, ..) = geometry_of(&plan.kernel);
    let (batch, rows_q, rows_k) = match plan.packed_rows {
        Some([q, k]) => (1, q, k),
        None => (f.batch as usize, f.seqlen_q as usize, f.seqlen_k as usize),
    };
    ensure!(f.group >= 1 && plan.persistent == (plan.workspace() == (2, 0)), "Hopper group {} / workspace {:?}", f.group, plan.workspace());
    let map = |name: &str, ptr: u64, strides: [i64; 3], [cols, batch, rows, heads]: [usize; 4], box_rows: usize| -> Result<(), String> {
        ensure!(ptr != 0 && ptr.is_multiple_of(16), "{name} tensor map at {ptr:#x}");
        for n in [cols, rows, heads, batch] {
            ensure!((1..=1usize << 32).contains(&n), "{name} tensor map of dimension {n}");
        }
        for (s, n, dim) in [(strides[1], rows, "row"), (strides[2], heads, "head"), (strides[0], batch, "batch")] {
            let bytes = 2 * s as i128;
            ensure!(n <= 1 || (bytes > 0 && bytes % 16 == 0 && bytes < TMA_MAX_STRIDE_BYTES), "{name} tensor map: {dim} stride {s} elements over {n} indices");
        }
        ensure!(box_rows <= 256, "{name} tensor map boxes of {box_rows} rows");
        Ok(())
    };
    let (d, dv) = (f.head_dim as usize, f.head_dim_v as usize);
    map("q", f.q, f.q_strides, [d, batch, rows_q, f.heads_q as usize], bm)?;
    let hkv = (f.heads_q / f.group) as usize;
    if matches!(plan.kernel, Kernel::Sm90 { paged: true, .. }) {
        // Pages of rows, in boxes that never cross a page.
        if f.seqlen_k > 0 {
            let (pages, page) = (f.last_page as usize + 1, 1usize << f.page_shift);
            map("k", f.k, f.k_strides, [d, pages, page, hkv], page.min(bn))?;
            map("v", f.v, f.v_strides, [dv, pages, page, hkv], page.min(bn))?;
        }
    } else if rows_k > 0 {
        map("k", f.k, f.k_strides, [d, batch, rows_k, hkv], bn)?;
        map("v", f.v, f.v_strides, [dv, batch, rows_k, hkv], bn)?;
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------
// Generators shared by the families.

/// What the planner must answer for a faulty call once it is emptied of rows (batch 0, or no
/// packed query rows; see [`make_empty`]).
#[derive(Clone, Copy, Debug, PartialEq)]
enum WhenEmpty {
    /// The same error: the fault is in the shape, caught whether or not there are rows.
    Same,
    /// An empty plan: the fault is in a buffer, which an empty call never touches.
    Accepted,
    /// Emptying removes the fault itself.
    Skip,
}

/// An injected fault: what it is, the error it must give, and the emptied call's answer.
type Fault = (&'static str, Want, WhenEmpty);

/// Empties a call without touching its buffers: no packed query rows (host offsets all 0,
/// device total_q 0), or batch 0.
fn make_empty(p: &mut AttentionParams) {
    let batch = p.batch;
    match &mut p.layout.rows {
        Rows::Packed(Offsets::Host { cu_seqlens_q, .. }) => *cu_seqlens_q = vec![0; batch + 1],
        Rows::Packed(Offsets::Device(d)) => d.total_q = 0,
        Rows::Batched => p.batch = 0,
        _ => unreachable!("a layout the model does not know"),
    }
}

/// V's head dimension for a valid unpaged call of head_dim `d`: mostly K's (unset, or set to
/// it), else any the kernels take (a multiple of 8 up to 256).
fn draw_dim_v(rng: &mut StdRng, d: usize) -> Option<usize> {
    match rng.random_range(0..10) {
        0..=5 => None,
        6 => Some(d),
        _ => Some(8 * rng.random_range(1..=32)),
    }
}

/// A supported head_dim_v other than `d` (a multiple of 8 up to 256).
fn other_dim_v(rng: &mut StdRng, d: usize) -> usize {
    let others: Vec<usize> = (1..=32).map(|i| 8 * i).filter(|&x| x != d).collect();
    pick(rng, &others)
}

/// A hostile head_dim_v: none, supported ones (narrower and wider than a head_dim), and ones
/// the kernels do not take.
fn hostile_dim_v(rng: &mut StdRng) -> Option<usize> {
    pick(rng, &[None, None, Some(0), Some(8), Some(64), Some(72), Some(128), Some(136), Some(192), Some(256), Some(12), Some(264), Some(512), Some(usize::MAX)])
}

/// An unsupported head_dim_v: zero, not a multiple of 8, past 256.
fn bad_dim_v(rng: &mut StdRng) -> usize {
    pick(rng, &[0, 1, 4, 7, 12, 100, 257, 264, 512, usize::MAX])
}

fn random_dtype(rng: &mut StdRng) -> DType {
    pick(rng, &[DType::F16, DType::Bf16])
}

fn scale(rng: &mut StdRng, mut p: AttentionParams<'static>) -> AttentionParams<'static> {
    if rng.random_bool(0.2) {
        p.softmax_scale = Some(pick(rng, &[f32::MIN_POSITIVE, 1e-3, 1.0, 1e4, 1e30, 2e38]));
    }
    p
}

/// Changes `p` through the builder's setters (`edit(&mut p, |b| b.config(c))`).
fn edit(p: &mut AttentionParams<'static>, f: impl FnOnce(AttentionParamsBuilder<'static>) -> AttentionParamsBuilder<'static>) {
    *p = f(p.to_builder()).build().unwrap();
}

/// A call with host offsets `cq` and `ck`: the batch and the longest sequences from them
/// (without key offsets no keys, unless `seqlen_k` is set after).
fn host_offsets(cq: &[i32], ck: &[i32]) -> AttentionParamsBuilder<'static> {
    AttentionParams::builder().seqlen_k(0).varlen(cq, ck)
}

/// Buffers of `dtype` tensors (q, k, v, out) and the lse, if any.
fn buffers(dtype: DType, [q, k, v, o]: [BufferRef; 4], lse: Option<BufferRef>) -> Buffers {
    let mut b = Buffers::new(dtype, q, k, v, o);
    b.lse = lse;
    b
}

/// Key counts of decode shapes: short to very long.
fn decode_keys(rng: &mut StdRng) -> usize {
    match rng.random_range(0..4) {
        0 => rng.random_range(1..=512),
        1 => rng.random_range(512..=4096),
        2 => rng.random_range(4096..=32768),
        _ => rng.random_range(32768..=131072),
    }
}

/// Start addresses of buffers of `bytes[i]` bytes: each in its own region (`regions[i]`, index
/// arrays a few 4-byte steps in), or back to back from region 1 (adjacent but disjoint, each
/// start rounded up to its alignment: 16 bytes for tensors, 4 for f32 and i32 arrays).
fn place(rng: &mut StdRng, bytes: &[u64], align: &[u64], regions: &[u64]) -> Vec<u64> {
    let tight = rng.random_bool(0.3);
    let mut at = REGION;
    let mut ptrs = Vec::with_capacity(bytes.len());
    for i in 0..bytes.len() {
        at = at.next_multiple_of(align[i]);
        let own = regions[i] * REGION + if align[i] == 4 && regions[i] >= 6 { 4 * rng.random_range(0..4) } else { 0 };
        ptrs.push(if tight { at } else { own });
        at += bytes[i];
    }
    ptrs
}

fn slack(rng: &mut StdRng) -> usize {
    if rng.random_bool(0.5) { 0 } else { rng.random_range(0..100) }
}

/// A kernel choice the target runs for an unforced call of head_dim `d` and head_dim_v `dv`:
/// Auto mostly, mma.sync, or (sm_90a) the Hopper kernels with or without a configuration (one
/// that holds both and that `hopper` keeps: the call's kind has a kernel of it) and
/// persistence.
fn kernel_choice(rng: &mut StdRng, t: &Target, (d, dv): (usize, usize), hopper: fn(&HopperConfig) -> bool) -> KernelChoice {
    match rng.random_range(0..8) {
        0 | 1 => KernelChoice::MmaSync { config: None },
        2 | 3 if t.arch == Arch::Sm90a => {
            let cfgs: Vec<HopperConfig> = sm90::CONFIGS.iter().copied().filter(|c| sm90_holds(c, d, dv) && hopper(c)).collect();
            let config = if rng.random_bool(0.5) { None } else { Some(pick(rng, &cfgs)) };
            KernelChoice::Wgmma { config, persistent: pick(rng, &[None, None, Some(true), Some(false)]) }
        }
        _ => KernelChoice::Auto,
    }
}

fn is_wgmma(p: &AttentionParams) -> bool {
    matches!(p.kernel, KernelChoice::Wgmma { .. })
}

/// Rows padded by a multiple of 8 elements, batches too.
fn padded_strides(rng: &mut StdRng, rows: usize, heads: usize, d: usize) -> Strides {
    let row = (heads * d + 8 * rng.random_range(0..4)) as i64;
    Strides { batch: row * rows as i64 + 8 * rng.random_range(0..3), row, head: d as i64 }
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

fn set_strides(p: &mut AttentionParams<'static>, s: [Strides; 4]) {
    (p.q_strides, p.k_strides, p.v_strides, p.o_strides) = (Some(s[0]), Some(s[1]), Some(s[2]), Some(s[3]));
}

/// False when the Hopper kernels' tensor maps cannot take the call's strides (a forced wgmma
/// path then refuses the call with `InvalidShape("wgmma path")` before any buffer check).
fn tma_ok(p: &AttentionParams<'static>) -> bool {
    read_call(p).is_ok_and(|m| tma_describable(p, &m))
}

// ------------------------------------------------------------------------------------------
// Attention modifications.

/// Modifications drawn for a call before its arrays are placed: the window (left, right), the
/// softcap, ALiBi (`Some(per_batch)`), whether it has sinks, and user data (`Some(elements)`).
#[derive(Clone, Copy, Debug)]
struct ModsDraw {
    window: (Option<usize>, Option<usize>),
    softcap: Option<f32>,
    alibi: Option<bool>,
    sinks: bool,
    user: Option<usize>,
}

/// A window side: unbounded, 0, within the keys, past them, or past what the kernels' 32-bit
/// masks take (clamped to unbounded).
fn window_side(rng: &mut StdRng, seqlen_k: usize) -> Option<usize> {
    let unbounded = WINDOW_UNBOUNDED as usize;
    match rng.random_range(0..6) {
        0 | 1 => None,
        2 => Some(0),
        3 => Some(rng.random_range(1..=seqlen_k.max(1))),
        4 => Some(seqlen_k.saturating_add(rng.random_range(1..=1000))),
        _ => Some(pick(rng, &[unbounded - 1, unbounded, unbounded + 1, i32::MAX as usize, 1 << 40, usize::MAX])),
    }
}

/// Modifications for a quarter of calls (`None`: plain attention): some of a window, a softcap
/// the kernels can apply at `scale` (at some scales none can), ALiBi slopes per head or per
/// batch entry, sinks, user data (for custom kernels); at least one.
fn draw_mods(rng: &mut StdRng, scale: f32, seqlen_k: usize) -> Option<ModsDraw> {
    if !rng.random_bool(0.25) {
        return None;
    }
    loop {
        let window = if rng.random_bool(0.5) { (window_side(rng, seqlen_k), window_side(rng, seqlen_k)) } else { (None, None) };
        let cap = pick(rng, &[f32::MIN_POSITIVE, 1e-3, 1.0, 5.0, 30.0, 50.0, 1e4, 1e30]);
        let softcap = (rng.random_bool(0.4) && softcap_ok(cap, scale)).then_some(cap);
        let alibi = rng.random_bool(0.4).then(|| rng.random_bool(0.5));
        let sinks = rng.random_bool(0.4);
        let user = rng.random_bool(0.2).then(|| rng.random_range(1..=300));
        if window != (None, None) || softcap.is_some() || alibi.is_some() || sinks || user.is_some() {
            return Some(ModsDraw { window, softcap, alibi, sinks, user });
        }
    }
}

/// Elements of (ALiBi slopes, sinks, user data) the kernel reads for `batch` entries of `heads_q`
/// heads (0: none).
fn mods_needs(m: Option<ModsDraw>, batch: usize, heads_q: usize) -> [usize; 3] {
    let Some(m) = m else { return [0, 0, 0] };
    let slopes = match m.alibi {
        Some(true) => batch * heads_q,
        Some(false) => heads_q,
        None => 0,
    };
    [slopes, if m.sinks { heads_q } else { 0 }, m.user.unwrap_or(0)]
}

/// A fake f32 array on the GPU (planning reads none, and a plan holding one is never launched).
fn f32_array(b: BufferRef) -> DeviceArray<'static, f32> {
    // SAFETY: only planned, never launched (see above).
    unsafe { DeviceArray::<f32>::from_raw(b.ptr, b.len) }
}

/// Gives `p` the modifications `m` through the builder's setters, the ALiBi slopes, the sinks and
/// the user data in `arrays`.
fn set_mods(p: &mut AttentionParams<'static>, m: ModsDraw, arrays: [BufferRef; 3]) {
    edit(p, |b| {
        let b = b.window(m.window.0, m.window.1);
        let b = if let Some(cap) = m.softcap { b.softcap(cap) } else { b };
        let b = if let Some(per_batch) = m.alibi { b.alibi(f32_array(arrays[0]), per_batch) } else { b };
        let b = if m.user.is_some() { b.user_data(f32_array(arrays[2])) } else { b };
        if m.sinks { b.sinks(f32_array(arrays[1])) } else { b }
    });
}

/// The modification arrays' names as the planner's errors give them.
const MOD_ARRAYS: [&str; 3] = ["alibi_slopes", "sinks", "user_data"];

/// Modification array `i` of `p` (0: the ALiBi slopes, 1: the sinks, 2: the user data), if it
/// has it, and the elements the kernel reads of it (of the user data: at least one, all of
/// them may be).
fn mod_array(p: &AttentionParams, i: usize) -> Option<(BufferRef, usize)> {
    match i {
        0 => p.mods.alibi.map(|a| (a.slopes.buffer(), if a.per_batch { p.batch * p.heads_q } else { p.heads_q })),
        1 => p.mods.sinks.map(|s| (s.buffer(), p.heads_q)),
        _ => p.mods.user.map(|u| (u.buffer(), 1)),
    }
}

/// Moves modification array `i` of `p` (which has it) to `b`.
fn set_mod_array(p: &mut AttentionParams<'static>, i: usize, b: BufferRef) {
    match i {
        0 => p.mods.alibi.as_mut().expect("ALiBi slopes").slopes = f32_array(b),
        1 => p.mods.sinks = Some(f32_array(b)),
        _ => p.mods.user = Some(f32_array(b)),
    }
}

/// Injects one fault into the modifications of a valid fixed-length or variable-length call
/// (a softcap into any call; the others into calls with modifications); returns it, or `None`
/// when it does not apply to this case.
fn inject_mods(rng: &mut StdRng, c: &mut Case) -> Option<Fault> {
    use WhenEmpty::{Accepted, Same};
    let m = read_call(&c.p).expect("a valid call");
    let (mods, live, hopper) = (m.mods.is_some(), !m.empty, c.t.arch == Arch::Sm90a);
    let arrays: Vec<usize> = (0..3).filter(|&i| mod_array(&c.p, i).is_some()).collect();
    let pd = padded(m.kd);
    let p = &mut c.p;
    Some(match rng.random_range(0..9) {
        0 => {
            // The softcap is checked first of the modifications, before any kernel is chosen.
            p.mods.softcap = Some(pick(rng, &[f32::NAN, -f32::NAN, 0.0, -0.0, -1.0, f32::NEG_INFINITY, f32::INFINITY]));
            ("softcap not positive and finite", Want::Shape("softcap"), Same)
        }
        1 => {
            // Caps fine at other scales whose factors overflow at this (valid) one.
            if rng.random_bool(0.5) {
                // `2 log2(e) scale` alone passes f32.
                (p.softmax_scale, p.mods.softcap) = (Some(2e38), Some(pick(rng, &[1.0, 30.0, 1e30])));
            } else {
                (p.softmax_scale, p.mods.softcap) = (Some(f32::MIN_POSITIVE), Some(pick(rng, &[1e30, f32::MAX])));
            }
            ("softcap whose factors overflow with the scale", Want::Shape("softcap"), Same)
        }
        2..=4 if live && !arrays.is_empty() => {
            let i = pick(rng, &arrays);
            let (name, (b, need)) = (MOD_ARRAYS[i], mod_array(p, i).unwrap());
            let (fault, want, new) = match (i, rng.random_range(0..3)) {
                (0, 0) => ("ALiBi slopes one element short", Want::TooSmall(name, need as u64, need as u64 - 1), BufferRef { len: need - 1, ..b }),
                (2, 0) => ("user data empty", Want::TooSmall(name, 1, 0), BufferRef { len: 0, ..b }),
                (_, 0) => ("sinks one element short", Want::TooSmall(name, need as u64, need as u64 - 1), BufferRef { len: need - 1, ..b }),
                (_, 1) => ("modification array null", Want::Buffer(name), BufferRef { ptr: 0, ..b }),
                _ => ("modification array misaligned", Want::Misaligned(name), BufferRef { ptr: b.ptr + pick(rng, &[1, 2, 3]), ..b }),
            };
            set_mod_array(p, i, new);
            (fault, want, Accepted)
        }
        5 if live && !arrays.is_empty() => {
            // An array the kernel reads under what it writes: the output is checked first.
            let i = pick(rng, &arrays);
            let b = mod_array(p, i).unwrap().0;
            // Packed rows: one batch entry of the totals.
            let (nb, rows) = m.packed.map_or((p.batch, p.seqlen_q), |(tq, _)| (1, tq));
            let (ptr, fault, hit) = match c.b.lse {
                Some(l) if rng.random_bool(0.4) => (l.ptr + 4 * rng.random_range(0..nb * rows * p.heads_q) as u64, "modification array over the lse", "lse"),
                _ => {
                    let out_bytes = 2 * extent([nb, rows, p.heads_q, m.dv], m.strides[3]) as u64;
                    (c.b.o.ptr + 4 * rng.random_range(0..out_bytes / 4), "modification array over the output", "out")
                }
            };
            set_mod_array(p, i, BufferRef { ptr, ..b });
            (fault, Want::Buffer(hit), Accepted)
        }
        6 if mods => {
            p.num_splits = Some(rng.random_range(2..=MAX_SPLITS));
            ("modifications with a forced split", Want::Shape("num_splits"), Same)
        }
        7 if mods => {
            // Modification kernels exist only in their table's configurations for the padded
            // head_dim (not one for a larger head_dim, as plain calls may force).
            let bogus = TileConfig { block_m: 96, ..MODS_CONFIGS[0] };
            let others: Vec<TileConfig> = CONFIGS
                .iter()
                .chain(&SPLIT_CONFIGS)
                .chain(&VARLEN_CONFIGS)
                .chain(&MODS_CONFIGS)
                .copied()
                .chain([bogus])
                .filter(|k| !(k.head_dim == pd && MODS_CONFIGS.contains(k)))
                .collect();
            edit(p, |b| b.config(pick(rng, &others)));
            ("modifications with a config outside their table", Want::Shape("config"), Same)
        }
        8 if mods && hopper => {
            let others: Vec<HopperConfig> = sm90::CONFIGS.iter().copied().filter(|k| sm90_holds(k, m.d, m.dv) && !sm90::has_mods(k)).collect();
            p.kernel = KernelChoice::Wgmma { config: Some(pick(rng, &others)), persistent: None };
            ("modifications with a wgmma config without their kernel", Want::Shape("wgmma path"), Same)
        }
        8 if mods => {
            // The modification table's configuration forced where the target lacks its shared
            // memory.
            let big: Vec<TileConfig> = MODS_CONFIGS.iter().copied().filter(|k| k.head_dim == pd && !fits(k, &c.t)).collect();
            if big.is_empty() {
                return None;
            }
            let k = pick(rng, &big);
            edit(p, |b| b.config(k));
            ("modification config past the target's shared memory", Want::SharedMemory(mma_smem(&k) as u64, c.t.max_smem_per_block as u64), Same)
        }
        _ => return None,
    })
}

// ------------------------------------------------------------------------------------------
// Fixed-length calls.

/// A valid fixed-length call for a target drawn from the presets: prefill shapes, or decode
/// shapes (1 to 16 query rows against up to 128k keys, a few sequences, so that the target's
/// SMs are underfilled and the planner splits the keys, and GQA heads pack); plain, padded,
/// head-major and packed-KV layouts; forced tile configurations that fit the target, kernel
/// families the target runs, forced split counts; a quarter with modifications (their own
/// configurations forced, never split); V and the output of K's head_dim or of their own
/// (DeepSeek's 192 / 128 among them); buffers in their own regions or back to back, exact or
/// generous.
fn valid_case(rng: &mut StdRng) -> Case {
    let t = pick(rng, &Target::PRESETS);
    let hkv = pick(rng, &[1, 1, 2, 3, 4]);
    let group = pick(rng, &[1, 1, 2, 4, 8]);
    let (d, given_v) = if rng.random_bool(0.05) {
        (192, Some(128))
    } else {
        let d = 8 * rng.random_range(1..=32);
        (d, draw_dim_v(rng, d))
    };
    let (batch, sq, sk) = if rng.random_bool(0.4) {
        (rng.random_range(1..=4), if rng.random_bool(0.5) { 1 } else { rng.random_range(1..=16) }, decode_keys(rng))
    } else {
        (rng.random_range(1..=3), rng.random_range(1..=300), rng.random_range(1..=300))
    };
    let hq = hkv * group;
    let mut p = params(batch, sq, sk, hq, d).heads_kv(hkv).causal(rng.random_bool(0.5)).build().unwrap();
    p.head_dim_v = given_v;
    let (dv, kd) = (dim_v(&p), kernel_dim(&p));
    let dtype = random_dtype(rng);
    p = scale(rng, p);
    let mods = draw_mods(rng, call_scale(&p), sk);
    if rng.random_bool(0.3) {
        // Calls with modifications take only their table's configurations for the padded
        // head_dim (the kernel's: the larger of head_dim and head_dim_v); plain ones any that
        // holds it.
        let fit: Vec<TileConfig> = match mods {
            Some(_) => MODS_CONFIGS.iter().copied().filter(|c| c.head_dim == padded(kd) && fits(c, &t)).collect(),
            None => CONFIGS.iter().copied().filter(|c| c.head_dim >= kd && fits(c, &t)).collect(),
        };
        edit(&mut p, |b| b.config(pick(rng, &fit)));
    } else {
        p.kernel = kernel_choice(rng, &t, (d, dv), if mods.is_some() { sm90::has_mods } else { |_| true });
    }
    let free = matches!(p.kernel, KernelChoice::Auto | KernelChoice::MmaSync { config: None }) && mods.is_none();
    if free && rng.random_bool(0.3) {
        p.num_splits = Some(pick(rng, &[0, 1, 2, 3, 4, 5, 8, 13, 16, 31, 32]));
    } else if rng.random_bool(0.1) {
        p.num_splits = Some(pick(rng, &[0, 1]));
    }
    let packed_kv = rng.random_range(0..4) == 3;
    match rng.random_range(0..3) {
        _ if packed_kv => {
            // K and V as views of one packed [b, s, h * (d + dv)] tensor, K's heads then V's (V
            // starts h*d elements in; [b, s, 2, h, d] where dv is d).
            let row = (hkv * (d + dv)) as i64;
            let k = Strides { batch: row * sk as i64, row, head: d as i64 };
            let v = Strides { head: dv as i64, ..k };
            set_strides(&mut p, [Strides::bshd(sq, hq, d).unwrap(), k, v, Strides::bshd(sq, hq, dv).unwrap()]);
        }
        0 => {}
        1 => p.dim_order = DimOrder::Bhsd,
        _ => {
            let (q, k, v, o) = (padded_strides(rng, sq, hq, d), padded_strides(rng, sk, hkv, d), padded_strides(rng, sk, hkv, dv), padded_strides(rng, sq, hq, dv));
            set_strides(&mut p, [q, k, v, o]);
        }
    }
    let s = call_strides(&p).unwrap();
    let [dq, dk, dvk, dvq] = tensor_dims(&p);
    let arrays = mods_needs(mods, batch, hq);
    let lens = [
        extent(dq, s[0]) as usize + slack(rng),
        // Packed: V's heads past K's.
        extent(dk, s[1]) as usize + slack(rng) + if packed_kv { hkv * dv } else { 0 },
        extent(dvk, s[2]) as usize + slack(rng),
        extent(dvq, s[3]) as usize + slack(rng),
        batch * hq * sq + slack(rng),
        arrays[0] + slack(rng),
        arrays[1] + slack(rng),
        arrays[2] + slack(rng),
    ];
    // q, k, v, out (f16/bf16), lse, ALiBi slopes, sinks, user data (f32).
    let bytes: Vec<u64> = (0..8).map(|i| lens[i] as u64 * if i < 4 { 2 } else { 4 }).collect();
    let [alibi, sinks, user] = MOD_REGIONS;
    let mut ptrs = place(rng, &bytes, &[16, 16, 16, 16, 4, 4, 4, 4], &[1, 2, 3, 4, 5, alibi, sinks, user]);
    if packed_kv {
        ptrs[2] = ptrs[1] + 2 * (hkv * d) as u64; // inside K's allocation
    }
    let r = |i: usize| BufferRef { ptr: ptrs[i], len: lens[i] };
    if let Some(m) = mods {
        set_mods(&mut p, m, [r(5), r(6), r(7)]);
    }
    let lse = rng.random_bool(0.6).then(|| r(4));
    Case { p, b: buffers(dtype, [r(0), r(1), r(2), r(3)], lse), t }
}

/// Dimensions of (q, k, v, out) of a fixed-length call: Q and K of head_dim columns, V and the
/// output of head_dim_v.
fn tensor_dims(p: &AttentionParams) -> [[usize; 4]; 4] {
    let (d, dv) = (p.head_dim, dim_v(p));
    [[p.batch, p.seqlen_q, p.heads_q, d], [p.batch, p.seqlen_k, p.heads_kv, d], [p.batch, p.seqlen_k, p.heads_kv, dv], [p.batch, p.seqlen_q, p.heads_q, dv]]
}

/// Injects one fault into a valid fixed-length case; returns it, or `None` when it does not
/// apply to this case (the caller draws again).
fn inject(rng: &mut StdRng, c: &mut Case) -> Option<Fault> {
    use WhenEmpty::{Accepted, Same};
    let has_lse = c.b.lse.is_some();
    let t = pick(rng, &(0..5).filter(|&i| i < 4 || has_lse).collect::<Vec<_>>());
    let name = TENSORS[t];
    let dims = tensor_dims(&c.p);
    let strides = call_strides(&c.p).unwrap();
    let hopper = c.t.arch == Arch::Sm90a;
    // Q's and K's head_dim, and the one the kernel holds (V's where that is wider).
    let (d, kd) = (c.p.head_dim, kernel_dim(&c.p));
    let pd = padded(kd);
    let mods = !plain_mods(&c.p.mods);
    // Under a forced wgmma path, strides a tensor map cannot take are refused first.
    let stride_fault = |p: &AttentionParams<'static>, want: Want| if is_wgmma(p) && !tma_ok(p) { Want::Shape("wgmma path") } else { want };
    let p = &mut c.p;
    Some(match rng.random_range(0..29) {
        0 => {
            let b = buf_mut(&mut c.b, t);
            let need = if t == 4 { (p.batch * p.heads_q * p.seqlen_q) as u64 } else { extent(dims[t], strides[t]) as u64 };
            b.len = need as usize - 1;
            ("buffer one element short", Want::TooSmall(name, need, need - 1), Accepted)
        }
        1 => {
            buf_mut(&mut c.b, t).ptr += if t == 4 { 2 } else { pick(rng, &[2, 4, 8]) };
            ("misaligned base", Want::Misaligned(name), Accepted)
        }
        2 if t < 4 => {
            let mut s = strides;
            let bump = pick(rng, &[1, 2, 4, 12]);
            match rng.random_range(0..3) {
                0 => s[t].batch += bump,
                1 => s[t].row += bump,
                _ => s[t].head += bump,
            }
            set_strides(p, s);
            ("stride not a multiple of 16 bytes", Want::Misaligned(name), Accepted)
        }
        3 if t < 4 => {
            let mut s = strides;
            let neg = pick(rng, &[-8, -16, i64::MIN, -(1 << 40)]);
            match rng.random_range(0..3) {
                0 => s[t].batch = neg,
                1 => s[t].row = neg,
                _ => s[t].head = neg,
            }
            set_strides(p, s);
            ("negative stride", Want::Strides(name), Accepted)
        }
        4 if t < 4 => {
            // Element offsets past i64 (or byte offsets past i64, or addresses past 2^64).
            let n = dims[t][1];
            match rng.random_range(0..3) {
                0 | 1 if n >= 2 => {
                    let mut s = strides;
                    let target: i64 = if rng.random_bool(0.5) { i64::MAX } else { 1 << 62 };
                    s[t].row = ((target / (n as i64 - 1)).saturating_add(8)) & !7;
                    set_strides(p, s);
                }
                2 => buf_mut(&mut c.b, t).ptr = u64::MAX - 15, // any tensor spans >= 16 bytes
                _ => return None,
            }
            ("offsets overflowing 64 bits", stride_fault(p, Want::Strides(name)), Accepted)
        }
        5 => {
            buf_mut(&mut c.b, t).ptr = 0;
            ("null address", Want::Buffer(name), Accepted)
        }
        6 => {
            let d = pick(rng, &[0, 1, 7, 12, 100, 257, 264, 512, usize::MAX]);
            p.head_dim = d;
            if rng.random_bool(0.3) {
                // head_dim is checked first: with both unsupported, it is the one named.
                p.head_dim_v = Some(bad_dim_v(rng));
            }
            ("unsupported head_dim", Want::HeadDim(d), Same)
        }
        7 => {
            p.heads_kv = if rng.random_bool(0.5) { p.heads_q + 1 } else { pick(rng, &[3, 5, 7]) };
            if p.heads_q.is_multiple_of(p.heads_kv) {
                return None;
            }
            ("heads_q not a multiple of heads_kv", Want::Gqa(p.heads_q, p.heads_kv), Same)
        }
        8 => {
            p.heads_kv = 0;
            ("zero heads_kv", Want::Shape("heads_kv"), Same)
        }
        9 => {
            let n = pick(rng, &[MAX_SEQLEN + 1, i32::MAX as usize, 1 << 31, 1 << 40, usize::MAX]);
            if rng.random_bool(0.5) {
                p.seqlen_q = n;
                ("seqlen_q past i32::MAX / 2", Want::Shape("seqlen_q"), Same)
            } else {
                p.seqlen_k = n;
                ("seqlen_k past i32::MAX / 2", Want::Shape("seqlen_k"), Same)
            }
        }
        10 => {
            p.softmax_scale = Some(pick(rng, &[f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, -1.0, 3e38]));
            ("softmax_scale not positive and finite", Want::Shape("softmax_scale"), Same)
        }
        11 => {
            let small: Vec<TileConfig> = CONFIGS.iter().copied().filter(|c| c.head_dim < kd).collect();
            let bogus = TileConfig { block_m: 96, ..CONFIGS[0] };
            edit(p, |b| b.config(if small.is_empty() || rng.random_bool(0.3) { bogus } else { pick(rng, &small) }));
            ("config that does not hold the call", Want::Shape("config"), Same)
        }
        12 => {
            // batch * heads * m_blocks past i32::MAX, including products that wrap 64 bits.
            p.batch = pick(rng, &[1 << 31, usize::MAX, (1usize << 63) + 1, 1 << 40]);
            p.heads_q = p.heads_q.max(2);
            p.heads_kv = p.heads_q;
            ("grid past i32::MAX CTAs", Want::Launch, Accepted)
        }
        13 => {
            // Output strides under which two output elements share memory.
            let [b, s, h, _] = dims[3];
            let mut o = strides;
            match rng.random_range(0..4) {
                0 if s > 1 => o[3].row = 0,
                1 if h > 1 => o[3].head = 0,
                2 if h > 1 && s > 1 => o[3].head = o[3].row, // (row r, head h+1) is (row r+1, head h)
                3 if b > 1 => o[3].batch = 0,
                _ => return None,
            }
            set_strides(p, o);
            // A zero-stride layout can shrink the extent; growing the buffer keeps the fault
            // single.
            c.b.o.len = c.b.o.len.max(extent(dims[3], o[3]) as usize);
            ("aliasing output strides", stride_fault(p, Want::Strides("out")), Accepted)
        }
        14 => {
            // The output (or lse) lands inside the bytes the kernel reads of an input, or output
            // and lse overlap.
            let victim = pick(rng, &[0usize, 1, 2]);
            let vb = *buf_mut(&mut c.b, victim);
            let write = if has_lse && rng.random_bool(0.4) { 4 } else { 3 };
            let w = buf_mut(&mut c.b, write);
            let span = 2 * extent(dims[victim], strides[victim]) as u64;
            w.ptr = vb.ptr + 16 * rng.random_range(0..=(span / 16).saturating_sub(1).min(1000));
            w.len = w.len.max(1);
            if write == 4 {
                // The planner checks out first: if the moved lse also reaches into out (tightly
                // packed buffers), that is the error.
                let (l0, l1) = (c.b.lse.unwrap().ptr, c.b.lse.unwrap().ptr + 4 * (p.batch * p.heads_q * p.seqlen_q) as u64);
                let (o0, o1) = (c.b.o.ptr, c.b.o.ptr + 2 * extent(dims[3], strides[3]) as u64);
                let hit = if l0 < o1 && o0 < l1 { "out" } else { "lse" };
                return Some(("lse inside an input", Want::Buffer(hit), Accepted));
            }
            ("output inside an input", Want::Buffer("out"), Accepted)
        }
        15 if has_lse && c.b.lse.unwrap().ptr.is_multiple_of(16) => {
            c.b.o.ptr = c.b.lse.unwrap().ptr;
            ("output over the lse", Want::Buffer("out"), Accepted)
        }
        16 if !mods => {
            // A forced configuration whose shared memory the target does not have (one of the
            // call's padded head_dim: another may be refused for a split of the planner's; with
            // modifications, see `inject_mods`).
            let big: Vec<TileConfig> = CONFIGS.iter().copied().filter(|k| k.head_dim == pd && !fits(k, &c.t)).collect();
            if big.is_empty() {
                return None;
            }
            let k = pick(rng, &big);
            edit(p, |b| b.config(k));
            p.num_splits = None;
            ("forced config past the target's shared memory", Want::SharedMemory(mma_smem(&k) as u64, c.t.max_smem_per_block as u64), Same)
        }
        17 if !hopper => {
            p.kernel = KernelChoice::Wgmma { config: None, persistent: None };
            ("wgmma path on a GPU without sm_90a", Want::PathUnavailable("wgmma"), Same)
        }
        // With modifications, a forced split is refused before any kernel is chosen (see
        // `inject_mods`).
        18 if hopper && p.seqlen_k > 256 && !mods => {
            p.kernel = KernelChoice::Wgmma { config: None, persistent: None };
            p.num_splits = Some(rng.random_range(2..=32));
            ("split-KV forced on the wgmma path", Want::Shape("wgmma path"), Same)
        }
        19 => {
            p.num_splits = Some(pick(rng, &[33, 64, usize::MAX]));
            ("num_splits past 32", Want::Shape("num_splits"), Same)
        }
        20 if hopper => {
            let small: Vec<HopperConfig> = sm90::CONFIGS.iter().copied().filter(|k| !sm90_holds(k, d, dim_v(p))).collect();
            let bogus = HopperConfig { block_n: 96, ..sm90::CONFIGS[0] };
            let config = if small.is_empty() || rng.random_bool(0.3) { bogus } else { pick(rng, &small) };
            p.kernel = KernelChoice::Wgmma { config: Some(config), persistent: None };
            p.num_splits = None;
            ("wgmma config that does not hold the call", Want::Shape("wgmma path"), Same)
        }
        21 => {
            // GQA-packed decode whose group (the packed query block's rows) passes the kernels'
            // 32-bit masks: refused, never a plan with its rows truncated to 32 bits.
            let g = pick(rng, &[1 << 30, (1 << 30) + 1, 1 << 31, (1 << 32) + 16, 1 << 40]);
            let hkv = p.heads_kv;
            let mut q = params(p.batch, 1, p.seqlen_k, hkv * g, d).heads_kv(hkv).causal(p.causal).build().unwrap();
            (q.dim_order, q.head_dim_v) = (p.dim_order, p.head_dim_v);
            *p = q;
            let s = call_strides(p).unwrap();
            let [dq, dk, dvk, dvq] = tensor_dims(p);
            let lens = [extent(dq, s[0]), extent(dk, s[1]), extent(dvk, s[2]), extent(dvq, s[3]), (p.batch * p.heads_q) as i128];
            for (i, r) in [1u64, 2, 3, 4, 5].into_iter().enumerate() {
                if i < 4 || has_lse {
                    *buf_mut(&mut c.b, i) = BufferRef { ptr: r * REGION, len: lens[i] as usize };
                }
            }
            ("GQA-packed decode of a group past i32::MAX / 2 rows", Want::Shape("query rows"), Same)
        }
        22 if p.seqlen_k > 256 && !mods => {
            // Forced splits take the split kernels' configuration: another one is refused.
            let split = |k: &TileConfig| k.head_dim == pd && SPLIT_CONFIGS.contains(k);
            let others: Vec<TileConfig> = CONFIGS.iter().copied().filter(|k| k.head_dim >= kd && !split(k)).collect();
            edit(p, |b| b.config(pick(rng, &others)));
            p.num_splits = Some(rng.random_range(2..=32));
            ("forced split with a configuration not of the split table", Want::Shape("config"), Same)
        }
        23..=26 => return inject_mods(rng, c),
        27 => {
            let dv = bad_dim_v(rng);
            p.head_dim_v = Some(dv);
            ("unsupported head_dim_v", Want::HeadDimV(dv), Same)
        }
        28 if pd < 256 => {
            // V made wider than a forced configuration that holds Q's and K's head_dim.
            let dv = 8 * rng.random_range(pd / 8 + 1..=32);
            p.head_dim_v = Some(dv);
            if hopper && rng.random_bool(0.5) {
                let held: Vec<HopperConfig> = sm90::CONFIGS.iter().copied().filter(|k| k.head_dim >= d && k.head_dim_v < dv).collect();
                p.kernel = KernelChoice::Wgmma { config: Some(pick(rng, &held)), persistent: None };
                p.num_splits = None;
                ("wgmma config holding head_dim but not head_dim_v", Want::Shape("wgmma path"), Same)
            } else {
                let held: Vec<TileConfig> = CONFIGS.iter().copied().filter(|k| k.head_dim >= d && k.head_dim < dv).collect();
                edit(p, |b| b.config(pick(rng, &held)));
                ("config holding head_dim but not head_dim_v", Want::Shape("config"), Same)
            }
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
        9 => pick(rng, &[MAX_SEQLEN, MAX_SEQLEN + 1, i32::MAX as usize, 1 << 31, 1 << 32]),
        10 => pick(rng, &[usize::MAX, usize::MAX / 2, (1 << 63) + 1, 1 << 40]),
        _ => rng.random::<u64>() as usize,
    }
}

/// Replaces one stride of one tensor of `p` with a hostile value; false when `p`'s strides
/// cannot be resolved to start from.
fn hostile_tensor_stride(rng: &mut StdRng, p: &mut AttentionParams<'static>) -> bool {
    let Ok(mut s) = call_strides(p) else { return false };
    let t = rng.random_range(0..4);
    match rng.random_range(0..3) {
        0 => s[t].batch = hostile_stride(rng),
        1 => s[t].row = hostile_stride(rng),
        _ => s[t].head = hostile_stride(rng),
    }
    set_strides(p, s);
    true
}

/// A hostile stride.
fn hostile_stride(rng: &mut StdRng) -> i64 {
    match rng.random_range(0..10) {
        0 => 0,
        1..=3 => 8 * rng.random_range(0..2000),
        4 => rng.random_range(-20..2000),
        5 => pick(rng, &[i64::MAX, i64::MAX - 7, i64::MIN, -8, 1 << 62, 1 << 61, (1 << 62) + 8, 1 << 40, 1 << 39]),
        6 => -(8 * rng.random_range(1..1000)),
        7 => rng.random::<u64>() as i64,
        _ => 8 * rng.random_range(0..100_000),
    }
}

fn hostile_strides(rng: &mut StdRng) -> Strides {
    Strides { batch: hostile_stride(rng), row: hostile_stride(rng), head: hostile_stride(rng) }
}

/// Any kernel choice at all: forced configurations of every table (and none), of the Hopper
/// table, persistent or not.
fn hostile_kernel(rng: &mut StdRng) -> KernelChoice {
    let bogus = TileConfig { block_m: 96, ..CONFIGS[0] };
    let mma: Vec<TileConfig> = CONFIGS.iter().chain(&SPLIT_CONFIGS).chain(&VARLEN_CONFIGS).copied().chain([bogus]).collect();
    let hopper: Vec<HopperConfig> = sm90::CONFIGS.iter().copied().chain([HopperConfig { consumers: 4, ..sm90::CONFIGS[1] }]).collect();
    match rng.random_range(0..5) {
        0 => KernelChoice::Auto,
        1 => KernelChoice::MmaSync { config: None },
        2 => KernelChoice::MmaSync { config: Some(pick(rng, &mma)) },
        3 => KernelChoice::Wgmma { config: None, persistent: pick(rng, &[None, Some(true), Some(false)]) },
        _ => KernelChoice::Wgmma { config: Some(pick(rng, &hopper)), persistent: pick(rng, &[None, Some(true), Some(false)]) },
    }
}

fn hostile_splits(rng: &mut StdRng) -> Option<usize> {
    match rng.random_range(0..4) {
        0 | 1 => None,
        2 => Some(rng.random_range(0..=40)),
        _ => Some(pick(rng, &[32, 33, 1 << 32, usize::MAX])),
    }
}

/// A buffer at a hostile address (null, misaligned, near 2^64, on another) and of a hostile
/// length around `len`.
fn hostile_buf(rng: &mut StdRng, region: u64, len: usize, align: u64) -> BufferRef {
    BufferRef {
        ptr: match rng.random_range(0..10) {
            0 => 0,
            1 => pick(rng, &[u64::MAX - 15, u64::MAX - 3, u64::MAX, 1 << 63, 2, 8]),
            2 => region * REGION + pick(rng, &[1, 2, 4, 8, 12]),
            3 => REGION, // everything on top of each other
            _ => region * REGION + align * rng.random_range(0..2),
        },
        len: match rng.random_range(0..6) {
            0 => 0,
            1 => len.saturating_sub(1),
            2 => usize::MAX,
            3 => rng.random_range(0..1000),
            _ => len,
        },
    }
}

/// Replaces one modification of `p` with a hostile one: a softcap of any value, window sides
/// past every limit, ALiBi slopes or sinks at hostile addresses and of hostile lengths.
fn hostile_mods(rng: &mut StdRng, p: &mut AttentionParams<'static>) {
    let [alibi, sinks, _] = MOD_REGIONS;
    match rng.random_range(0..4) {
        0 => p.mods.softcap = Some(pick(rng, &[f32::NAN, f32::INFINITY, -1.0, 0.0, f32::MIN_POSITIVE, 1e-30, 1.0, 50.0, f32::MAX])),
        1 => (p.mods.window.left, p.mods.window.right) = (window_side(rng, p.seqlen_k), window_side(rng, p.seqlen_k)),
        2 => {
            let per_batch = rng.random_bool(0.5);
            let n = if per_batch { p.batch.saturating_mul(p.heads_q) } else { p.heads_q };
            let slopes = f32_array(hostile_buf(rng, alibi, n, 4));
            edit(p, |b| b.alibi(slopes, per_batch));
        }
        _ => p.mods.sinks = Some(f32_array(hostile_buf(rng, sinks, p.heads_q, 4))),
    }
}

/// A hostile fixed-length call: half of them a valid one with one to three fields replaced by
/// hostile values, the target too (so that many are still accepted and modelled), half
/// anything at all ([`wild_case`]).
fn hostile_case(rng: &mut StdRng) -> Case {
    if rng.random_bool(0.5) {
        return wild_case(rng);
    }
    let mut c = valid_case(rng);
    for _ in 0..rng.random_range(1..=3) {
        match rng.random_range(0..14) {
            0 => c.p.batch = hostile_dim(rng),
            1 => c.p.seqlen_q = pick(rng, &[0, 1, 1, 16, 17, MAX_SEQLEN, MAX_SEQLEN + 1]),
            2 => c.p.seqlen_k = hostile_dim(rng),
            3 => {
                c.p.heads_q = hostile_dim(rng);
                let any = hostile_dim(rng);
                c.p.heads_kv = pick(rng, &[1, c.p.heads_q, c.p.heads_q / 2, any]);
            }
            4 => c.p.head_dim = pick(rng, &[0, 8, 64, 72, 128, 136, 256, 264, usize::MAX]),
            5 => {
                if !hostile_tensor_stride(rng, &mut c.p) {
                    continue;
                }
            }
            6 => {
                let i = rng.random_range(0..4);
                let b = buf_mut(&mut c.b, i);
                *b = hostile_buf(rng, i as u64 + 1, b.len, 16);
            }
            7 => c.p.kernel = hostile_kernel(rng),
            8 => c.p.num_splits = hostile_splits(rng),
            9 => c.t = pick(rng, &Target::PRESETS),
            10 => {
                let n = c.p.batch.saturating_mul(c.p.heads_q).saturating_mul(c.p.seqlen_q);
                c.b.lse = if rng.random_bool(0.3) { None } else { Some(hostile_buf(rng, 5, n, 4)) };
            }
            11 => hostile_mods(rng, &mut c.p),
            12 => c.p.head_dim_v = hostile_dim_v(rng),
            _ => c.p.softmax_scale = Some(pick(rng, &[f32::NAN, f32::INFINITY, 0.0, -1.0, 1e38, f32::MIN_POSITIVE, 1.0])),
        }
    }
    c
}

/// Anything at all, from pools of hostile values, for a target drawn from the presets.
fn wild_case(rng: &mut StdRng) -> Case {
    let dim = hostile_dim;
    let t = pick(rng, &Target::PRESETS);
    let mut p = params(dim(rng), dim(rng), dim(rng), dim(rng), 0).heads_kv(dim(rng)).causal(rng.random_bool(0.5)).build().unwrap();
    let dtype = random_dtype(rng);
    p.head_dim = if rng.random_bool(0.7) { 8 * rng.random_range(0..=33) } else { dim(rng) };
    p.head_dim_v = match rng.random_range(0..4) {
        0 | 1 => None,
        2 => Some(8 * rng.random_range(0..=33)),
        _ => Some(dim(rng)),
    };
    if rng.random_bool(0.5) {
        p.heads_kv = pick(rng, &[1, p.heads_q, p.heads_q / 2, p.heads_q.saturating_add(1)]);
    }
    if rng.random_bool(0.25) {
        // Decode: GQA heads pack into the query block.
        p.seqlen_q = 1;
    }
    if rng.random_bool(0.3) {
        p.softmax_scale = Some(pick(rng, &[f32::NAN, f32::INFINITY, 0.0, -1.0, 1e38, f32::MIN_POSITIVE]));
    }
    p.kernel = hostile_kernel(rng);
    p.num_splits = hostile_splits(rng);
    if rng.random_bool(0.2) {
        p.dim_order = DimOrder::Bhsd;
    }
    if rng.random_bool(0.6) {
        set_strides(&mut p, [hostile_strides(rng), hostile_strides(rng), hostile_strides(rng), hostile_strides(rng)]);
    }
    let dims = tensor_dims(&p);
    let given = [p.q_strides, p.k_strides, p.v_strides, p.o_strides];
    let len = |rng: &mut StdRng, i: usize| -> usize {
        let n = if i == 4 {
            (p.batch as i128).saturating_mul(p.heads_q as i128).saturating_mul(p.seqlen_q as i128)
        } else if dims[i].iter().all(|&x| x > 0) {
            // Contiguous defaults in i128 (saturating: hostile sizes may not fit i128 either).
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
    Case { p, b: buffers(dtype, [q, k, v, o], lse), t }
}

// ------------------------------------------------------------------------------------------
// Variable-length calls.

/// The packed totals of a variable-length call as documented (host offsets: the last entries).
fn totals(p: &AttentionParams) -> (usize, usize) {
    match &p.layout.rows {
        Rows::Packed(o) => offset_totals(o),
        Rows::Batched => (0, 0),
        _ => unreachable!("a layout the model does not know"),
    }
}

fn is_device(p: &AttentionParams) -> bool {
    matches!(p.layout.rows, Rows::Packed(Offsets::Device(_)))
}

fn device_offsets<'a>(p: &'a mut AttentionParams<'static>) -> &'a mut DeviceOffsets<'static> {
    match &mut p.layout.rows {
        Rows::Packed(Offsets::Device(d)) => d,
        _ => unreachable!("not a device-offset call"),
    }
}

/// Elements each of (q, k, v, out) needs in a (valid) variable-length call: the packed
/// `[1, total, heads, head_dim]` tensor's highest offset + 1 (head_dim_v columns for V and the
/// output), 0 without rows.
fn packed_needs(p: &AttentionParams) -> [usize; 4] {
    let (tq, tk) = totals(p);
    let s = call_strides(p).unwrap();
    let (d, dv) = (p.head_dim, dim_v(p));
    let n = |rows: usize, heads: usize, d: usize, s: Strides| if rows == 0 || heads == 0 { 0 } else { extent([1, rows, heads, d], s) as usize };
    [n(tq, p.heads_q, d, s[0]), n(tk, p.heads_kv, d, s[1]), n(tk, p.heads_kv, dv, s[2]), n(tq, p.heads_q, dv, s[3])]
}

/// Packed rows `[total, heads, head_dim]`: contiguous (`None`), explicit with a batch stride of
/// any value (ignored), padded rows, padded heads, or head-major `[heads, total, head_dim]`.
fn varlen_layout(rng: &mut StdRng, rows: usize, h: usize, d: usize) -> Option<Strides> {
    let (rows, h, d) = (rows as i64, h as i64, d as i64);
    let any_batch = |rng: &mut StdRng| pick(rng, &[0, 0, 8, -8, 3, i64::MAX, i64::MIN, 1 << 40]);
    match rng.random_range(0..6) {
        0 | 1 => None,
        2 => Some(Strides { batch: any_batch(rng), row: h * d, head: d }),
        3 => Some(Strides { batch: any_batch(rng), row: h * d + 8 * rng.random_range(1..4), head: d }),
        4 => {
            let head = d + 8 * rng.random_range(1..3);
            Some(Strides { batch: any_batch(rng), row: h * head + 8 * rng.random_range(0..3), head })
        }
        _ => {
            let row = d + 8 * rng.random_range(0..2);
            Some(Strides { batch: any_batch(rng), row, head: rows.max(1) * row + 8 * rng.random_range(0..3) })
        }
    }
}

/// Offsets of `lens`: `0, len_0, len_0 + len_1, ...`.
fn prefix(lens: &[usize]) -> Vec<i32> {
    std::iter::once(0).chain(lens.iter().scan(0i32, |at, &l| {
        *at += l as i32;
        Some(*at)
    })).collect()
}

fn longest(cu: &[i32]) -> usize {
    cu.windows(2).map(|w| (w[1] - w[0]) as usize).max().unwrap_or(0)
}

/// A valid variable-length call for a target drawn from the presets: 1 to 8 sequences of
/// random lengths (0 and 1 included; decode batches of at most 16 query rows each), the offsets
/// on the host or on the GPU (then the packed tensors may hold more rows than the sequences
/// use, and the maxima may exceed the longest sequence, as serving engines pass them), GQA,
/// every head_dim, V's of its own or not, causal or not, f16 or bf16; kernel families the
/// target runs, the
/// variable-length kernels' own configuration forced, split counts forced; contiguous packed
/// rows, explicit ones with a batch stride of any value, padded rows or heads, head-major rows,
/// K and V as views of one packed tensor; a quarter with modifications (their own
/// configurations forced, never split); buffers in their own regions or back to back, exact or
/// generous; device offsets, ALiBi slopes and sinks 4-byte aligned.
fn varlen_case(rng: &mut StdRng) -> Case {
    let t = pick(rng, &Target::PRESETS);
    let batch = rng.random_range(1..=8);
    let decode = rng.random_bool(0.3);
    let len = |rng: &mut StdRng| match rng.random_range(0..10) {
        0 => 0,
        1 => 1,
        2..=7 => rng.random_range(0..=200),
        _ => rng.random_range(200..=600),
    };
    let (mut lq, mut lk) = (vec![], vec![]);
    for _ in 0..batch {
        let q = if decode { rng.random_range(0..=16) } else { len(rng) };
        lq.push(q);
        lk.push(if decode { decode_keys(rng).min(20000) } else if rng.random_bool(0.3) { q } else { len(rng) });
    }
    let (cq, ck) = (prefix(&lq), prefix(&lk));
    let hkv = pick(rng, &[1, 1, 2, 3, 4]);
    let group = pick(rng, &[1, 1, 2, 4]);
    let d = 8 * rng.random_range(1..=32);
    let given_v = draw_dim_v(rng, d);
    let call = if rng.random_bool(0.5) {
        let pad = |rng: &mut StdRng| if rng.random_bool(0.7) { 0 } else { rng.random_range(1..=64) };
        let (tq, tk) = (cq[batch] as usize + pad(rng), ck[batch] as usize + pad(rng));
        let (mq, mk) = (longest(&cq) + pad(rng), longest(&ck) + pad(rng));
        // The index arrays are placed with the tensors below.
        let offsets = DeviceOffsets::new(planning_index(0, 0), tq).keys(planning_index(0, 0), tk);
        AttentionParams::builder().varlen_device(offsets).batch(batch).seqlen_q(mq).seqlen_k(mk)
    } else {
        host_offsets(&cq, &ck)
    };
    let mut p = call.heads_q(hkv * group).heads_kv(hkv).head_dim(d).causal(rng.random_bool(0.5)).build().unwrap();
    p.head_dim_v = given_v;
    let (dv, kd) = (dim_v(&p), kernel_dim(&p));
    let dtype = random_dtype(rng);
    p = scale(rng, p);
    let mods = draw_mods(rng, call_scale(&p), p.seqlen_k);
    if rng.random_bool(0.15) && (mods.is_some() || p.seqlen_q > 16) {
        // The variable-length kernels' own configuration may be forced (decode shapes run the
        // split kernels' decode tiles instead); with modifications, one of their table's for
        // the padded head_dim (they have no decode tiles).
        let config = match mods {
            Some(_) => pick(rng, &MODS_CONFIGS.iter().copied().filter(|c| c.head_dim == padded(kd) && fits(c, &t)).collect::<Vec<_>>()),
            None => varlen_config(padded(kd), &t).unwrap(),
        };
        edit(&mut p, |b| b.config(config));
    } else {
        p.kernel = kernel_choice(rng, &t, (d, dv), if mods.is_some() { sm90::has_mods } else { sm90::is_default });
    }
    if rng.random_bool(0.1) {
        p.num_splits = Some(pick(rng, &[0, 1])); // no split: fine
    } else if rng.random_bool(0.15) && matches!(p.kernel, KernelChoice::Auto | KernelChoice::MmaSync { config: None }) && mods.is_none() {
        p.num_splits = Some(pick(rng, &[2, 5, 32]));
    }
    let (tq, tk) = totals(&p);
    let packed_kv = rng.random_range(0..4) == 3;
    p.q_strides = varlen_layout(rng, tq, p.heads_q, d);
    p.o_strides = varlen_layout(rng, tq, p.heads_q, dv);
    if packed_kv {
        // K and V as views of one packed [total_k, heads_kv * (head_dim + head_dim_v)] tensor,
        // K's heads then V's ([total_k, 2, heads_kv, head_dim] where the two are equal).
        let k = Strides { batch: pick(rng, &[0, 8, i64::MIN]), row: (hkv * (d + dv)) as i64, head: d as i64 };
        (p.k_strides, p.v_strides) = (Some(k), Some(Strides { head: dv as i64, ..k }));
    } else {
        p.k_strides = varlen_layout(rng, tk, hkv, d);
        p.v_strides = varlen_layout(rng, tk, hkv, dv);
    }
    let needs = packed_needs(&p);
    let arrays = mods_needs(mods, batch, p.heads_q);
    let lens = [
        needs[0] + slack(rng),
        needs[1] + slack(rng) + if packed_kv && tk > 0 { hkv * dv } else { 0 },
        needs[2] + slack(rng),
        needs[3] + slack(rng),
        p.heads_q * tq + slack(rng),
        batch + 1 + slack(rng),
        batch + 1 + slack(rng),
        arrays[0] + slack(rng),
        arrays[1] + slack(rng),
        arrays[2] + slack(rng),
    ];
    // q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, ALiBi slopes, sinks, user data.
    const BYTES: [u64; 10] = [2, 2, 2, 2, 4, 4, 4, 4, 4, 4];
    let bytes: Vec<u64> = (0..10).map(|i| lens[i] as u64 * BYTES[i]).collect();
    let [alibi, sinks, user] = MOD_REGIONS;
    let mut ptrs = place(rng, &bytes, &[16, 16, 16, 16, 4, 4, 4, 4, 4, 4], &[1, 2, 3, 4, 5, 6, 7, alibi, sinks, user]);
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
    if is_device(&p) {
        let dev = device_offsets(&mut p);
        dev.cu_seqlens_q = planning_index(ptrs[5], lens[5]);
        dev.cu_seqlens_k = Some(planning_index(ptrs[6], lens[6]));
    }
    if let Some(m) = mods {
        set_mods(&mut p, m, [r(7), r(8), r(9)]);
    }
    Case { p, b: buffers(dtype, [r(0), k, v, r(3)], lse), t }
}

/// Injects one fault into a valid variable-length case; returns it, or `None` when it does not
/// apply to this case (the caller draws again).
fn inject_varlen(rng: &mut StdRng, c: &mut Case) -> Option<Fault> {
    use WhenEmpty::{Accepted, Same, Skip};
    let (tq, tk) = totals(&c.p);
    let batch = c.p.batch;
    let device = is_device(&c.p);
    let hopper = c.t.arch == Arch::Sm90a;
    // A non-empty call: the planner checks the buffers (K and V where a sequence can have keys).
    let live = tq > 0 && c.p.seqlen_q > 0;
    let reads_kv = live && tk > 0 && c.p.seqlen_k > 0;
    let has_lse = c.b.lse.is_some();
    let strides = call_strides(&c.p).unwrap();
    let needs = packed_needs(&c.p);
    let touched: Vec<usize> = (0..5).filter(|&t| if t == 1 || t == 2 { reads_kv } else { t != 4 || has_lse }).collect();
    let t = pick(rng, &touched);
    let name = TENSORS[t];
    let need = if t == 4 { c.p.heads_q * tq } else { needs[t] };
    let mods = !plain_mods(&c.p.mods);
    let f = rng.random_range(0..26);
    Some(match f {
        0..=3 if !device => {
            let AttentionParams { layout, seqlen_q, seqlen_k, .. } = &mut c.p;
            let Rows::Packed(Offsets::Host { cu_seqlens_q, cu_seqlens_k }) = &mut layout.rows else { unreachable!() };
            let keys = rng.random_bool(0.5);
            let (what, cu, most) = if keys { ("cu_seqlens_k", cu_seqlens_k, seqlen_k) } else { ("cu_seqlens_q", cu_seqlens_q, seqlen_q) };
            let fault = match f {
                0 => {
                    match rng.random_range(0..4) {
                        0 => {
                            cu.pop();
                        }
                        1 => cu.push(cu[cu.len() - 1]),
                        2 => cu.clear(),
                        _ => {
                            cu.remove(0);
                        }
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
                    let top = lens.iter().copied().max().unwrap();
                    if top > 0 && rng.random_bool(0.5) {
                        *most = top - 1;
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
        5..=7 if device && live => {
            let dev = device_offsets(&mut c.p);
            let keys = rng.random_bool(0.5);
            let (what, buf) = if keys { ("cu_seqlens_k", dev.cu_seqlens_k.unwrap().buffer()) } else { ("cu_seqlens_q", dev.cu_seqlens_q.buffer()) };
            let (fault, want, new) = match f {
                5 => ("device offsets one element short", Want::TooSmall(what, batch as u64 + 1, batch as u64), BufferRef { len: batch, ..buf }),
                6 => ("device offsets misaligned", Want::Misaligned(what), BufferRef { ptr: buf.ptr + pick(rng, &[1, 2, 3]), ..buf }),
                _ => ("device offsets null", Want::Buffer(what), BufferRef { ptr: 0, ..buf }),
            };
            let index = planning_index(new.ptr, new.len);
            if keys {
                dev.cu_seqlens_k = Some(index);
            } else {
                dev.cu_seqlens_q = index;
            }
            (fault, want, Accepted)
        }
        9 if device => {
            device_offsets(&mut c.p).cu_seqlens_k = None;
            ("unpaged device offsets without key offsets", Want::Buffer("cu_seqlens_k"), Same)
        }
        10 if device && live => {
            // The output (or lse) over offsets the kernel reads while it writes.
            let (o, lse) = (c.b.o, c.b.lse);
            let heads_q = c.p.heads_q;
            let dev = device_offsets(&mut c.p);
            let keys = rng.random_bool(0.5);
            let buf = if keys { dev.cu_seqlens_k.unwrap().buffer() } else { dev.cu_seqlens_q.buffer() };
            let (ptr, fault, want) = match lse {
                Some(l) if rng.random_bool(0.4) => (l.ptr + 4 * rng.random_range(0..heads_q * tq) as u64, "lse over device offsets", "lse"),
                _ => (o.ptr + 4 * rng.random_range(0..needs[3] / 2) as u64, "output over device offsets", "out"),
            };
            let index = planning_index(ptr, buf.len);
            if keys {
                dev.cu_seqlens_k = Some(index);
            } else {
                dev.cu_seqlens_q = index;
            }
            (fault, Want::Buffer(want), Accepted)
        }
        11 if device => {
            let big = pick(rng, &[i32::MAX as usize + 1, 1 << 32, 1 << 40, usize::MAX]);
            let dev = device_offsets(&mut c.p);
            if rng.random_bool(0.5) {
                dev.total_q = big;
                ("device total_q past i32::MAX", Want::Shape("total_q"), Skip)
            } else {
                dev.total_k = big;
                ("device total_k past i32::MAX", Want::Shape("total_k"), Same)
            }
        }
        12 if device && c.p.seqlen_q > 0 => {
            // batch * heads_q * m_blocks past i32::MAX, including products that wrap 64 bits.
            c.p.batch = pick(rng, &[1 << 31, 1 << 40, (1 << 63) + 1, usize::MAX]);
            ("device offsets: grid past i32::MAX CTAs", Want::Launch, Same)
        }
        13 => {
            let dv = bad_dim_v(rng);
            c.p.head_dim_v = Some(dv);
            ("varlen unsupported head_dim_v", Want::HeadDimV(dv), Same)
        }
        14 => {
            c.p.num_splits = Some(pick(rng, &[33, 64, usize::MAX]));
            ("varlen split-KV past 32", Want::Shape("num_splits"), Same)
        }
        15 => {
            // Unsplit, a variable-length call takes a configuration of its own table for its
            // head_dim; decode shapes, whose rows a decode tile holds, may take that split
            // configuration instead, so they are offered none of the split table.
            c.p.num_splits = Some(1);
            let pd = padded(kernel_dim(&c.p));
            let own = varlen_config(pd, &c.t).unwrap();
            let bogus = TileConfig { block_m: 96, ..own };
            let decode = c.p.seqlen_q <= 16;
            // With modifications, the own table is theirs.
            let own_table = |x: &TileConfig| x.head_dim == pd && (VARLEN_CONFIGS.contains(x) || (mods && MODS_CONFIGS.contains(x)));
            let others: Vec<TileConfig> = CONFIGS
                .iter()
                .chain(&SPLIT_CONFIGS)
                .chain(&VARLEN_CONFIGS)
                .copied()
                .chain([bogus])
                .filter(|x| !own_table(x) && !(decode && SPLIT_CONFIGS.contains(x)))
                .collect();
            edit(&mut c.p, |b| b.config(pick(rng, &others)));
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
                set_strides(&mut c.p, s);
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
            set_strides(&mut c.p, s);
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
        20 if hopper && !mods => {
            // Only the default configurations have a variable-length Hopper kernel (plain; with
            // modifications, see `inject_mods`).
            let others: Vec<HopperConfig> = sm90::CONFIGS.iter().copied().filter(|k| sm90_holds(k, c.p.head_dim, dim_v(&c.p)) && !sm90::is_default(k)).collect();
            if others.is_empty() {
                return None;
            }
            c.p.kernel = KernelChoice::Wgmma { config: Some(pick(rng, &others)), persistent: None };
            c.p.num_splits = None;
            ("varlen wgmma config without a variable-length kernel", Want::Shape("wgmma path"), Same)
        }
        21 if !hopper => {
            c.p.kernel = KernelChoice::Wgmma { config: None, persistent: None };
            ("varlen wgmma path on a GPU without sm_90a", Want::PathUnavailable("wgmma"), Same)
        }
        22..=25 => return inject_mods(rng, c),
        _ => return None,
    })
}

/// A hostile variable-length call: half of them a valid one with one to three fields replaced
/// by hostile values (so that many are still accepted and modelled), half a hostile call
/// ([`hostile_case`]) made variable-length with hostile offsets, totals and offset arrays.
fn hostile_varlen_case(rng: &mut StdRng) -> Case {
    let hostile_i32 = |rng: &mut StdRng| pick(rng, &[0, 1, -1, 7, 8, 600, 1 << 20, i32::MAX / 2, i32::MAX, i32::MIN]);
    let hostile_index = |rng: &mut StdRng, region: u64, len: usize| {
        let b = hostile_buf(rng, region, len, 4);
        planning_index(b.ptr, b.len)
    };
    if rng.random_bool(0.5) {
        let mut c = varlen_case(rng);
        for _ in 0..rng.random_range(1..=3) {
            let rows = c.p.batch.saturating_add(1);
            match rng.random_range(0..15) {
                0 => c.p.batch = hostile_dim(rng),
                1 => c.p.seqlen_q = hostile_dim(rng),
                2 => c.p.seqlen_k = hostile_dim(rng),
                3 => match &mut c.p.layout.rows {
                    Rows::Packed(Offsets::Device(d)) => *(if rng.random_bool(0.5) { &mut d.total_q } else { &mut d.total_k }) = hostile_dim(rng),
                    Rows::Packed(Offsets::Host { cu_seqlens_q, cu_seqlens_k }) => {
                        let cu = if rng.random_bool(0.5) { cu_seqlens_q } else { cu_seqlens_k };
                        let j = rng.random_range(0..cu.len().max(1));
                        if let Some(x) = cu.get_mut(j) {
                            *x = hostile_i32(rng);
                        }
                    }
                    _ => {}
                },
                4 => {
                    let b = buf_mut(&mut c.b, rng.random_range(0..4));
                    b.len = pick(rng, &[0, b.len.saturating_sub(1), usize::MAX, b.len.saturating_add(1000)]);
                }
                5 => buf_mut(&mut c.b, rng.random_range(0..4)).ptr = pick(rng, &[0, 8, u64::MAX - 15, 1 << 63, REGION]),
                6 => {
                    if !hostile_tensor_stride(rng, &mut c.p) {
                        continue;
                    }
                }
                7 => {
                    let (q, k) = (hostile_index(rng, 6, rows), hostile_index(rng, 7, rows));
                    let (tq, tk) = totals(&c.p);
                    match &mut c.p.layout.rows {
                        Rows::Packed(Offsets::Device(d)) => {
                            d.cu_seqlens_q = q;
                            d.cu_seqlens_k = pick(rng, &[None, Some(k), Some(k)]);
                        }
                        rows => {
                            // Host offsets become device ones.
                            *rows = Rows::Packed(Offsets::Device(DeviceOffsets::new(q, tq).keys(k, tk)));
                        }
                    }
                }
                8 => c.p.num_splits = Some(pick(rng, &[0, 1, 2, 5, 32, 33, usize::MAX])),
                9 => {
                    let n = c.p.heads_q.saturating_mul(totals(&c.p).0);
                    c.b.lse = if rng.random_bool(0.3) { None } else { Some(hostile_buf(rng, 5, n, 4)) };
                }
                10 => c.p.kernel = hostile_kernel(rng),
                11 => {
                    c.p.heads_q = hostile_dim(rng);
                    let any = hostile_dim(rng);
                    c.p.heads_kv = pick(rng, &[1, c.p.heads_q, c.p.heads_q / 2, any]);
                }
                12 => hostile_mods(rng, &mut c.p),
                13 => c.p.head_dim_v = hostile_dim_v(rng),
                _ => c.p.head_dim = pick(rng, &[0, 8, 64, 72, 128, 136, 256, 264, usize::MAX]),
            }
        }
        return c;
    }
    let mut c = wild_case(rng);
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
    let rows = p.batch.saturating_add(1);
    if rng.random_bool(0.5) {
        let n = match rng.random_range(0..6) {
            0 => 0,
            1 => 1,
            2 => rows.min(64),
            _ => rng.random_range(2..=10),
        };
        let cq = offsets(rng, n);
        let nk = if rng.random_bool(0.8) { n } else { rng.random_range(0..=10) };
        let ck = offsets(rng, nk);
        let derived = host_offsets(&cq, &ck).heads_q(p.heads_q).head_dim(8).build().unwrap();
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
        p.layout.rows = derived.layout.rows;
    } else {
        let total = |rng: &mut StdRng| if rng.random_bool(0.5) { rng.random_range(0..=2000) } else { hostile_dim(rng) };
        let cu_seqlens_k = match rng.random_range(0..4) {
            0 => None,
            _ => Some(hostile_index(rng, 7, rows)),
        };
        let mut offsets = DeviceOffsets::new(hostile_index(rng, 6, rows), total(rng));
        // Key offsets or none, with a total either way.
        (offsets.cu_seqlens_k, offsets.total_k) = (cu_seqlens_k, total(rng));
        p.layout.rows = Rows::Packed(Offsets::Device(offsets));
    }
    if rng.random_bool(0.5) {
        // Buffers sized for the packed totals (contiguous, or the given strides; V and the
        // output of head_dim_v columns).
        let (tq, tk) = totals(p);
        let (dk, dv) = (p.head_dim as i128, dim_v(p) as i128);
        let packed = |rows: usize, h: usize, d: i128, s: Option<Strides>| -> usize {
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
        c.b.q.len = packed(tq, p.heads_q, dk, p.q_strides);
        c.b.k.len = packed(tk, p.heads_kv, dk, p.k_strides);
        c.b.v.len = packed(tk, p.heads_kv, dv, p.v_strides);
        c.b.o.len = packed(tq, p.heads_q, dv, p.o_strides);
        if let Some(l) = &mut c.b.lse {
            l.len = p.heads_q.saturating_mul(tq);
        }
    }
    c
}

// ------------------------------------------------------------------------------------------
// Paged K/V caches.

fn paged_kv<'a>(p: &'a mut AttentionParams<'static>) -> &'a mut PagedKv<'static> {
    match &mut p.layout.kv {
        Kv::Paged(pg) => pg,
        _ => unreachable!("not a paged call"),
    }
}

/// A valid paged call for a target drawn from the presets: 1 to 4 sequences of up to 20k keys
/// in pages of 16 to 1024 rows (tables with spare entries, caches with any number of pages:
/// the kernel clamps what the table holds), key counts on the GPU or not; fixed-length queries
/// (decode rows or prefill chunks) or variable-length ones (host or device offsets, key
/// offsets or none); V's head_dim K's (unset or set); contiguous pages, padded rows and pages,
/// head-major pages, K and V as views of one cache; automatic or forced splits, the split
/// configuration forced.
fn paged_case(rng: &mut StdRng) -> Case {
    let t = pick(rng, &Target::PRESETS);
    let batch = rng.random_range(1..=4);
    let hkv = pick(rng, &[1, 1, 2, 4]);
    let group = pick(rng, &[1, 1, 2, 4, 8]);
    let (hq, d) = (hkv * group, 8 * rng.random_range(1..=32));
    let page_size = pick(rng, &[16, 16, 32, 64, 128, 256, 1024]);
    let decode = rng.random_bool(0.5);
    let used: Vec<usize> = (0..batch).map(|_| if rng.random_bool(0.1) { 0 } else if decode { decode_keys(rng).min(20000) } else { rng.random_range(0..=600) }).collect();
    let seqlen_k = used.iter().copied().max().unwrap() + if rng.random_bool(0.3) { rng.random_range(0..=64) } else { 0 };
    let pages_per_seq = seqlen_k.div_ceil(page_size).max(1) + pick(rng, &[0, 0, 1, 3]);
    let num_pages = match rng.random_range(0..4) {
        0 => 1,
        1 => rng.random_range(1..=batch * pages_per_seq + 5),
        _ => batch * pages_per_seq,
    };
    let pages = Pages { page_size, num_pages, pages_per_seq };
    let varlen = rng.random_bool(0.4);
    let call = if varlen {
        let lq: Vec<usize> = (0..batch).map(|_| if decode { rng.random_range(0..=4) } else { rng.random_range(0..=200) }).collect();
        let cq = prefix(&lq);
        let ck = if rng.random_bool(0.5) { vec![] } else { prefix(&used) };
        let call = if rng.random_bool(0.5) {
            let pad = |rng: &mut StdRng| if rng.random_bool(0.7) { 0 } else { rng.random_range(1..=16) };
            let offsets = DeviceOffsets::new(planning_index(0, 0), cq[batch] as usize + pad(rng));
            AttentionParams::builder().varlen_device(offsets).batch(batch).seqlen_q(longest(&cq) + pad(rng))
        } else {
            host_offsets(&cq, &ck)
        };
        call.seqlen_k(seqlen_k)
    } else {
        let sq = if decode { if rng.random_bool(0.5) { 1 } else { rng.random_range(1..=16) } } else { rng.random_range(1..=200) };
        params(batch, sq, seqlen_k, hq, d)
    };
    let mut p = call.heads_q(hq).heads_kv(hkv).head_dim(d).causal(rng.random_bool(0.5)).build().unwrap();
    let other = other_dim_v(rng, d);
    p.head_dim_v = pick(rng, &[None, None, Some(d), Some(other)]);
    let dv = dim_v(&p);
    let dtype = random_dtype(rng);
    p = scale(rng, p);
    let pd = padded(kernel_dim(&p));
    match rng.random_range(0..10) {
        0 | 1 => p.kernel = KernelChoice::MmaSync { config: None },
        2 => {
            // The split table's configurations of the padded head_dim serve paged calls.
            let own: Vec<TileConfig> = SPLIT_CONFIGS.iter().copied().filter(|c| c.head_dim == pd && fits(c, &t)).collect();
            edit(&mut p, |b| b.config(pick(rng, &own)));
        }
        3 if t.arch == Arch::Sm90a => p.kernel = KernelChoice::Wgmma { config: None, persistent: None },
        _ => {}
    }
    if rng.random_bool(0.4) {
        // The wgmma path runs unsplit.
        let most = if matches!(p.kernel, KernelChoice::Wgmma { .. }) { 1 } else { 32 };
        p.num_splits = Some(rng.random_range(0..=most));
    }
    let (tq, _) = totals(&p);
    let sq = p.seqlen_q;
    let rows_q = if varlen { tq } else { sq };
    // Q and the output (of head_dim_v columns).
    let qo = |rng: &mut StdRng, d: usize| -> Option<Strides> {
        if varlen {
            varlen_layout(rng, tq, hq, d)
        } else {
            match rng.random_range(0..3) {
                0 => None,
                1 => contiguous(DimOrder::Bhsd, sq, hq, d),
                _ => Some(padded_strides(rng, sq, hq, d)),
            }
        }
    };
    (p.q_strides, p.o_strides) = (qo(rng, d), qo(rng, dv));
    // The caches: [num_pages, page_size, heads_kv, head_dim] pages (V's of head_dim_v), padded,
    // head-major, or K and V as views of one [num_pages, page_size, heads_kv * (head_dim +
    // head_dim_v)] cache, K's heads then V's.
    let (ps, h) = (page_size as i64, hkv as i64);
    let packed_kv = rng.random_range(0..4) == 3;
    let cache = |rng: &mut StdRng, dd: i64| -> Option<Strides> {
        match rng.random_range(0..4) {
            0 | 1 => None,
            2 => {
                let row = h * dd + 8 * rng.random_range(0..3);
                Some(Strides { batch: row * ps + 8 * rng.random_range(0..3), row, head: dd })
            }
            _ => {
                let row = dd + 8 * rng.random_range(0..2);
                let head = row * ps + 8 * rng.random_range(0..2);
                Some(Strides { batch: head * h + 8 * rng.random_range(0..2), row, head })
            }
        }
    };
    if packed_kv {
        let row = h * (d + dv) as i64;
        let k = Strides { batch: row * ps, row, head: d as i64 };
        (p.k_strides, p.v_strides) = (Some(k), Some(Strides { head: dv as i64, ..k }));
    } else {
        (p.k_strides, p.v_strides) = (cache(rng, d as i64), cache(rng, dv as i64));
    }
    // The caches' default strides are the pages' (the index arrays are placed below).
    edit(&mut p, |b| b.paged(PagedKv::new(pages, planning_index(0, 0))));
    let s = call_strides(&p).unwrap();
    let nb = if varlen { 1 } else { batch };
    let (dq, dk) = ([nb, rows_q, hq, d], [num_pages, page_size, hkv, d]);
    let (dvq, dvk) = ([nb, rows_q, hq, dv], [num_pages, page_size, hkv, dv]);
    let lens = [
        extent(dq, s[0]) as usize + slack(rng),
        // Packed: V's heads past K's.
        extent(dk, s[1]) as usize + slack(rng) + if packed_kv { hkv * dv } else { 0 },
        extent(dvk, s[2]) as usize + slack(rng),
        extent(dvq, s[3]) as usize + slack(rng),
        hq * if varlen { tq } else { batch * rows_q } + slack(rng),
        batch * pages_per_seq + slack(rng),
        batch + slack(rng),
        batch + 1 + slack(rng),
        batch + 1 + slack(rng),
    ];
    // q, k, v, out, lse, block_table, seqused_k, cu_seqlens_q, cu_seqlens_k.
    const BYTES: [u64; 9] = [2, 2, 2, 2, 4, 4, 4, 4, 4];
    let bytes: Vec<u64> = (0..9).map(|i| lens[i] as u64 * BYTES[i]).collect();
    let mut ptrs = place(rng, &bytes, &[16, 16, 16, 16, 4, 4, 4, 4, 4], &[1, 2, 3, 4, 5, 6, 7, 8, 9]);
    if packed_kv {
        ptrs[2] = ptrs[1] + 2 * (hkv * d) as u64; // inside K's cache
    }
    let r = |i: usize| BufferRef { ptr: ptrs[i], len: lens[i] };
    let idx = |i: usize| planning_index(ptrs[i], lens[i]);
    let (mut k, mut v) = (r(1), r(2));
    if seqlen_k == 0 && rng.random_bool(0.3) {
        // No keys: the caches are never read.
        (k.ptr, v.ptr) = (0, pick(rng, &[0, 3]));
    }
    let seqused_k = rng.random_bool(0.6).then(|| idx(6));
    let pg = paged_kv(&mut p);
    (pg.block_table, pg.seqused_k) = (idx(5), seqused_k);
    if is_device(&p) {
        let with_keys = rng.random_bool(0.5);
        let dev = device_offsets(&mut p);
        dev.cu_seqlens_q = idx(7);
        dev.cu_seqlens_k = with_keys.then(|| idx(8));
    }
    let lse = rng.random_bool(0.6).then(|| r(4));
    Case { p, b: buffers(dtype, [r(0), k, v, r(3)], lse), t }
}

/// Injects one fault into a valid paged case; returns it, or `None` when it does not apply to
/// this case (the caller draws again).
fn inject_paged(rng: &mut StdRng, c: &mut Case) -> Option<Fault> {
    use WhenEmpty::{Accepted, Same};
    let batch = c.p.batch;
    let (tq, _) = totals(&c.p);
    let varlen = matches!(c.p.layout.rows, Rows::Packed(_));
    let live = c.p.seqlen_q > 0 && (!varlen || tq > 0);
    let reads_kv = live && c.p.seqlen_k > 0;
    let pg = *paged_kv(&mut c.p);
    let g = pg.pages;
    let table = pg.block_table.buffer();
    let entries = batch * g.pages_per_seq;
    let s = call_strides(&c.p).unwrap();
    let (d, dv) = (c.p.head_dim, dim_v(&c.p));
    let pd = padded(kernel_dim(&c.p));
    // K's pages of head_dim columns, V's of head_dim_v.
    let kv_need = |i: usize| extent([g.num_pages, g.page_size, c.p.heads_kv, if i == 1 { d } else { dv }], s[i]) as usize;
    let out_bytes = 2 * extent([if varlen { 1 } else { batch }, if varlen { tq } else { c.p.seqlen_q }, c.p.heads_q, dv], s[3]) as u64;
    let set_pages = |c: &mut Case, pages: Pages| paged_kv(&mut c.p).pages = pages;
    let f = rng.random_range(0..21);
    Some(match f {
        0 => {
            set_pages(c, Pages { page_size: pick(rng, &[0, 1, 3, 8, 15, 24, 48, 100, (1 << 20) + 16, 1 << 21, usize::MAX]), ..g });
            ("page_size not a power of two from 16 to 2^20", Want::Shape("page_size"), Same)
        }
        1 => {
            set_pages(c, Pages { num_pages: pick(rng, &[0, i32::MAX as usize + 1, usize::MAX]), ..g });
            ("num_pages 0 or past i32::MAX", Want::Shape("num_pages"), Same)
        }
        2 => {
            set_pages(c, Pages { pages_per_seq: pick(rng, &[0, i32::MAX as usize + 1, usize::MAX]), ..g });
            ("pages_per_seq 0 or past i32::MAX", Want::Shape("pages_per_seq"), Same)
        }
        3 => {
            // More keys than a table row's pages hold.
            c.p.seqlen_k = g.pages_per_seq * g.page_size + rng.random_range(1..=g.page_size);
            if c.p.seqlen_k > MAX_SEQLEN {
                return None;
            }
            ("seqlen_k past the table row", Want::Shape("seqlen_k"), Same)
        }
        4 if live => {
            paged_kv(&mut c.p).block_table = planning_index(table.ptr, entries - 1);
            ("block table one entry short", Want::TooSmall("block_table", entries as u64, entries as u64 - 1), Accepted)
        }
        5 if live => {
            paged_kv(&mut c.p).block_table = planning_index(table.ptr + pick(rng, &[1, 2, 3]), table.len);
            ("block table misaligned", Want::Misaligned("block_table"), Accepted)
        }
        6 if live => {
            paged_kv(&mut c.p).block_table = planning_index(0, table.len);
            ("block table null", Want::Buffer("block_table"), Accepted)
        }
        7 if live => {
            // The table inside the bytes the kernel writes (out, or the lse).
            match c.b.lse {
                Some(l) if rng.random_bool(0.4) => {
                    let lse_len = c.p.heads_q * if varlen { tq } else { batch * c.p.seqlen_q };
                    let ptr = l.ptr + 4 * rng.random_range(0..lse_len) as u64;
                    let (o0, o1) = (c.b.o.ptr, c.b.o.ptr + out_bytes);
                    let hit = if ptr < o1 && o0 < ptr + 4 * entries as u64 { "out" } else { "lse" };
                    paged_kv(&mut c.p).block_table = planning_index(ptr, table.len);
                    ("block table over the lse", Want::Buffer(hit), Accepted)
                }
                _ => {
                    let ptr = c.b.o.ptr + 4 * rng.random_range(0..out_bytes / 4);
                    paged_kv(&mut c.p).block_table = planning_index(ptr, table.len);
                    ("block table over the output", Want::Buffer("out"), Accepted)
                }
            }
        }
        8 if live && pg.seqused_k.is_some() => {
            let u = pg.seqused_k.unwrap().buffer();
            paged_kv(&mut c.p).seqused_k = Some(planning_index(u.ptr, batch - 1));
            ("seqused_k one entry short", Want::TooSmall("seqused_k", batch as u64, batch as u64 - 1), Accepted)
        }
        9 if live && pg.seqused_k.is_some() => {
            let u = pg.seqused_k.unwrap().buffer();
            if rng.random_bool(0.5) {
                paged_kv(&mut c.p).seqused_k = Some(planning_index(u.ptr + 2, u.len));
                ("seqused_k misaligned", Want::Misaligned("seqused_k"), Accepted)
            } else {
                paged_kv(&mut c.p).seqused_k = Some(planning_index(0, u.len));
                ("seqused_k null", Want::Buffer("seqused_k"), Accepted)
            }
        }
        10 if reads_kv => {
            let i = pick(rng, &[1, 2]);
            let need = kv_need(i);
            buf_mut(&mut c.b, i).len = need - 1;
            ("cache one element short", Want::TooSmall(TENSORS[i], need as u64, need as u64 - 1), Accepted)
        }
        11 if c.t.arch != Arch::Sm90a => {
            c.p.kernel = KernelChoice::Wgmma { config: None, persistent: None };
            ("paged wgmma path on a GPU without sm_90a", Want::PathUnavailable("wgmma"), Same)
        }
        12 => {
            // Paged calls take the split table's configuration (the forced one where it is of
            // that table and the padded head_dim).
            let bogus = TileConfig { block_m: 96, ..SPLIT_CONFIGS[0] };
            let others: Vec<TileConfig> = CONFIGS
                .iter()
                .chain(&VARLEN_CONFIGS)
                .chain(&SPLIT_CONFIGS)
                .copied()
                .chain([bogus])
                .filter(|k| !(k.head_dim == pd && SPLIT_CONFIGS.contains(k)))
                .collect();
            edit(&mut c.p, |b| b.config(pick(rng, &others)));
            ("paged config other than the split table's", Want::Shape("config"), Same)
        }
        13 => {
            c.p.num_splits = Some(pick(rng, &[33, 1000, usize::MAX]));
            ("paged num_splits past 32", Want::Shape("num_splits"), Same)
        }
        14 if reads_kv => {
            let mut st = s;
            st[1].batch = pick(rng, &[-8, -(1 << 20), i64::MIN]);
            set_strides(&mut c.p, st);
            ("negative page stride", Want::Strides("k"), Accepted)
        }
        15 if reads_kv => {
            c.b.v.ptr += pick(rng, &[2, 4, 8]);
            ("value cache misaligned", Want::Misaligned("v"), Accepted)
        }
        16 if varlen && !is_device(&c.p) => {
            let AttentionParams { layout, seqlen_k, .. } = &mut c.p;
            let Rows::Packed(Offsets::Host { cu_seqlens_k, .. }) = &mut layout.rows else { unreachable!() };
            if cu_seqlens_k.is_empty() {
                return None;
            }
            let j = rng.random_range(0..batch);
            let extra = (*seqlen_k - (cu_seqlens_k[j + 1] - cu_seqlens_k[j]) as usize + 1) as i32;
            cu_seqlens_k[j + 1..].iter_mut().for_each(|x| *x += extra);
            ("paged key offsets with a sequence past seqlen_k", Want::Shape("cu_seqlens_k"), Same)
        }
        17 if varlen && is_device(&c.p) && live => {
            let dev = device_offsets(&mut c.p);
            let b = dev.cu_seqlens_q.buffer();
            dev.cu_seqlens_q = planning_index(b.ptr, batch);
            ("paged device query offsets one short", Want::TooSmall("cu_seqlens_q", batch as u64 + 1, batch as u64), Accepted)
        }
        18 if reads_kv => {
            // The output inside the bytes the kernel reads of a cache.
            let i = pick(rng, &[1, 2]);
            let b = *buf_mut(&mut c.b, i);
            c.b.o.ptr = b.ptr + 16 * rng.random_range(0..=(2 * kv_need(i) as u64 / 16).saturating_sub(1).min(1000));
            ("output inside a cache", Want::Buffer("out"), Accepted)
        }
        19 => {
            // The split configuration forced where the target lacks its shared memory.
            let big: Vec<TileConfig> = SPLIT_CONFIGS.iter().copied().filter(|k| k.head_dim == pd && !fits(k, &c.t)).collect();
            if big.is_empty() {
                return None;
            }
            let k = pick(rng, &big);
            edit(&mut c.p, |b| b.config(k));
            ("paged split config past the target's shared memory", Want::SharedMemory(mma_smem(&k) as u64, c.t.max_smem_per_block as u64), Same)
        }
        20 => {
            // Paged caches take no modifications yet (a softcap only where it is valid: a bad
            // one is named first).
            let array = f32_array(BufferRef { ptr: MOD_REGIONS[1] * REGION, len: c.p.heads_q.max(1) });
            let cap = 30.0;
            match rng.random_range(0..4) {
                0 => c.p.mods.window.left = Some(rng.random_range(0..=c.p.seqlen_k)),
                1 if softcap_ok(cap, call_scale(&c.p)) => c.p.mods.softcap = Some(cap),
                2 => c.p.mods.sinks = Some(array),
                _ => edit(&mut c.p, |b| b.alibi(array, false)),
            }
            ("modifications on a paged call", Want::Shape("mods"), Same)
        }
        _ => return None,
    })
}

/// A hostile paged call: a valid one with one to three fields replaced by hostile values (page
/// geometry, index arrays, sizes, strides, kernel choice, split count, buffers).
fn hostile_paged_case(rng: &mut StdRng) -> Case {
    let mut c = paged_case(rng);
    for _ in 0..rng.random_range(1..=3) {
        let batch = c.p.batch;
        let pg = *paged_kv(&mut c.p);
        let g = pg.pages;
        let hostile_index = |rng: &mut StdRng, region: u64, len: usize| {
            let b = hostile_buf(rng, region, len, 4);
            planning_index(b.ptr, b.len)
        };
        match rng.random_range(0..15) {
            0 => {
                let any = hostile_dim(rng);
                paged_kv(&mut c.p).pages.page_size = pick(rng, &[0, 1, 8, 15, 16, 17, 24, 32, 1 << 20, 1 << 21, usize::MAX, any]);
            }
            1 => paged_kv(&mut c.p).pages.num_pages = hostile_dim(rng),
            2 => paged_kv(&mut c.p).pages.pages_per_seq = hostile_dim(rng),
            3 => paged_kv(&mut c.p).block_table = hostile_index(rng, 6, batch.saturating_mul(g.pages_per_seq)),
            4 => paged_kv(&mut c.p).seqused_k = rng.random_bool(0.7).then(|| hostile_index(rng, 7, batch)),
            5 => c.p.batch = hostile_dim(rng),
            6 => {
                let (any, row) = (hostile_dim(rng), g.pages_per_seq.saturating_mul(g.page_size));
                c.p.seqlen_k = pick(rng, &[any, row, row.saturating_add(1)]);
            }
            7 => {
                let Ok(mut s) = call_strides(&c.p) else { continue };
                let t = rng.random_range(0..4);
                s[t] = Strides { batch: hostile_stride(rng), ..s[t] };
                if rng.random_bool(0.5) {
                    s[t].row = hostile_stride(rng);
                }
                set_strides(&mut c.p, s);
            }
            8 => c.p.kernel = hostile_kernel(rng),
            9 => c.p.num_splits = hostile_splits(rng),
            10 => {
                let i = rng.random_range(0..4);
                let b = buf_mut(&mut c.b, i);
                *b = hostile_buf(rng, i as u64 + 1, b.len, 16);
            }
            11 => c.p.seqlen_q = hostile_dim(rng),
            12 => {
                c.p.heads_q = hostile_dim(rng);
                let any = hostile_dim(rng);
                c.p.heads_kv = pick(rng, &[1, c.p.heads_q, any]);
            }
            13 => c.p.head_dim_v = hostile_dim_v(rng),
            _ => c.p.head_dim = pick(rng, &[0, 8, 64, 72, 128, 136, 256, 264, usize::MAX]),
        }
    }
    c
}

// ------------------------------------------------------------------------------------------
// Sizes of hostile calls.

/// `contiguous_lens` and `tensor_strides` of any call: exact values (Q and K of head_dim
/// columns, V and the output of head_dim_v), or a typed error only where a count (rows,
/// elements per row, elements of a tensor) or a default stride overflows; never a panic.
fn check_sizes(p: &AttentionParams) -> Result<(), String> {
    let lens = catch_unwind(AssertUnwindSafe(|| p.contiguous_lens())).map_err(|_| "contiguous_lens panicked".to_string())?;
    let mul = |a: Option<u128>, b: usize| a.and_then(|a| a.checked_mul(b as u128));
    let big = |x: Option<u128>| x.is_none_or(|x| x > usize::MAX as u128);
    let packed = match &p.layout.rows {
        Rows::Packed(o) => Some(offset_totals(o)),
        Rows::Batched => None,
        _ => unreachable!("a layout the model does not know"),
    };
    let rows_q = packed.map_or(mul(Some(p.batch as u128), p.seqlen_q), |t| Some(t.0 as u128));
    let rows_kv = match (&p.layout.kv, packed) {
        (Kv::Paged(pg), _) => mul(Some(pg.pages.num_pages as u128), pg.pages.page_size),
        (Kv::Tensors, Some(t)) => Some(t.1 as u128),
        (Kv::Tensors, None) => mul(Some(p.batch as u128), p.seqlen_k),
        _ => unreachable!("a layout the model does not know"),
    };
    let (d, dv) = (p.head_dim, dim_v(p));
    // Each tensor's elements in exact arithmetic (`None`: past u128): rows times heads times its
    // head dimension; the lse's rows times heads.
    let (q_rows, kv_rows) = (mul(rows_q, p.heads_q), mul(rows_kv, p.heads_kv));
    let want = [("q", mul(q_rows, d)), ("k", mul(kv_rows, d)), ("v", mul(kv_rows, dv)), ("out", mul(q_rows, dv)), ("lse", q_rows)];
    let per_row = [mul(Some(p.heads_q as u128), d), mul(Some(p.heads_q as u128), dv), mul(Some(p.heads_kv as u128), d), mul(Some(p.heads_kv as u128), dv)];
    let overflow = [rows_q, rows_kv, kv_rows].into_iter().chain(per_row).chain(want.map(|(_, n)| n)).any(big);
    match lens {
        Ok(flashrs::TensorLens { q, k, v, out, lse }) => {
            for ((name, got), (_, n)) in [("q", q), ("k", k), ("v", v), ("out", out), ("lse", lse)].into_iter().zip(want) {
                ensure!(!big(n) && n == Some(got as u128), "contiguous_lens: {name} {got}, want {n:?}");
            }
        }
        Err(Error::InvalidShape { what: "sizes", .. }) => ensure!(overflow, "contiguous_lens refused counts that fit: {want:?}"),
        Err(e) => return Err(format!("contiguous_lens: {e:?}")),
    }
    let strides = catch_unwind(AssertUnwindSafe(|| p.tensor_strides())).map_err(|_| "tensor_strides panicked".to_string())?;
    match (strides, call_strides(p)) {
        (Ok(got), Ok(want)) => ensure!(got == want, "tensor_strides {got:?}, want {want:?}"),
        (Err(Error::InvalidStrides { tensor, .. }), Err(want)) => ensure!(tensor == want, "tensor_strides refused {tensor}, want {want}"),
        (got, want) => return Err(format!("tensor_strides {got:?}, want {want:?}")),
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------
// Rounds.

/// Failures of a family's rounds by kind (the message without its numbers), each with its
/// count and first example: every round runs, and every distinct failure is reported.
#[derive(Default, Debug)]
struct Failures(BTreeMap<String, (usize, String)>);

impl Failures {
    fn add(&mut self, msg: String, example: String) {
        let kind: String = msg.chars().filter(|c| !c.is_ascii_digit()).take(90).collect();
        self.0.entry(kind).or_insert_with(|| (0, format!("{msg}\n{example}"))).0 += 1;
    }
}

/// Counts of one family's rounds.
#[derive(Default, Debug)]
struct Stats {
    valid: usize,
    empty: usize,
    hopper: usize,
    persistent: usize,
    split: usize,
    auto_split: usize,
    packs_gqa: usize,
    /// Plans of modification kernels, and of those the Hopper ones.
    mods: usize,
    mods_hopper: usize,
    /// Plans of calls whose V has a head dimension other than K's, and of those the Hopper
    /// kernels of the pair's own.
    dims_v: usize,
    native: usize,
    targets: BTreeMap<&'static str, usize>,
    kernels: BTreeMap<&'static str, usize>,
    faults: BTreeMap<&'static str, usize>,
    hostile_ok: usize,
    hostile_err: usize,
    failures: Failures,
}

impl Stats {
    fn count(&mut self, c: &Case, plan: &LaunchPlan) {
        self.valid += 1;
        self.empty += plan.is_empty() as usize;
        self.hopper += matches!(plan.kernel, Kernel::Sm90 { .. }) as usize;
        self.persistent += plan.persistent as usize;
        self.split += plan.split.is_some() as usize;
        self.auto_split += (plan.split.is_some() && c.p.num_splits.is_none()) as usize;
        self.packs_gqa += (plan.packs_gqa && !plan.is_empty()) as usize;
        self.mods += kernel_mods(&plan.kernel) as usize;
        self.mods_hopper += (kernel_mods(&plan.kernel) && matches!(plan.kernel, Kernel::Sm90 { .. })) as usize;
        self.dims_v += (dim_v(&c.p) != c.p.head_dim) as usize;
        self.native += matches!(plan.kernel, Kernel::Sm90 { config, .. } if config.head_dim_v != config.head_dim) as usize;
        *self.targets.entry(target_name(&c.t)).or_default() += 1;
        let kind = match plan.kernel {
            Kernel::Sm90 { varlen: false, paged: false, .. } => "sm90",
            Kernel::Sm90 { varlen: true, paged: false, .. } => "sm90 varlen",
            Kernel::Sm90 { paged: true, .. } => "sm90 paged",
            Kernel::Mma { variant: Variant::Plain, .. } => "plain",
            Kernel::Mma { variant: Variant::Varlen, .. } => "varlen",
            Kernel::Mma { variant: Variant::Split, .. } => "split",
            Kernel::Mma { variant: Variant::Paged, .. } => "paged",
            Kernel::Mma { variant: Variant::VarlenSplit, .. } => "varlen split",
            Kernel::Mma { variant: Variant::VarlenPaged, .. } => "varlen paged",
            Kernel::Bwd { .. } => "backward",
            Kernel::Merge { .. } => "merge",
        };
        *self.kernels.entry(kind).or_default() += 1;
    }
}

/// One family of calls: its valid calls, its faults, its hostile calls.
struct Family {
    name: &'static str,
    valid: fn(&mut StdRng) -> Case,
    inject: fn(&mut StdRng, &mut Case) -> Option<Fault>,
    hostile: fn(&mut StdRng) -> Case,
}

/// `rounds` rounds of a family: a valid call (accepted, its plan passing the model), one with
/// a fault (exactly its error; the same again, planning is pure; the emptied call as the fault
/// says), and two hostile ones (a typed error, or a plan passing the model; never a panic; their
/// sizes exact or a typed error).
fn run_family(f: &Family, rounds: usize) -> Stats {
    let start = std::time::Instant::now();
    let (mut rng, seed) = case_rng();
    let name = f.name;
    let mut st = Stats::default();
    for i in 0..rounds {
        let at = |c: &Case| format!("{name} case {i} (seed {seed}) on the {}: {c:?}", target_name(&c.t));
        let c = (f.valid)(&mut rng);
        match c.plan() {
            Err(panic) => st.failures.add(format!("valid call: {panic}"), at(&c)),
            Ok(Err(e)) => st.failures.add(format!("valid call refused: {e}"), at(&c)),
            Ok(Ok(plan)) => match verify_plan(&c, &plan) {
                Ok(()) => st.count(&c, &plan),
                Err(e) => st.failures.add(format!("valid call planned wrongly: {e}"), format!("{}\n{plan:?}", at(&c))),
            },
        }

        let (mut c, (what, want, when_empty)) = loop {
            let mut c = (f.valid)(&mut rng);
            if let Some(w) = (f.inject)(&mut rng, &mut c) {
                break (c, w);
            }
        };
        *st.faults.entry(what).or_default() += 1;
        match c.plan() {
            Err(panic) => st.failures.add(format!("{what}: {panic}"), at(&c)),
            Ok(Ok(plan)) => st.failures.add(format!("{what}: accepted"), format!("{}\n{plan:?}", at(&c))),
            Ok(Err(e)) if !error_matches(&e, &want) => st.failures.add(format!("{what}: got `{e}`, want {want:?}"), at(&c)),
            Ok(Err(_)) => {}
        }
        if format!("{:?}", c.plan()) != format!("{:?}", c.plan()) {
            st.failures.add(format!("{what}: planning is not pure"), at(&c));
        }
        make_empty(&mut c.p);
        let r = c.plan();
        let ok = match (when_empty, &r) {
            (_, Err(_)) => false,
            (WhenEmpty::Same, Ok(r)) => r.as_ref().is_err_and(|e| error_matches(e, &want)),
            (WhenEmpty::Accepted, Ok(r)) => r.as_ref().is_ok_and(|p| p.is_empty()),
            (WhenEmpty::Skip, Ok(_)) => true,
        };
        if !ok {
            st.failures.add(format!("{what}, emptied: {r:?}, want {when_empty:?} {want:?}"), at(&c));
        }

        for _ in 0..2 {
            let c = (f.hostile)(&mut rng);
            if let Err(e) = check_sizes(&c.p) {
                st.failures.add(format!("hostile sizes: {e}"), at(&c));
            }
            match c.plan() {
                Err(panic) => st.failures.add(format!("hostile call: {panic}"), at(&c)),
                Ok(Ok(plan)) => match verify_plan(&c, &plan) {
                    Ok(()) => st.hostile_ok += 1,
                    Err(e) => st.failures.add(format!("hostile call planned wrongly: {e}"), format!("{}\n{plan:?}", at(&c))),
                },
                Ok(Err(e @ (Error::NoGpu(_) | Error::UnsupportedGpu { .. } | Error::Driver { .. } | Error::Kernels(_) | Error::WrongContext(_)))) => {
                    st.failures.add(format!("planning returned a GPU error: {e}"), at(&c))
                }
                Ok(Err(_)) => st.hostile_err += 1,
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{name} (seed {seed}): {} valid calls accepted and modelled ({} empty, {} Hopper of which {} persistent, {} split of which {} automatic, {} GQA-packed, \
         {} with modifications of which {} Hopper, {} with V of its own head_dim of which {} on a Hopper kernel of the pair's), {} single faults each rejected with \
         its error ({} kinds), {} hostile calls accepted and modelled, {} rejected, in {secs:.2} s",
        st.valid,
        st.empty,
        st.hopper,
        st.persistent,
        st.split,
        st.auto_split,
        st.packs_gqa,
        st.mods,
        st.mods_hopper,
        st.dims_v,
        st.native,
        st.faults.values().sum::<usize>(),
        st.faults.len(),
        st.hostile_ok,
        st.hostile_err
    );
    println!("  {name} targets {:?}, kernels {:?}", st.targets, st.kernels);
    for (what, n) in &st.faults {
        println!("  {name} fault {what}: {n}");
    }
    for (kind, (n, first)) in &st.failures.0 {
        println!("  {name} FAILURE x{n}: {kind}\n    first: {first}");
    }
    st
}

/// Asserts that a family ran clean and exercised what it must; the failures first, each kind
/// with its first example.
fn assert_coverage(name: &str, st: &Stats, fault_kinds: usize, hostile_ok: usize) {
    let failures: Vec<String> = st.failures.0.iter().map(|(kind, (n, first))| format!("x{n} {kind}\n  first: {first}")).collect();
    assert!(failures.is_empty(), "{name}: {} kinds of failure:\n{}", failures.len(), failures.join("\n"));
    assert!(st.faults.len() >= fault_kinds, "{name}: some fault kinds never drawn: {:?}", st.faults);
    assert!(st.hostile_ok >= hostile_ok, "{name}: too few hostile calls accepted ({}) to exercise the model", st.hostile_ok);
    assert!(st.targets.len() == Target::PRESETS.len() && st.targets.values().all(|&n| n >= 50), "{name}: targets too one-sided: {:?}", st.targets);
}

/// Rounds per family: each a valid call, a faulty one, two hostile ones.
const ROUNDS: usize = 20_000;

#[test]
fn fixed_length_plans_hold_the_kernels_addresses() {
    let fam = Family { name: "fixed-length", valid: valid_case, inject, hostile: hostile_case };
    let st = run_family(&fam, ROUNDS);
    assert_coverage(fam.name, &st, 37, 1000);
    assert!(st.split >= ROUNDS / 20 && st.auto_split >= ROUNDS / 40 && st.packs_gqa >= ROUNDS / 40, "too few split or packed plans: {st:?}");
    assert!(st.hopper >= ROUNDS / 20 && st.persistent >= 1, "too few Hopper plans: {st:?}");
    assert!(st.mods >= ROUNDS / 10 && st.mods_hopper >= ROUNDS / 100, "too few plans with modifications: {st:?}");
    assert!(st.dims_v >= ROUNDS / 10 && st.native >= ROUNDS / 500, "too few plans with V of its own head_dim: {st:?}");
}

#[test]
fn varlen_plans_hold_the_kernels_addresses() {
    let fam = Family { name: "variable-length", valid: varlen_case, inject: inject_varlen, hostile: hostile_varlen_case };
    let st = run_family(&fam, ROUNDS);
    assert_coverage(fam.name, &st, 34, 1000);
    assert!(st.empty >= 10 && st.split >= ROUNDS / 40 && st.hopper >= ROUNDS / 40, "variable-length calls too one-sided: {st:?}");
    assert!(st.kernels.get("varlen split").is_some_and(|&n| n >= 10), "too few decode tiles or splits: {:?}", st.kernels);
    assert!(st.mods >= ROUNDS / 10 && st.mods_hopper >= ROUNDS / 100, "too few variable-length plans with modifications: {st:?}");
    assert!(st.dims_v >= ROUNDS / 10 && st.native >= ROUNDS / 500, "too few variable-length plans with V of its own head_dim: {st:?}");
}

#[test]
fn paged_plans_hold_the_kernels_addresses() {
    let fam = Family { name: "paged", valid: paged_case, inject: inject_paged, hostile: hostile_paged_case };
    let st = run_family(&fam, ROUNDS);
    assert_coverage(fam.name, &st, 23, 1000);
    assert!(st.split >= ROUNDS / 20 && st.auto_split >= ROUNDS / 40 && st.packs_gqa >= ROUNDS / 40, "too few split or packed paged plans: {st:?}");
    assert!(st.kernels.get("varlen paged").is_some_and(|&n| n >= ROUNDS / 10), "too few variable-length paged plans: {:?}", st.kernels);
}

// ------------------------------------------------------------------------------------------
// Fixed cases.

/// Plans `c`, which must be accepted, and checks the plan against the model.
fn accepted(what: &str, c: &Case) -> LaunchPlan {
    let plan = c.plan().unwrap_or_else(|e| panic!("{what} on the {}: {e}", target_name(&c.t)));
    let plan = plan.unwrap_or_else(|e| panic!("{what} on the {}: refused: {e}\n{c:?}", target_name(&c.t)));
    verify_plan(c, &plan).unwrap_or_else(|e| panic!("{what} on the {}: {e}\n{c:?}\n{plan:?}", target_name(&c.t)));
    plan
}

/// Plans `c`, which must be refused with `want`.
fn refused(what: &str, c: &Case, want: Want) {
    let r = c.plan().unwrap_or_else(|e| panic!("{what} on the {}: {e}", target_name(&c.t)));
    assert!(r.as_ref().is_err_and(|e| error_matches(e, &want)), "{what} on the {}: got {:?}, want {want:?}", target_name(&c.t), r.map(|p| p.kernel));
}

/// f16 buffers in their own regions of these lengths (`usize::MAX`: any).
fn bufs(q: usize, k: usize, o: usize, lse: Option<usize>) -> Buffers {
    let r = |i: u64, len: usize| BufferRef { ptr: i * REGION, len };
    buffers(DType::F16, [r(1, q), r(2, k), r(3, k), r(4, o)], lse.map(|len| r(5, len)))
}

/// Buffers exactly as large as a contiguous call needs (V and the output of head_dim_v
/// columns).
fn exact(p: &AttentionParams) -> Buffers {
    let flashrs::TensorLens { q, k, v, out, lse } = p.contiguous_lens().unwrap();
    let mut b = bufs(q, k, out, Some(lse));
    b.v.len = v;
    b
}

/// Cases at the edges of the limits, on every target: accepted (and modelled) or refused with
/// their typed errors as documented.
#[test]
fn plan_limits_at_the_edges() {
    let any = usize::MAX;
    for t in Target::PRESETS {
        let case = |p: AttentionParams<'static>, b: Buffers| Case { p, b, t };
        // Longest sequences: i32::MAX / 2 rows.
        let n = MAX_SEQLEN;
        accepted("i32::MAX / 2 rows", &case(params(1, n, n, 1, 64).causal(true).build().unwrap(), bufs(n * 64, n * 64, n * 64, Some(n))));
        for (sq, sk, what) in [(n + 1, 1, "seqlen_q"), (1, n + 1, "seqlen_k")] {
            refused(what, &case(params(1, sq, sk, 1, 64).build().unwrap(), bufs(any, any, any, None)), Want::Shape(what));
        }
        // Grid: batch * heads beyond 65535 is fine (1-D grid); past i32::MAX CTAs is not.
        let plan = accepted("70000 sequences", &case(params(70000, 3, 3, 1, 64).build().unwrap(), bufs(70000 * 3 * 64, 70000 * 3 * 64, 70000 * 3 * 64, Some(70000 * 3))));
        assert_eq!(plan.tiles, 70000);
        let plan = accepted("i32::MAX heads", &case(params(1, 1, 1, i32::MAX as usize, 8).build().unwrap(), bufs(any, any, any, None)));
        assert_eq!(plan.tiles, i32::MAX as u32);
        for (b, h) in [(2, i32::MAX as usize / 2 + 1), ((1 << 63) + 1, 2), (1 << 32, 1 << 32)] {
            refused("a grid past i32::MAX CTAs", &case(params(b, 1, 1, h, 8).build().unwrap(), bufs(any, any, any, None)), Want::Launch);
        }
        // Zero sizes: nothing to do whatever the buffers.
        let null = bufs(0, 0, 0, None).map_ptrs(0);
        for p in [params(0, 5, 5, 2, 64), params(2, 5, 5, 0, 64).heads_kv(0), params(2, 0, 5, 2, 64)] {
            assert!(accepted("zero sizes", &case(p.build().unwrap(), null)).is_empty());
        }
        // No keys: K and V may be anything, even null.
        let mut b = bufs(2 * 5 * 2 * 64, 0, 2 * 5 * 2 * 64, Some(20));
        (b.k.ptr, b.v.ptr) = (0, 3);
        accepted("no keys", &case(params(2, 5, 0, 2, 64).build().unwrap(), b));

        // GQA-packed decode: a group of i32::MAX / 2 query heads per K/V head is the longest
        // packed query block; more are refused, never planned with their rows truncated to 32
        // bits (heads_q = 2^32 + 16 packs to 16 rows in u32).
        let p = params(1, 1, 64, n, 8).heads_kv(1).build().unwrap();
        let plan = accepted("GQA-packed decode of i32::MAX / 2 heads", &case(p.clone(), exact(&p)));
        assert!(plan.packs_gqa && plan.params.seqlen_q as usize == n, "{plan:?}");
        for (hq, hkv) in [((1 << 32) + 16, 1), (n + 1, 1), (1 << 31, 2), ((1 << 33) + 64, 8)] {
            let p = params(1, 1, 64, hq, 8).heads_kv(hkv).build().unwrap();
            refused("GQA-packed decode of a group past i32::MAX / 2", &case(p.clone(), exact(&p)), Want::Shape("query rows"));
            // Unpacked (on the wgmma path) the same heads are one CTA each.
            if t.arch == Arch::Sm90a && hq <= i32::MAX as usize {
                let p = p.to_builder().path(flashrs::KernelPath::Wgmma).build().unwrap();
                assert!(!accepted("the same decode on the wgmma path", &case(p.clone(), exact(&p))).packs_gqa);
            }
        }

        // Split-KV: the workspace's 32-bit indices hold 31 splits of 2^27 rows, not 32.
        for (splits, ok) in [(31, true), (32, false)] {
            let p = params(1 << 20, 128, splits * 64, 1, 64).num_splits(splits).build().unwrap();
            let c = case(p.clone(), exact(&p));
            if ok {
                let plan = accepted("31 splits of 2^27 rows", &c);
                assert_eq!(plan.split.as_ref().map(|s| s.num_splits), Some(31));
            } else {
                refused("32 splits of 2^27 rows", &c, Want::Launch);
            }
        }
        // 32 splits at most, and at least one key tile each.
        let p = params(1, 1, 100_000, 8, 128).heads_kv(8).num_splits(32).build().unwrap();
        assert_eq!(accepted("32 splits", &case(p.clone(), exact(&p))).split.map(|s| s.num_splits), Some(32));
        let p = params(1, 1, 130, 8, 128).heads_kv(8).num_splits(32).build().unwrap();
        let plan = accepted("32 splits of 130 keys", &case(p.clone(), exact(&p)));
        assert!(plan.split.as_ref().map_or(1, |s| s.num_splits as usize) <= 130usize.div_ceil(plan.kernel.block_n()), "{plan:?}");

        // Paged: pages of 2^20 rows; keys filling the table rows exactly; i32::MAX pages.
        let table = |len: usize| planning_index(6 * REGION, len);
        let paged = |pages: Pages, sk: usize| {
            let p = params(2, 1, sk, 8, 64).heads_kv(2).paged(PagedKv::new(pages, table(2 * pages.pages_per_seq))).build().unwrap();
            // Caches of up to 2^44 bytes each, far from the other buffers.
            let mut b = exact(&p);
            (b.k.ptr, b.v.ptr) = (1 << 50, 1 << 51);
            case(p, b)
        };
        let pages = Pages { page_size: 1 << 20, num_pages: 3, pages_per_seq: 2 };
        accepted("pages of 2^20 rows", &paged(pages, 1 << 21));
        refused("keys past the table rows", &paged(pages, (1 << 21) + 1), Want::Shape("seqlen_k"));
        refused("pages of 2^21 rows", &paged(Pages { page_size: 1 << 21, ..pages }, 5), Want::Shape("page_size"));
        accepted("i32::MAX pages", &paged(Pages { page_size: 16, num_pages: i32::MAX as usize, pages_per_seq: 4 }, 64));
        refused("i32::MAX + 1 pages", &paged(Pages { page_size: 16, num_pages: i32::MAX as usize + 1, pages_per_seq: 4 }, 64), Want::Shape("num_pages"));
    }
}

trait MapPtrs {
    fn map_ptrs(self, ptr: u64) -> Self;
}

impl MapPtrs for Buffers {
    /// The same buffers at address `ptr`.
    fn map_ptrs(self, ptr: u64) -> Self {
        let at = |b: BufferRef| BufferRef { ptr, ..b };
        buffers(self.dtype, [at(self.q), at(self.k), at(self.v), at(self.o)], self.lse.map(at))
    }
}

/// Huge sizes: `contiguous_lens`, `tensor_strides` and planning answer with typed errors
/// (never a panic or a wrapped count).
#[test]
fn huge_sizes_are_typed_errors() {
    let huge = [
        params(1 << 40, 1 << 50, 1 << 50, 1 << 10, 256),
        params(usize::MAX, 2, 2, 2, 64),
        params(2, 2, 2, usize::MAX / 64 + 1, 64).heads_kv(1),
        params(1, 1, 1, 1, 64).paged(PagedKv::new(Pages { page_size: 1 << 20, num_pages: usize::MAX / 4, pages_per_seq: 1 }, planning_index(6 * REGION, 1))),
        params(1, 1, 1, 2, 64).varlen_device(DeviceOffsets::new(planning_index(6 * REGION, 2), usize::MAX).keys(planning_index(7 * REGION, 2), 1)),
        // Q and K fit; V's and the output's elements (and default strides) do not.
        params(2, 2, 2, 2, 64).head_dim_v(usize::MAX / 2),
    ]
    .map(|p| p.build().unwrap());
    for p in &huge {
        assert!(matches!(p.contiguous_lens(), Err(Error::InvalidShape { what: "sizes", .. })), "{p:?}: {:?}", p.contiguous_lens());
        check_sizes(p).unwrap_or_else(|e| panic!("{p:?}: {e}"));
        for t in Target::PRESETS {
            let c = Case { p: p.clone(), b: bufs(usize::MAX, usize::MAX, usize::MAX, Some(usize::MAX)), t };
            match c.plan() {
                Err(panic) => panic!("{p:?}: {panic}"),
                Ok(Ok(plan)) => panic!("{p:?} planned: {plan:?}"),
                Ok(Err(_)) => {}
            }
        }
    }
    for p in [huge[0].clone(), huge[0].to_builder().dim_order(DimOrder::Bhsd).build().unwrap()] {
        assert!(matches!(p.tensor_strides(), Err(Error::InvalidStrides { tensor: "q", .. })), "{:?}", p.tensor_strides());
    }
}

/// V (and the output) of a head dimension of their own at the edges, on every target and kernel
/// family: pairs narrower and wider either way planned (and modelled) with buffers exactly as
/// large as the model says, one element fewer in V or the output refused; an unsupported
/// head_dim_v refused, after an unsupported head_dim; a forced configuration that holds
/// head_dim but not head_dim_v refused; paged caches of either.
#[test]
fn head_dim_v_at_the_edges() {
    let any = usize::MAX;
    for t in Target::PRESETS {
        let case = |p: AttentionParams<'static>, b: Buffers| Case { p, b, t };
        let hopper = t.arch == Arch::Sm90a;
        let wgmma = KernelChoice::Wgmma { config: None, persistent: None };
        for (d, dv) in [(192, 128), (128, 64), (64, 128), (8, 256), (256, 8), (136, 72), (40, 72), (192, 136)] {
            let kernels = [KernelChoice::Auto, KernelChoice::MmaSync { config: None }].into_iter().chain(hopper.then_some(wgmma));
            for kernel in kernels {
                let mut p = params(2, 100, 300, 8, d).heads_kv(2).head_dim_v(dv).causal(true).build().unwrap();
                p.kernel = kernel;
                // Contiguous: Q 2 x 100 x 8 x d, K 2 x 300 x 2 x d, V 2 x 300 x 2 x dv, out 2 x
                // 100 x 8 x dv.
                let (v, o) = (2 * 300 * 2 * dv, 2 * 100 * 8 * dv);
                let mut b = bufs(2 * 100 * 8 * d, 2 * 300 * 2 * d, o, Some(2 * 8 * 100));
                b.v.len = v;
                let what = format!("head_dim {d} with head_dim_v {dv}, {kernel:?}");
                let plan = accepted(&what, &case(p.clone(), b));
                assert_eq!((plan.params.head_dim, plan.params.head_dim_v), (d as u32, dv as u32), "{what}: {plan:?}");
                if hopper && (d, dv) == (192, 128) && kernel != (KernelChoice::MmaSync { config: None }) {
                    assert_eq!(kernel_dims(&plan.kernel), (192, 128), "{what}: the pair's own Hopper kernel");
                }
                let mut short = b;
                short.v.len -= 1;
                refused(&format!("{what}, V one short"), &case(p.clone(), short), Want::TooSmall("v", v as u64, v as u64 - 1));
                let mut short = b;
                short.o.len -= 1;
                refused(&format!("{what}, out one short"), &case(p.clone(), short), Want::TooSmall("out", o as u64, o as u64 - 1));
            }
        }
        for dv in [0, 12, 100, 264, usize::MAX] {
            let p = params(1, 4, 4, 2, 64).head_dim_v(dv).build().unwrap();
            refused("an unsupported head_dim_v", &case(p.clone(), bufs(any, any, any, None)), Want::HeadDimV(dv));
            let p = params(1, 4, 4, 2, 12).head_dim_v(dv).build().unwrap();
            refused("unsupported head_dim and head_dim_v", &case(p, bufs(any, any, any, None)), Want::HeadDim(12));
        }
        // Forced configurations for Q's and K's head_dim, V wider.
        for (d, dv) in [(64, 72), (128, 136), (120, 256)] {
            for config in CONFIGS.into_iter().filter(|c| c.head_dim >= d && c.head_dim < dv) {
                let p = params(1, 64, 64, 2, d).head_dim_v(dv).config(config).build().unwrap();
                refused("a forced config holding head_dim, not head_dim_v", &case(p, bufs(any, any, any, None)), Want::Shape("config"));
            }
            if hopper {
                for config in sm90::CONFIGS.into_iter().filter(|c| c.head_dim >= d && c.head_dim_v < dv) {
                    let mut p = params(1, 64, 64, 2, d).head_dim_v(dv).build().unwrap();
                    p.kernel = KernelChoice::Wgmma { config: Some(config), persistent: None };
                    refused("a forced Hopper config holding head_dim, not head_dim_v", &case(p, bufs(any, any, any, None)), Want::Shape("wgmma path"));
                }
            }
        }
        // Paged: V caches of V's own head_dim, one element short refused.
        let pages = Pages { page_size: 16, num_pages: 16, pages_per_seq: 8 };
        for dv in [128, 120, 136, 64] {
            let mut p = params(2, 1, 100, 8, 128).heads_kv(2).paged(PagedKv::new(pages, planning_index(6 * REGION, 16))).build().unwrap();
            p.head_dim_v = Some(dv);
            let v = 16 * 16 * 2 * dv;
            let mut b = bufs(2 * 8 * 128, 16 * 16 * 2 * 128, 2 * 8 * dv, Some(16));
            (b.k.ptr, b.v.ptr, b.v.len) = (1 << 50, 1 << 51, v);
            let what = format!("a paged call of head_dim 128 with head_dim_v {dv}");
            let plan = accepted(&what, &case(p.clone(), b));
            assert_eq!(plan.params.head_dim_v, dv as u32, "{what}");
            b.v.len -= 1;
            refused(&format!("{what}, V cache one short"), &case(p, b), Want::TooSmall("v", v as u64, v as u64 - 1));
        }
    }
}

/// Host offsets with `batch = usize::MAX` (whose `batch + 1` offsets wrap to 0) are a typed
/// error, not an out-of-bounds `cu[0]`.
#[test]
fn varlen_host_offsets_with_a_wrapping_batch_are_a_typed_error() {
    let null = bufs(0, 0, 0, None).map_ptrs(0);
    for cu in [vec![], vec![0]] {
        let mut p = host_offsets(&cu, &cu).heads_q(1).head_dim(64).build().unwrap();
        p.batch = usize::MAX;
        for t in Target::PRESETS {
            refused("batch usize::MAX with host offsets", &Case { p: p.clone(), b: null, t }, Want::Shape("cu_seqlens_q"));
        }
    }
}

/// Elements Q (`i = 0`, head_dim columns) or the output (`i = 3`, head_dim_v) of an accepted
/// call reaches.
fn qo_need(c: &Case, i: usize) -> usize {
    let s = call_strides(&c.p).unwrap();
    let (nb, rows) = match &c.p.layout.rows {
        Rows::Packed(o) => (1, offset_totals(o).0),
        Rows::Batched => (c.p.batch, c.p.seqlen_q),
        _ => unreachable!("a layout the model does not know"),
    };
    extent([nb, rows, c.p.heads_q, if i == 0 { c.p.head_dim } else { dim_v(&c.p) }], s[i]) as usize
}

fn other_dtype(k: Kernel) -> Kernel {
    let flip = |d: DType| if d == DType::F16 { DType::Bf16 } else { DType::F16 };
    match k {
        Kernel::Mma { dtype, kv, variant, config, flavor } => Kernel::Mma { dtype: flip(dtype), kv, variant, config, flavor },
        Kernel::Sm90 { dtype, inputs, varlen, paged, config, flavor } => Kernel::Sm90 { dtype: flip(dtype), inputs, varlen, paged, config, flavor },
        Kernel::Bwd { dtype, step } => Kernel::Bwd { dtype: flip(dtype), step },
        Kernel::Merge { dtype } => Kernel::Merge { dtype: flip(dtype) },
    }
}

/// A plan made to run `k` instead: its block and shared memory follow.
fn with_kernel(pl: &mut LaunchPlan, k: Kernel) {
    let (_, _, threads, smem, _) = geometry_of(&k);
    (pl.kernel, pl.block, pl.smem) = (k, threads as u32, smem as u32);
}

/// The model is not vacuous: valid plans of every family, edited to be wrong (or checked
/// against edited calls, buffers or targets) in each way it looks for, fail it, each with the
/// check meant for it. A planner that produced any of these would fail the property tests.
#[test]
fn model_rejects_wrong_plans() {
    type Edit = Box<dyn Fn(&mut Case, &mut LaunchPlan)>;
    let (mut rng, seed) = case_rng();
    // A split workspace of 2 splits, 1 counter and 1 partial element each (a `SplitPlan` is
    // the planner's to make: one of its own, edited).
    let bogus_split = {
        let p = params(1, 1, 8192, 8, 128).num_splits(2).build().unwrap();
        let mut s = p.plan(&exact(&p), &Target::H100).unwrap().split.expect("a split plan");
        (s.num_splits, s.counters_len, s.o_accum_len, s.lse_accum_len) = (2, 1, 1, 1);
        s
    };
    let mut caught: BTreeMap<&str, usize> = BTreeMap::new();
    let mut planned = 0;
    let families: [fn(&mut StdRng) -> Case; 3] = [valid_case, varlen_case, paged_case];
    while planned < 1500 {
        let c = families[planned % 3](&mut rng);
        // Calls the planner refuses are the property tests' to report.
        let Ok(Ok(plan)) = c.plan() else { continue };
        if plan.is_empty() {
            continue;
        }
        verify_plan(&c, &plan).unwrap_or_else(|e| panic!("seed {seed}: {e}\n{c:?}"));
        planned += 1;
        let m = read_call(&c.p).unwrap();
        let f = plan.params;
        let (tq, tk) = totals(&c.p);
        let varlen = m.packed.is_some();
        let hopper = matches!(plan.kernel, Kernel::Sm90 { .. });
        let (q_need, o_need) = (qo_need(&c, 0), qo_need(&c, 3));
        let lse_count = f.heads_q as usize * if varlen { tq } else { f.batch as usize * f.seqlen_q as usize };
        let mut edits: Vec<(&'static str, &'static str, Edit)> = vec![
            ("grid", "grid", Box::new(|_, pl| pl.grid += 1)),
            ("tiles", "tiles for", Box::new(|_, pl| pl.tiles += 1)),
            ("block", "block", Box::new(|_, pl| pl.block += 32)),
            ("shared memory", "shared memory", Box::new(|_, pl| pl.smem += 16)),
            ("target without the shared memory", "allows", Box::new(|c, pl| c.t.max_smem_per_block = pl.smem - 1)),
            ("arch", "a plan for", Box::new(|_, pl| pl.arch = if pl.arch == Arch::Sm80 { Arch::Sm90a } else { Arch::Sm80 })),
            ("dtype", "tensors", Box::new(|_, pl| pl.kernel = other_dtype(pl.kernel))),
            (
                "kernel not instantiated",
                "not instantiated",
                Box::new(|_, pl| match &mut pl.kernel {
                    Kernel::Mma { config, .. } => config.block_m = 96,
                    Kernel::Sm90 { config, .. } => config.block_n = 96,
                    Kernel::Bwd { .. } | Kernel::Merge { .. } => unreachable!("a forward plan"),
                }),
            ),
            ("params.batch", "params.batch", Box::new(|_, pl| pl.params.batch += 1)),
            ("params.seqlen_q", "seqlen_q", Box::new(|_, pl| pl.params.seqlen_q = pl.params.seqlen_q.wrapping_add(1 << 31))),
            ("params.seqlen_k", "params.seqlen_k", Box::new(|_, pl| pl.params.seqlen_k += 1)),
            ("params.head_dim", "params.head_dim", Box::new(|_, pl| pl.params.head_dim += 8)),
            ("params.head_dim_v", "params.head_dim_v", Box::new(|_, pl| pl.params.head_dim_v += 8)),
            ("params.m_blocks", "params.m_blocks", Box::new(|_, pl| pl.params.m_blocks += 1)),
            ("params.causal", "causal", Box::new(|_, pl| pl.params.causal ^= 1)),
            ("scale", "scale_log2", Box::new(|_, pl| pl.params.scale_log2 *= 2.0)),
            ("Q strides", "strides", Box::new(|_, pl| pl.params.q_strides[2] += 8)),
            ("interleave", "interleave", Box::new(|_, pl| pl.params.interleave = pl.params.batch * pl.params.heads_q + 1)),
            ("split tiles", "cover", Box::new(|_, pl| pl.params.split_tiles = 0)),
            ("workspace address", "workspace addresses", Box::new(|_, pl| pl.params.o_accum = 16)),
            ("Q one short", "past the buffer", Box::new(move |c, _| c.b.q.len = q_need - 1)),
            ("out one short", "past the buffer", Box::new(move |c, _| c.b.o.len = o_need - 1)),
            (
                "out over Q",
                "overlaps q",
                Box::new(|c, pl| {
                    c.b.o.ptr = c.b.q.ptr;
                    pl.params.o = pl.params.q;
                }),
            ),
            ("call invalid: num_splits", "num_splits", Box::new(|c, _| c.p.num_splits = Some(33))),
            ("call invalid: head_dim", "head_dim", Box::new(|c, _| c.p.head_dim += 4)),
            ("call invalid: head_dim_v", "head_dim_v", Box::new(|c, _| c.p.head_dim_v = Some(dim_v(&c.p) + 4))),
        ];
        if !hopper {
            edits.push(("persistent mma.sync", "persistent", Box::new(|_, pl| pl.persistent = true)));
        }
        let kernel_dv = kernel_dims(&plan.kernel).1;
        if m.paged.is_none() && kernel_dv < 256 {
            // A kernel padded to Q's and K's head_dim only, V wider.
            edits.push((
                "V wider than the kernel",
                "computes head_dim",
                Box::new(move |c, pl| {
                    c.p.head_dim_v = Some(kernel_dv + 8);
                    pl.params.head_dim_v = kernel_dv as u32 + 8;
                }),
            ));
        }
        if m.reads_kv {
            // V's rows of head_dim_v columns.
            let need = if let Some(pg) = m.paged {
                extent([pg.pages.num_pages, pg.pages.page_size, c.p.heads_kv, m.dv], m.strides[2])
            } else if varlen {
                extent([1, tk, c.p.heads_kv, m.dv], m.strides[2])
            } else {
                extent([c.p.batch, c.p.seqlen_k, c.p.heads_kv, m.dv], m.strides[2])
            } as usize;
            edits.push(("V one short", "past the buffer", Box::new(move |c, _| c.b.v.len = need - 1)));
            edits.push(("K address", "params.k", Box::new(|_, pl| pl.params.k += 16)));
        }
        let rows = if varlen { tq } else { c.p.seqlen_q };
        if !plan.packs_gqa && rows > 1 && rows * c.p.heads_q * if varlen { 1 } else { c.p.batch } <= 50_000 {
            edits.push((
                "out rows alias",
                "share memory",
                Box::new(|c, pl| {
                    let s = call_strides(&c.p).unwrap();
                    set_strides(&mut c.p, [s[0], s[1], s[2], Strides { row: 0, ..s[3] }]);
                    pl.params.o_strides[1] = 0;
                }),
            ));
        }
        if c.b.lse.is_some() {
            edits.push(("lse one short", "lse offset", Box::new(move |c, _| c.b.lse.as_mut().unwrap().len = lse_count - 1)));
            edits.push((
                "lse misaligned",
                "misaligned",
                Box::new(|c, pl| {
                    c.b.lse.as_mut().unwrap().ptr += 2;
                    pl.params.lse += 2;
                }),
            ));
            edits.push((
                "lse over out",
                "overlaps",
                Box::new(|c, pl| {
                    c.b.lse.as_mut().unwrap().ptr = c.b.o.ptr;
                    pl.params.lse = pl.params.o;
                }),
            ));
            edits.push(("lse skipped", "skip", Box::new(|_, pl| pl.params.lse = 0)));
        }
        match &plan.split {
            Some(s) => {
                let s = s.clone();
                edits.push(("split workspace short", "split workspace", Box::new(|_, pl| pl.split.as_mut().unwrap().o_accum_len -= 1)));
                edits.push(("split lse workspace short", "split workspace", Box::new(|_, pl| pl.split.as_mut().unwrap().lse_accum_len -= 1)));
                edits.push(("split counters short", "split counters", Box::new(|_, pl| pl.split.as_mut().unwrap().counters_len -= 1)));
                edits.push(("split dropped", "split", Box::new(|_, pl| pl.split = None)));
                if s.num_splits > 2 {
                    edits.push(("an empty split", "empty split", Box::new(|_, pl| pl.params.split_tiles = pl.params.split_tiles.max(1) * pl.params.num_splits)));
                }
            }
            None if !matches!(plan.kernel, Kernel::Mma { variant, .. } if variant.split()) => {
                let split = bogus_split.clone();
                edits.push(("split added", "splits on", Box::new(move |_, pl| pl.split = Some(split.clone()))))
            }
            None => {}
        }
        if plan.packs_gqa {
            edits.push(("packing dropped", "GQA packing", Box::new(|_, pl| pl.packs_gqa = false)));
            // Packed rows and heads swapped: the rows a group's heads apart.
            edits.push((
                "packed Q rows and heads swapped",
                "GQA-packed q strides",
                Box::new(|_, pl| {
                    let [b, r, h] = pl.params.q_strides;
                    pl.params.q_strides = [b, h, r];
                }),
            ));
        }
        match &c.p.layout.rows {
            Rows::Packed(Offsets::Host { .. }) => {
                edits.push(("total_q", "params.total_q", Box::new(|_, pl| pl.params.total_q += 1)));
                edits.push(("offsets not carried", "carries offsets", Box::new(|_, pl| pl.upload = None)));
                edits.push(("other offsets carried", "carries offsets", Box::new(|_, pl| *pl.upload.as_mut().unwrap().last_mut().unwrap() += 1)));
                edits.push(("kernel pointed at offsets", "points at", Box::new(|_, pl| pl.params.cu_seqlens_q = 6 * REGION)));
                let host = |f: fn(&mut Vec<i32>, &mut Vec<i32>, &mut usize)| -> Edit {
                    Box::new(move |c, _| {
                        let AttentionParams { layout, seqlen_q, .. } = &mut c.p;
                        let Rows::Packed(Offsets::Host { cu_seqlens_q, cu_seqlens_k }) = &mut layout.rows else { unreachable!() };
                        f(cu_seqlens_q, cu_seqlens_k, seqlen_q)
                    })
                };
                edits.push(("host offsets: count", "offsets accepted for batch", host(|q, _, _| {
                    q.pop();
                })));
                edits.push(("host offsets: start", "starting at", host(|q, _, _| q[0] = 1)));
                edits.push(("host offsets: decreasing", "decreasing", host(|q, _, _| q[1] = -1)));
                edits.push(("host offsets: too long", "with a maximum of", host(|_, _, most| *most -= 1)));
            }
            Rows::Packed(Offsets::Device(dev)) => {
                let (dev, batch) = (*dev, c.p.batch);
                edits.push(("total_q", "params.total_q", Box::new(|_, pl| pl.params.total_q += 1)));
                edits.push(("offsets not the buffer's", "not the buffer's", Box::new(|_, pl| pl.params.cu_seqlens_q += 4)));
                edits.push(("offsets uploaded", "carries offsets to upload", Box::new(|_, pl| pl.upload = Some(vec![0; 2]))));
                let set_q = |f: fn(BufferRef, usize) -> BufferRef| -> Edit {
                    Box::new(move |c, pl| {
                        let b = f(dev.cu_seqlens_q.buffer(), batch);
                        device_offsets(&mut c.p).cu_seqlens_q = planning_index(b.ptr, b.len);
                        pl.params.cu_seqlens_q = b.ptr;
                    })
                };
                edits.push(("offsets one short", "past the buffer's", set_q(|b, batch| BufferRef { len: batch, ..b })));
                edits.push(("offsets misaligned", "not 4-byte aligned", set_q(|b, _| BufferRef { ptr: b.ptr + 2, ..b })));
                edits.push(("offsets null", "null address", set_q(|b, _| BufferRef { ptr: 0, ..b })));
                edits.push((
                    "out over offsets",
                    "overlaps cu_seqlens_q",
                    Box::new(move |c, pl| {
                        let ptr = c.b.o.ptr + 4;
                        device_offsets(&mut c.p).cu_seqlens_q = planning_index(ptr, dev.cu_seqlens_q.buffer().len);
                        pl.params.cu_seqlens_q = ptr;
                    }),
                ));
                if m.paged.is_none() {
                    edits.push(("no key offsets", "without key offsets", Box::new(|c, _| device_offsets(&mut c.p).cu_seqlens_k = None)));
                }
            }
            _ => {}
        }
        if varlen && m.paged.is_none() {
            edits.push(("total_k", "params.total_k", Box::new(|_, pl| pl.params.total_k += 1)));
            edits.push(("packed Q batch stride", "strides", Box::new(|_, pl| pl.params.q_strides[0] = 8)));
        }
        if let Some(pg) = m.paged {
            let (batch, g) = (c.p.batch, pg.pages);
            edits.push(("table stride", "params.table_stride", Box::new(|_, pl| pl.params.table_stride += 1)));
            edits.push(("last page past the cache", "params.last_page", Box::new(|_, pl| pl.params.last_page += 1)));
            edits.push(("page shift", "page_shift", Box::new(|_, pl| pl.params.page_shift += 1)));
            edits.push((
                "table one short",
                "past the buffer's",
                Box::new(move |c, _| paged_kv(&mut c.p).block_table = planning_index(pg.block_table.buffer().ptr, batch * g.pages_per_seq - 1)),
            ));
            edits.push((
                "table over out",
                "overlaps block_table",
                Box::new(move |c, pl| {
                    let ptr = c.b.o.ptr;
                    paged_kv(&mut c.p).block_table = planning_index(ptr, pg.block_table.buffer().len);
                    pl.params.block_table = ptr;
                }),
            ));
            if let Some(u) = pg.seqused_k {
                edits.push(("seqused_k short", "past the buffer's", Box::new(move |c, _| paged_kv(&mut c.p).seqused_k = Some(planning_index(u.buffer().ptr, batch - 1)))));
            }
            if g.pages_per_seq * g.page_size < MAX_SEQLEN {
                edits.push(("keys past the table row", "keys accepted for table rows", Box::new(move |c, _| c.p.seqlen_k = g.pages_per_seq * g.page_size + 1)));
            }
            if matches!(plan.kernel, Kernel::Mma { .. }) {
                edits.push(("an mma.sync kernel on the wgmma path", "the wgmma path planned", Box::new(|c, _| c.p.kernel = KernelChoice::Wgmma { config: None, persistent: None })));
            }
        }
        if let (KernelChoice::MmaSync { config: Some(forced) }, Kernel::Mma { dtype, kv: None, variant: Variant::Plain, flavor: Flavor::Plain, .. }) = (c.p.kernel, plan.kernel) {
            let other = CONFIGS.iter().copied().find(|k| *k != forced && k.head_dim >= m.kd && fits(k, &c.t));
            if let Some(other) = other {
                edits.push(("forced config ignored", "forced config", Box::new(move |_, pl| with_kernel(pl, Kernel::Mma { dtype, kv: None, variant: Variant::Plain, config: other, flavor: Flavor::Plain }))));
            }
        }
        if let Kernel::Sm90 { dtype, varlen, paged, flavor, .. } = plan.kernel {
            edits.push(("Hopper kernel on an sm_80 target", "no sm_90a module", Box::new(|c, pl| (c.t, pl.arch) = (Target::A100, Arch::Sm80))));
            edits.push(("persistence flipped", "persistent", Box::new(|_, pl| pl.persistent = !pl.persistent)));
            if varlen {
                edits.push(("packed rows dropped", "packed rows", Box::new(|_, pl| pl.packed_rows = None)));
            }
            if paged {
                // Caught as a kernel not instantiated, or one for another layout.
                edits.push(("paged Hopper kernel for an unpaged call", "kernel", Box::new(|_, pl| {
                    let Kernel::Sm90 { paged, .. } = &mut pl.kernel else { unreachable!() };
                    *paged = false;
                })));
            }
            if matches!(c.p.kernel, KernelChoice::Auto) && !paged {
                // Auto on sm_90a planned mma.sync for a call the Hopper kernel takes.
                let t = c.t;
                let (d, rows) = (m.kd, c.p.seqlen_q);
                edits.push((
                    "mma.sync where Hopper takes the call",
                    "although the Hopper kernel takes the call",
                    Box::new(move |_, pl| {
                        let variant = if varlen { Variant::Varlen } else { Variant::Plain };
                        let config = match (flavor.mods(), varlen) {
                            (true, _) => mods_config(padded(d), &t),
                            (false, true) => varlen_config(padded(d), &t),
                            (false, false) => plain_config(d, rows, &t),
                        };
                        with_kernel(pl, Kernel::Mma { dtype, kv: None, variant, config: config.unwrap(), flavor });
                        (pl.persistent, pl.packed_rows) = (false, None);
                    }),
                ));
            }
            if rows > 1 {
                // A row stride of 2^40 bytes: every address in the buffers, but no tensor map.
                edits.push((
                    "Q row stride past a tensor map's",
                    "tensor map",
                    Box::new(|c, pl| {
                        let s = call_strides(&c.p).unwrap();
                        let q = Strides { row: 1 << 39, ..s[0] };
                        set_strides(&mut c.p, [q, s[1], s[2], s[3]]);
                        pl.params.q_strides[1] = 1 << 39;
                        c.b.q.len = usize::MAX / 4;
                    }),
                ));
            }
        }
        mods_edits(&c, &m, &plan, &mut edits);
        for (what, want, edit) in edits {
            let (mut c2, mut pl) = (c.clone(), plan.clone());
            edit(&mut c2, &mut pl);
            match verify_plan(&c2, &pl) {
                Ok(()) => panic!("seed {seed}: the model passed a plan with {what}: {c2:?}\n{pl:?}"),
                Err(e) => assert!(e.contains(want), "seed {seed}: {what}: the model said `{e}`, want `{want}`\n{c:?}\n{plan:?}"),
            }
            *caught.entry(what).or_default() += 1;
        }
    }
    println!("model: {} kinds of wrong plans caught over {planned} plans: {caught:?}", caught.len());
    assert!(caught.len() >= 60, "some edits never tried: {caught:?}");
}

/// A plan edit (of the call, its buffers or target, or the plan), the check it must fail and what
/// the failure must say.
type PlanEdit = (&'static str, &'static str, Box<dyn Fn(&mut Case, &mut LaunchPlan)>);

/// Edits of a valid plan `plan` of `c` in the modifications: the kernel's modification flag
/// flipped, a modification kernel's configuration swapped for another of its head_dim (one of
/// the modification table that fits the target, which the selection rules refuse, else one
/// without modification kernels), the modification parameters changed, the arrays short or
/// under the output, modifications given to a paged call.
fn mods_edits(c: &Case, m: &Model, plan: &LaunchPlan, edits: &mut Vec<PlanEdit>) {
    edits.push((
        "mods flag flipped",
        "modifications",
        Box::new(|_, pl| match &mut pl.kernel {
            Kernel::Mma { flavor, .. } | Kernel::Sm90 { flavor, .. } => *flavor = if flavor.mods() { Flavor::Plain } else { Flavor::Mods },
            Kernel::Bwd { .. } | Kernel::Merge { .. } => unreachable!("a forward plan"),
        }),
    ));
    edits.push(("window_left", "params.mods.window_left", Box::new(|_, pl| pl.params.mods.window_left ^= 1)));
    let swap = match plan.kernel {
        Kernel::Mma { dtype, kv: None, variant, config, flavor: flavor @ (Flavor::Mods | Flavor::Sparse) } => {
            let same = |k: &TileConfig| k.head_dim == config.head_dim && *k != config;
            let table = MODS_CONFIGS.iter().copied().find(|k| same(k) && fits(k, &c.t)).map(|k| (k, "config"));
            let other = table.or_else(|| CONFIGS.iter().copied().find(|k| same(k) && !MODS_CONFIGS.contains(k)).map(|k| (k, "not instantiated")));
            other.map(|(config, want)| (Kernel::Mma { dtype, kv: None, variant, config, flavor }, want))
        }
        Kernel::Sm90 { dtype, inputs, varlen, paged: false, config, flavor: flavor @ (Flavor::Mods | Flavor::Sparse) } => {
            let other = sm90::CONFIGS.iter().copied().find(|k| k.head_dim == config.head_dim && *k != config);
            other.map(|config| (Kernel::Sm90 { dtype, inputs, varlen, paged: false, config, flavor }, "not instantiated"))
        }
        _ => None,
    };
    if let Some((kernel, want)) = swap {
        edits.push(("mods config swapped", want, Box::new(move |_, pl| with_kernel(pl, kernel))));
    }
    if let Some(mp) = m.mods {
        if mp.softcap_pre != 0.0 {
            edits.push(("softcap factor", "params.mods.softcap_pre", Box::new(|_, pl| pl.params.mods.softcap_pre *= 2.0)));
        }
        if c.p.causal {
            edits.push(("causal not folded into the window", "params.mods.window_right", Box::new(|_, pl| pl.params.mods.window_right = WINDOW_UNBOUNDED)));
        }
    }
    if let Some((b, need)) = mod_array(&c.p, 0) {
        edits.push(("ALiBi slopes one short", "past the buffer's", Box::new(move |c, _| set_mod_array(&mut c.p, 0, BufferRef { len: need - 1, ..b }))));
    }
    if let Some((b, _)) = mod_array(&c.p, 1) {
        edits.push((
            "sinks over out",
            "overlaps sinks",
            Box::new(move |c, pl| {
                set_mod_array(&mut c.p, 1, BufferRef { ptr: c.b.o.ptr, ..b });
                pl.params.mods.sinks = c.b.o.ptr;
            }),
        ));
    }
    if mod_array(&c.p, 2).is_some() {
        edits.push(("user data not carried", "params.mods.user", Box::new(|_, pl| pl.params.mods.user = 0)));
    }
    if m.paged.is_some() {
        edits.push(("modifications on a paged call", "paged call", Box::new(|c, _| c.p.mods.window.left = Some(0))));
    }
}

/// A configuration of the split table forced on a decode call that the planner splits for the
/// target: kept where it is the split kernels' for the call's head_dim, refused for split
/// kernels otherwise; but a call that asks for no split must not be refused for a split the
/// planner chose itself (a configuration of another table is planned unsplit).
#[test]
fn a_forced_config_is_not_refused_for_a_split_of_the_planners() {
    for t in Target::PRESETS {
        for config in CONFIGS.into_iter().filter(|c| c.head_dim >= 64 && fits(c, &t)) {
            let p = params(1, 1, 8192, 8, 64).config(config).build().unwrap();
            let plan = accepted(&format!("a decode call of head_dim 64 with {config:?} forced"), &Case { p: p.clone(), b: exact(&p), t });
            assert!(matches!(plan.kernel, Kernel::Mma { config: c, .. } if c == config), "{plan:?}");
        }
    }
}

/// A paged call without rows plans nothing, like any empty call, and names the kernel its
/// shape takes: a paged one, never a Hopper kernel; its forced configuration (the split
/// table's) is the paged kernels' as for the same call with rows.
#[test]
fn empty_paged_calls_plan_like_paged_calls() {
    let pages = Pages { page_size: 16, num_pages: 16, pages_per_seq: 8 };
    let paged = PagedKv::new(pages, planning_index(6 * REGION, 16));
    for t in Target::PRESETS {
        for forced in [split_config(128, 4, &t), None] {
            for batch in [2, 0] {
                let mut p = params(batch, 4, 100, 8, 128).heads_kv(2).paged(paged).build().unwrap();
                if let Some(c) = forced {
                    edit(&mut p, |b| b.config(c));
                }
                let mut two = p.clone();
                two.batch = 2;
                let mut b = exact(&two);
                (b.k.ptr, b.v.ptr) = (1 << 50, 1 << 51);
                let plan = accepted(&format!("a paged call of batch {batch}, config {forced:?}"), &Case { p, b, t });
                assert_eq!(plan.is_empty(), batch == 0);
            }
        }
    }
}

/// A grid whose CTA count passes 128 bits (batch 2^63 x 2^63 heads x 4 query blocks) is past
/// the limit like any other: refused, never wrapped to an empty plan (or a panic where
/// arithmetic overflow is checked).
#[test]
fn a_grid_past_128_bits_is_refused() {
    let s = Strides { batch: 8, row: 8, head: 8 };
    let any = usize::MAX;
    for t in Target::PRESETS {
        for (config, rows) in [(CONFIGS[0], 4 * 128), (SPLIT_CONFIGS[5], 4 * 16)] {
            let p = params(1 << 63, rows, rows, 1 << 63, 64).config(config).q_strides(s).k_strides(s).v_strides(s).o_strides(s).build().unwrap();
            refused("batch 2^63 x 2^63 heads x 4 query blocks", &Case { p, b: bufs(any, any, any, None), t }, Want::Launch);
        }
    }
}
