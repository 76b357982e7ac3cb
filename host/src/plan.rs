//! Planning a call: validate ([`crate::validate`]) → select a kernel ([`crate::select`]) →
//! build the [`LaunchPlan`] that holds everything its launch needs ([`crate::launch`]).
//!
//! Pure host code: a plan is made for a [`Target`] (a real GPU's, from [`crate::Gpu::target`],
//! or a preset), never touches a GPU, and every field it writes into the kernel parameters
//! goes through a checked conversion.
use flashrs_abi::{FwdParams, Kernel};

use crate::buffers::Buffers;
use crate::error::{Error, Result};
use crate::params::AttentionParams;
use crate::select::{Selection, Slots, select};
use crate::target::{Arch, Target};
use crate::validate::{Call, MAX_SEQLEN, validate};

pub use crate::select::PERSISTENT_MAX_KEYS;

/// A validated launch: the kernel, its geometry and parameters, and what its workspace holds.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchPlan {
    /// The kernel that runs.
    pub kernel: Kernel,
    /// The module it was planned for (an sm_80 plan also runs on sm_90a GPUs).
    pub arch: Arch,
    /// CTAs (1-D grid); 0 when there is nothing to compute.
    pub grid: u32,
    /// Work tiles: query blocks (times splits); the grid has as many CTAs unless
    /// [`LaunchPlan::persistent`].
    pub tiles: u32,
    /// Threads per CTA.
    pub block: u32,
    /// Dynamic shared memory per CTA, bytes.
    pub smem: u32,
    /// The kernel parameters, less the workspace addresses the launch fills in.
    pub params: FwdParams,
    /// Split-KV calls: the workspace the splits' partial results go to.
    pub split: Option<SplitPlan>,
    /// One CTA per SM (at most), each claiming work tiles from a launch counter.
    pub persistent: bool,
    /// The query heads of each K/V group share one query block (GQA decode).
    pub packs_gqa: bool,
    /// Variable-length calls with offsets on the host: the validated offsets the launch
    /// uploads (`cu_seqlens_q`, then `cu_seqlens_k` unless a paged call left them out).
    pub upload: Option<Vec<i32>>,
    /// Variable-length calls on the Hopper kernels: the packed query and key rows, which the
    /// tensor maps see as one sequence of a batch of one.
    pub packed_rows: Option<[usize; 2]>,
}

/// The split-KV part of a plan: the kernel writes `num_splits` f32 partial outputs and
/// log-sum-exps into a workspace, and the last split of each query block to finish merges
/// them, counting arrivals in the workspace's zeroed counters.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitPlan {
    /// CTAs per query block.
    pub num_splits: u32,
    /// u32 arrival counters: one per query block.
    pub counters_len: usize,
    /// f32 elements of the partial outputs (`num_splits * batch * heads * rows * D`).
    pub o_accum_len: usize,
    /// f32 elements of the partial log-sum-exps (`num_splits * batch * heads * rows`).
    pub lse_accum_len: usize,
}

impl LaunchPlan {
    /// True when the call has nothing to compute: the launch does nothing.
    pub fn is_empty(&self) -> bool {
        self.grid == 0
    }

    /// What the launch's workspace holds: u32 counters zero at launch (split arrivals, or a
    /// persistent launch's tile counter pair) and bytes of partial results after them.
    pub fn workspace(&self) -> (usize, usize) {
        match &self.split {
            Some(s) => (s.counters_len, (s.o_accum_len + s.lse_accum_len) * 4),
            None => (if self.persistent { 2 } else { 0 }, 0),
        }
    }
}

impl AttentionParams<'_> {
    /// Validates the call against `bufs` and plans it for `target`. Pure host code: it never
    /// touches a GPU. With [`AttentionParams::num_splits`] `None`, decode-shaped calls split
    /// as the target's SM count calls for, its CTAs per SM estimated from its shared memory.
    pub fn plan(&self, bufs: &Buffers, target: &Target) -> Result<LaunchPlan> {
        plan(self, bufs, target, &|k: &Kernel| target.sm_count as usize * target.resident_ctas(k.threads(), k.smem_bytes()))
    }
}

/// [`AttentionParams::plan`] with the target's CTA slots per kernel from `slots`.
pub(crate) fn plan(p: &AttentionParams, bufs: &Buffers, target: &Target, slots: Slots) -> Result<LaunchPlan> {
    let call = validate(p, bufs)?;
    let selection = select(&call, target, slots)?;
    build(&call, selection, target)
}

/// The checked conversion of a kernel parameter field.
pub(crate) fn u32_field(what: &'static str, v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::LaunchLimit(format!("{what} = {v} exceeds the kernels' 32-bit range")))
}

/// [`FwdParams::interleave`] for a grid of `pairs` (batch, head) pairs of `m_blocks` query
/// blocks: 1 unless `causal`, else the pairs whose blocks make about [`GROUP_CTAS`] CTAs.
/// Heaviest-first within a head alone ends a causal launch on a mix of heavy and light blocks
/// of its last heads; groups of heads end it on light blocks only, and spread the CTAs running
/// together over more heads. Measured on the H200 (wgmma path, causal, seqlen 2k/4k/8k, groups
/// of 1, 4, 16, 64 and 512 pairs): head_dim 64 was fastest with 16 (3-4% over 1), head_dim 128
/// and 256 with 16 at 2k and 4 at 4k/8k (up to 8% over 1); 64 and more lost again.
pub(crate) fn interleave(causal: bool, pairs: usize, m_blocks: usize) -> usize {
    if !causal || m_blocks == 0 {
        return 1;
    }
    ((GROUP_CTAS + m_blocks / 2) / m_blocks).clamp(1, pairs.max(1))
}

/// CTAs of one interleaved group of a causal grid ([`interleave`]): about two waves of a
/// one-CTA-per-SM Hopper kernel on an H100's 132 SMs.
const GROUP_CTAS: usize = 256;

/// The launch of `call` by `s`.
fn build(call: &Call, s: Selection, target: &Target) -> Result<LaunchPlan> {
    let p = call.p;
    let k = s.kernel;
    let (block_m, block_n) = (k.block_m(), k.block_n());
    // GQA decode packing: the `group` query heads that share a K/V head become the rows of one
    // query block, so the kernel sees `heads_kv` heads of `group` rows, the rows `head` strides
    // apart; output and log-sum-exp land exactly where the unpacked call puts them.
    let (heads, rows) = if s.pack_gqa { (p.heads_kv, call.group) } else { (p.heads_q, p.seqlen_q) };
    if rows > MAX_SEQLEN {
        return Err(Error::InvalidShape { what: "query rows", reason: format!("{rows} packed rows per query block exceed {MAX_SEQLEN}") });
    }
    let m_blocks = rows.div_ceil(block_m);
    let splits = s.num_splits;
    // Checked: a wrapped product could pass for a small (or empty) grid.
    let tiles = [heads, m_blocks, splits].iter().try_fold(p.batch as u128, |n, &x| n.checked_mul(x as u128)).unwrap_or(u128::MAX);
    if tiles > i32::MAX as u128 {
        let shown = if tiles == u128::MAX { "more than 2^128".to_string() } else { tiles.to_string() };
        return Err(Error::LaunchLimit(format!("{shown} CTAs exceed the grid limit of {}", i32::MAX)));
    }
    let tiles = tiles as u32;
    let empty = call.empty || tiles == 0;
    let grid = match () {
        _ if empty => 0,
        _ if s.persistent => tiles.min(target.sm_count.max(1)),
        _ => tiles,
    };
    let mut plan = LaunchPlan {
        kernel: k,
        arch: target.arch,
        grid,
        tiles: if empty { 0 } else { tiles },
        block: k.threads() as u32,
        smem: k.smem_bytes() as u32,
        params: FwdParams::default(),
        split: None,
        persistent: s.persistent && !empty,
        packs_gqa: s.pack_gqa,
        upload: None,
        packed_rows: None,
    };
    if empty {
        return Ok(plan);
    }
    call.check_buffers()?;
    let [q_strides, k_strides, v_strides, o_strides] = call.strides;
    // K and V are never read without keys: their strides were not checked.
    let (k_strides, v_strides) = if call.reads_kv() { (k_strides, v_strides) } else { ([0; 3], [0; 3]) };
    let rows_q = call.rows_q();
    let varlen = call.packed.is_some();
    let hopper = matches!(k, Kernel::Sm90 { .. });
    let interleave = if hopper {
        interleave(p.causal, p.batch * heads, m_blocks)
    } else {
        interleave(p.causal && !s.pack_gqa && !varlen && splits == 1, p.batch * heads, m_blocks)
    };
    let mut params = FwdParams {
        q: call.bufs.q.ptr,
        k: call.bufs.k.ptr,
        v: call.bufs.v.ptr,
        o: call.bufs.o.ptr,
        lse: call.bufs.lse.map_or(0, |l| l.ptr),
        q_strides,
        k_strides,
        v_strides,
        o_strides,
        batch: u32_field("batch", p.batch)?,
        heads_q: u32_field("heads_q", heads)?,
        group: u32_field("group", if s.pack_gqa { 1 } else { call.group })?,
        seqlen_q: u32_field("seqlen_q", rows)?,
        seqlen_k: u32_field("seqlen_k", p.seqlen_k)?,
        head_dim: u32_field("head_dim", p.head_dim)?,
        head_dim_v: u32_field("head_dim_v", p.head_dim_v())?,
        scale_log2: call.scale_log2,
        // One query row sees every key under bottom-right causal masking too.
        causal: (p.causal && !s.pack_gqa) as u32,
        m_blocks: u32_field("m_blocks", m_blocks)?,
        interleave: u32_field("interleave", interleave)?,
        num_splits: u32_field("num_splits", splits)?,
        total_q: u32_field("total_q", rows_q)?,
        // Paged key offsets only count keys: any start is in range.
        total_k: if call.paged.is_some() { i32::MAX as u32 } else { u32_field("total_k", call.packed.as_ref().map_or(p.seqlen_k, |v| v.total_k))? },
        split_tiles: u32_field("split_tiles", p.seqlen_k.div_ceil(block_n).div_ceil(splits).max(1))?,
        mods: call.mods.unwrap_or_default(),
        descale: p.descale.params(p.heads_kv),
        ..FwdParams::default()
    };
    if let Some(pg) = call.paged {
        params.block_table = pg.block_table;
        params.seqused_k = pg.seqused_k;
        params.table_stride = u32_field("pages_per_seq", pg.pages.pages_per_seq)?;
        params.page_shift = pg.pages.page_size.trailing_zeros();
        params.last_page = u32_field("num_pages", pg.pages.num_pages - 1)?;
    }
    if let Some(v) = &call.packed {
        [params.cu_seqlens_q, params.cu_seqlens_k] = v.cu_seqlens;
        plan.upload = v.upload.clone();
        plan.packed_rows = hopper.then_some([v.total_q, v.total_k]);
    }
    if s.pack_gqa {
        // Row r of packed head g is query head g * group + r (its only query row).
        let g = call.group as i64;
        let [qb, _, qh] = params.q_strides;
        let [ob, _, oh] = params.o_strides;
        params.q_strides = [qb, qh, qh * g];
        params.o_strides = [ob, oh, oh * g];
    }
    if splits > 1 {
        let split_rows = p.batch as u128 * heads as u128 * rows as u128;
        // The kernels index the workspace with 32-bit `split * rows + row`.
        if splits as u128 * split_rows > u32::MAX as u128 {
            return Err(Error::LaunchLimit(format!("{splits} splits of {split_rows} rows exceed the split workspace's index range")));
        }
        let split_rows = split_rows as usize;
        plan.split = Some(SplitPlan {
            num_splits: splits as u32,
            counters_len: tiles as usize / splits,
            o_accum_len: splits * split_rows * k.head_dim(),
            lse_accum_len: splits * split_rows,
        });
    }
    plan.params = params;
    Ok(plan)
}
