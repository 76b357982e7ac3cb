//! The backward pass: dQ, dK and dV from Q, K, V, the forward's output and log-sum-exp, and dO.
//!
//! Planned like the forward (validate → choose a kernel → a checked plan, [`BackwardPlan`]) and
//! launched as three kernels on one stream (on sm_90a the main one is the Hopper kernel where it
//! takes the call) ([`flashrs_abi::bwd`] describes them) with one
//! workspace: the f32 dQ accumulator and `dot(dO, O)` per (batch, head, query row), O(batch x
//! seqlen x heads x head_dim), and in deterministic mode one counter per query block.
//! Gradients have the strides of their tensors (dQ Q's, dK K's, dV V's, dO the output's).
use std::ffi::c_void;

use flashrs_abi::bwd::{BWD_CONFIGS, BWD_MODS, BWD_ROW_THREADS, BWD_SM90_CONFIGS, BwdConfig, DSINKS_SMEM, QueryLists};
use flashrs_abi::params::SPARSE_BLOCK;
use flashrs_abi::tiles::padded_head_dim;
use flashrs_abi::{AccumLayout, BwdParams, BwdStep, Flavor, FragmentBlocks, FwdParams, Kernel};

use crate::buffers::{BufferRef, Buffers};
use crate::custom::{CustomKernels, user_data_needs_custom};
use crate::device::Gpu;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::layout::Kv;
use crate::memory::{DeviceRead, DeviceWrite, LaunchStream};
use crate::launch::{MapElement, encode_map};
use crate::params::{AttentionParams, KernelChoice, Strides};
use crate::select::tma_describable;
use crate::target::{Arch, Target};
use crate::tensor_map::TensorMapParam;
use crate::plan::u32_field;
use crate::validate::{Call, check_i32, check_tensor, kernel_strides, no_self_overlap, validate};
use crate::workspace::WorkspaceAddrs;

/// The gradient-side tensors of a backward call, as device addresses and capacities in
/// elements (of the call's element type): dO (read), dQ, dK and dV (written).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GradBuffers {
    /// dO, the loss's gradient with respect to the output (laid out like the output).
    pub dout: BufferRef,
    /// dQ (laid out like Q).
    pub dq: BufferRef,
    /// dK (laid out like K).
    pub dk: BufferRef,
    /// dV (laid out like V).
    pub dv: BufferRef,
    /// The gradient of the call's sink logits (f32, one per query head; capacity in f32
    /// elements), written when given ([`GradBuffers::dsinks`]).
    pub dsinks: Option<BufferRef>,
}

impl GradBuffers {
    /// dO, dQ, dK and dV.
    pub fn new(dout: BufferRef, dq: BufferRef, dk: BufferRef, dv: BufferRef) -> Self {
        GradBuffers { dout, dq, dk, dv, dsinks: None }
    }

    /// Also writes the gradient of the sink logits ([`crate::AttentionParamsBuilder::sinks`]),
    /// f32 `[heads_q]`, into `dsinks`: `-sum over the head's rows of exp(sink - lse) * dot(dO,
    /// O)`, the same bits every run.
    pub fn dsinks(mut self, dsinks: BufferRef) -> Self {
        self.dsinks = Some(dsinks);
        self
    }
}

/// A validated backward call: its three kernels, their grids and the parameters they share.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq)]
pub struct BackwardPlan {
    /// The prep, main and dQ kernels, in launch order.
    pub kernels: [Kernel; 3],
    /// Their grids (CTAs); a zero grid is not launched.
    pub grids: [u32; 3],
    /// The main kernel's dynamic shared memory, bytes.
    pub smem: u32,
    /// The parameters, less the workspace addresses the launch fills in.
    pub params: BwdParams,
    /// Variable-length calls with host offsets: the offsets the launch uploads.
    pub upload: Option<Vec<i32>>,
    /// Bytes of workspace: the dQ accumulator, dsum, and the deterministic mode's counters.
    pub workspace_bytes: usize,
    /// dQ sums its parts in key-block order ([`AttentionParams::deterministic`]): the launch
    /// points [`BwdParams::dq_semaphore`] at the workspace's counters.
    pub deterministic: bool,
    /// Packed variable-length sequences (host or device offsets).
    pub varlen: bool,
    /// The sink logits' gradient (f32, `len` = the query heads): written by the dQ kernel, or
    /// zeroed by the launch when the call has no query row (and the dQ kernel no grid).
    pub dsinks: Option<BufferRef>,
    /// Block-sparse calls: the launches that turn the block mask into the main kernel's walks.
    pub lists: Option<SparseLists>,
}

/// The launches of a block-sparse backward call that build its main kernel's walks
/// ([`QueryLists`]) in the workspace, before the other kernels.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq)]
pub struct SparseLists {
    /// `flash_bwd_sparse_bits_*` and `flash_bwd_sparse_lists_*`, with their grids.
    pub kernels: [(Kernel, u32); 2],
    /// Where the lists start in the workspace (bytes).
    pub offset: usize,
    /// Bytes of the bitmaps, the counts, the steps and the turns (none outside deterministic
    /// mode), in that order from `offset`, each a multiple of 16.
    pub bytes: [usize; 4],
}

impl BackwardPlan {
    /// True when there is nothing to compute or write.
    pub fn is_empty(&self) -> bool {
        self.grids.iter().all(|&g| g == 0) && self.dsinks.is_none()
    }

    /// Byte offsets in the workspace of the row statistics and of the counters (the
    /// accumulator is first).
    fn workspace_layout(&self) -> [usize; 2] {
        let p = &self.params;
        let stats = match self.kernels[1] {
            // One padding block after the launch's (see the prep kernel).
            Kernel::Bwd { step, .. } if step.accum_layout() == AccumLayout::Fragments => {
                (FragmentBlocks::count(&p.fwd, self.varlen) as usize + 1) * AccumLayout::STATS
            }
            _ => p.rows as usize * p.fwd.heads_q as usize,
        };
        let dsum = (p.accum_len as usize * 4).next_multiple_of(16);
        [dsum, dsum + (stats * 4).next_multiple_of(16)]
    }
}

/// The backward main kernel for a call on `target`. `Auto`: the Hopper kernel on sm_90a where
/// it takes the call (tensors TMA can describe, [`tma_describable`]), else the first `mma.sync` configuration of the
/// padded head dimension that fits the GPU. `MmaSync` / `Wgmma` without a configuration force
/// a family (a Hopper kernel that cannot take the call is an error).
fn choose(call: &Call, target: &Target) -> Result<BwdStep> {
    let p = call.p;
    // V of a head dimension of its own: the kernel of the wider, the narrower's columns zero.
    let padded = padded_head_dim(call.kernel_head_dim()).ok_or(Error::UnsupportedHeadDim(p.head_dim))?;
    // A window or ALiBi takes the modification twins (dQ in rows); sinks alone need none (the
    // log-sum-exp counts them).
    let m = &p.mods;
    // User data is read by the caller's own main kernel, which stands in for a modification one.
    let modified = m.window.left.is_some() || m.window.right.is_some() || m.softcap.is_some() || m.alibi.is_some() || m.user.is_some();
    let flavor = if m.blocks.is_some() {
        Flavor::Sparse
    } else if modified {
        Flavor::Mods
    } else {
        Flavor::Plain
    };
    let mma = || {
        // Plain calls try the table in order, modification calls BWD_MODS's order (preferred
        // first).
        let rank = |i: usize| if flavor == Flavor::Plain { Some(i) } else { BWD_MODS.iter().position(|&m| m == i) };
        let mut ranked: Vec<(usize, BwdConfig)> = BWD_CONFIGS.iter().enumerate().filter(|(_, c)| c.head_dim == padded).filter_map(|(i, &c)| rank(i).map(|r| (r, c))).collect();
        ranked.sort_by_key(|&(r, _)| r);
        let ours = || ranked.iter().map(|(_, c)| c);
        // sm_90a adds dQ in fragment order (16-byte vector reductions) where the configuration
        // takes it, older GPUs in rows.
        let accum = |c: &BwdConfig| if target.arch == Arch::Sm90a && c.fragments() { AccumLayout::Fragments } else { AccumLayout::Rows };
        ours().find(|c| c.smem_bytes() <= target.max_smem_per_block as usize).map(|&config| BwdStep::Main { config, accum: accum(&config), flavor }).ok_or_else(|| Error::SharedMemory {
            kernel: "the backward pass".into(),
            needed: ours().map(|c| c.smem_bytes()).min().unwrap_or(0) as u64,
            available: target.max_smem_per_block as u64,
        })
    };
    let hopper = || match BWD_SM90_CONFIGS.iter().find(|c| c.head_dim == padded) {
        // Windows, softcap and ALiBi take its modification twin, block masks its block-sparse
        // one (sinks need nothing of either); not both, and not a caller's own kernels.
        Some(_) if m.user.is_some() => Err("a call with user data runs on the caller's own mma.sync kernels".to_string()),
        Some(_) if modified && flavor == Flavor::Sparse => Err("the Hopper backward kernels take a block mask without a window, softcap or ALiBi".to_string()),
        // A softcap's derivative pass does not fit the Hopper consumers' registers.
        Some(_) if m.softcap.is_some() => Err("the Hopper backward kernels take no softcap".to_string()),
        Some(&config) => tma_describable(call).map(|()| BwdStep::MainSm90 { config, varlen: call.packed.is_some(), flavor }),
        None => Err(format!("no Hopper backward kernel for head_dim {}", p.head_dim)),
    };
    match p.kernel {
        KernelChoice::Auto if target.arch == Arch::Sm90a => hopper().or_else(|_| mma()),
        KernelChoice::Auto | KernelChoice::MmaSync { config: None } => mma(),
        KernelChoice::Wgmma { config: None, persistent: None } => {
            if target.arch != Arch::Sm90a {
                let (major, minor) = target.compute_capability;
                return Err(Error::PathUnavailable { path: "wgmma", needs: "an sm_90a GPU (H100/H200)", major: major as i32, minor: minor as i32 });
            }
            hopper().map_err(|reason| Error::InvalidShape { what: "kernel", reason })
        }
        _ => Err(Error::InvalidShape {
            what: "kernel",
            reason: "the backward pass takes a kernel family (MmaSync or Wgmma without a configuration, or Auto), not a tile configuration or launch mode".into(),
        }),
    }
}

/// The lists of a block-sparse call (addresses 0 until the launch places them) and the u32
/// entries of their parts: bitmaps, counts, steps, turns (0 outside deterministic mode).
/// `block_m`: the main kernel's rows per step.
fn plan_lists(mask: &crate::BlockMask, b: &BwdParams, block_m: usize, deterministic: bool) -> Result<(QueryLists, [usize; 4])> {
    let f = &b.fwd;
    // Entries pack (head in group, step) in 16 bits each, and the Hopper kernel's stage slot
    // (query head, step).
    let end = QueryLists::FIELD_END;
    if f.heads_q > end || f.m_blocks > end {
        let reason = format!("block-sparse gradients take at most {end} query heads and {} query rows, not {} and {}", end as usize * block_m, f.heads_q, f.seqlen_q);
        return Err(Error::InvalidShape { what: "block_mask", reason });
    }
    let words = mask.kv_blocks.div_ceil(32);
    let kv_blocks = f.seqlen_k.div_ceil(SPARSE_BLOCK);
    let per_list = f.group * f.m_blocks;
    let counts = f.batch as u128 * (f.heads_q / f.group) as u128 * kv_blocks as u128;
    let entries = counts * per_list as u128;
    // 32-bit indices in the kernels.
    let bits = limit("block mask bitmap words", (mask.batch * mask.heads * mask.q_blocks) as u128 * words as u128)?;
    limit("block-sparse lists", counts)?;
    limit("block-sparse list entries", entries)?;
    let lists = QueryLists { words: words as u32, per_list, kv_blocks, block_m: block_m as u32, ..QueryLists::default() };
    let turns = if deterministic { entries } else { 0 };
    Ok((lists, [bits as usize, counts as usize, entries as usize, turns as usize]))
}

/// A product of sizes the kernels index with 32-bit signed arithmetic (grids, rows x heads,
/// counters), checked.
fn limit(what: &str, v: u128) -> Result<u32> {
    u32::try_from(v).ok().filter(|&v| v <= i32::MAX as u32).ok_or_else(|| Error::LaunchLimit(format!("{what} = {v} exceeds the kernels' range")))
}

impl AttentionParams<'_> {
    /// Validates a backward call against its buffers and plans it for `target`. `bufs` are the
    /// forward call's tensors (Q, K, V, its output and log-sum-exp, which the backward pass
    /// needs); `grads` dO and the gradients. Pure host code: it never touches a GPU.
    pub fn plan_backward(&self, bufs: &Buffers, grads: &GradBuffers, target: &Target) -> Result<BackwardPlan> {
        let p = self;
        let Some(lse) = bufs.lse else {
            return Err(Error::InvalidBuffer { tensor: "lse", reason: "the backward pass needs the forward's log-sum-exp".into() });
        };
        if matches!(p.layout.kv, Kv::Paged(_)) {
            return Err(Error::InvalidShape { what: "layout", reason: "the backward pass takes K and V tensors, not a paged cache".into() });
        }
        if let Some(kv) = bufs.kv {
            return Err(Error::InvalidShape { what: "kv", reason: format!("the backward pass takes K and V of the queries' type, not {}", kv.name()) });
        }
        let m = &p.mods;
        if grads.dsinks.is_some() && m.sinks.is_none() {
            return Err(Error::InvalidBuffer { tensor: "dsinks", reason: "the call has no sinks to take the gradient of".into() });
        }
        let call = validate(p, bufs)?;
        let main = choose(&call, target)?;
        let layout = main.accum_layout();
        let dtype = bufs.dtype;
        let kernels = [Kernel::Bwd { dtype, step: BwdStep::Prep(layout) }, Kernel::Bwd { dtype, step: main }, Kernel::Bwd { dtype, step: BwdStep::Dq(layout) }];
        let (rows_q, rows_k) = match &call.packed {
            Some(v) => (v.total_q, v.total_k),
            None => (p.seqlen_q, p.seqlen_k),
        };
        let nb = if call.packed.is_some() { 1 } else { p.batch };
        let mut plan = BackwardPlan {
            kernels,
            grids: [0; 3],
            smem: kernels[1].smem_bytes() as u32,
            params: BwdParams::default(),
            upload: None,
            workspace_bytes: 0,
            deterministic: p.deterministic,
            varlen: call.packed.is_some(),
            dsinks: None,
            lists: None,
        };
        // Checked before anything else is: a call with nothing to compute still zeroes it.
        let dsinks = match grads.dsinks {
            Some(d) => {
                let (name, d0, d1) = check_i32("dsinks", d, p.heads_q)?;
                // Checked here on the buffers' whole capacities, not the spans the kernels use:
                // a call with nothing to compute never derives those, and still writes dsinks.
                let others = [("q", bufs.q), ("k", bufs.k), ("v", bufs.v), ("out", bufs.o), ("dout", grads.dout), ("dq", grads.dq), ("dk", grads.dk), ("dv", grads.dv)]
                    .map(|(n, b)| (n, b.ptr, b.ptr.saturating_add(b.len as u64 * 2)))
                    .into_iter()
                    .chain([("lse", lse.ptr, lse.ptr.saturating_add(lse.len as u64 * 4))])
                    .chain(call.index_spans()?);
                if let Some((other, ..)) = others.into_iter().find(|&(_, s0, s1)| d0 < s1 && s0 < d1) {
                    return Err(Error::InvalidBuffer { tensor: name, reason: format!("overlaps {other}") });
                }
                Some(BufferRef::new(d.ptr, p.heads_q))
            }
            None => None,
        };
        plan.dsinks = dsinks;
        if p.batch == 0 || p.heads_q == 0 || (rows_q == 0 && rows_k == 0) {
            return Ok(plan);
        }
        let strides = kernel_strides(p, call.packed.is_some(), false)?;
        let st = |[batch, row, head]: [i64; 3]| Strides { batch, row, head };
        let [q_s, k_s, v_s, o_s] = strides.map(st);
        let (d, dv, hq, hkv) = (p.head_dim, p.head_dim_v(), p.heads_q, p.heads_kv);
        // dQ and dK have Q's and K's head dimension, dO and dV the output's and V's.
        let (q_dims, k_dims) = ([nb, rows_q, hq, d], [nb, rows_k, hkv, d]);
        let (o_dims, v_dims) = ([nb, rows_q, hq, dv], [nb, rows_k, hkv, dv]);
        // The forward's buffers as the forward checks them (with no query row, K, V and the
        // index arrays alone), and their byte spans; then the gradients'.
        let mut read = if rows_q > 0 { call.check_buffers()? } else { call.index_spans()? };
        let mut written = vec![];
        if rows_q > 0 {
            read.push(("dout", grads.dout.ptr, check_tensor("dout", grads.dout, o_s, o_dims, 2)?));
            written.push(("dq", grads.dq.ptr, check_tensor("dq", grads.dq, q_s, q_dims, 2)?, q_s, q_dims));
        }
        if rows_k > 0 {
            if rows_q == 0 {
                read.push(("k", bufs.k.ptr, check_tensor("k", bufs.k, k_s, k_dims, 2)?));
                read.push(("v", bufs.v.ptr, check_tensor("v", bufs.v, v_s, v_dims, 2)?));
            }
            written.push(("dk", grads.dk.ptr, check_tensor("dk", grads.dk, k_s, k_dims, 2)?, k_s, k_dims));
            written.push(("dv", grads.dv.ptr, check_tensor("dv", grads.dv, v_s, v_dims, 2)?, v_s, v_dims));
        }
        for (i, &(w, w0, w1, s, dims)) in written.iter().enumerate() {
            if !no_self_overlap(s, dims) {
                return Err(Error::InvalidStrides { tensor: w, reason: format!("{s:?} put distinct gradient elements at the same address") });
            }
            let others = written[i + 1..].iter().map(|&(n, a, b, ..)| (n, a, b)).chain(read.iter().copied());
            if let Some((other, ..)) = others.into_iter().find(|&(_, s0, s1)| w0 < s1 && s0 < w1) {
                return Err(Error::InvalidBuffer { tensor: w, reason: format!("overlaps {other}") });
            }
        }

        let (bm, bn, padded) = (kernels[1].block_m(), kernels[1].block_n(), kernels[1].head_dim());
        let m_blocks = p.seqlen_q.div_ceil(bm);
        let n_blocks = p.seqlen_k.div_ceil(bn);
        // The row kernels' rows: the log-sum-exp's, or (Fragments) every sequence's padded to
        // the longest's steps.
        let rows = match layout {
            AccumLayout::Fragments => p.batch as u128 * (m_blocks * bm) as u128,
            AccumLayout::Rows if call.packed.is_some() => rows_q as u128,
            AccumLayout::Rows => p.batch as u128 * p.seqlen_q as u128,
        };
        let row_slots = rows * hq as u128;
        let main_grid = limit("backward CTAs", p.batch as u128 * hkv as u128 * n_blocks as u128)?;
        let fwd = FwdParams {
            q: bufs.q.ptr,
            k: bufs.k.ptr,
            v: bufs.v.ptr,
            o: bufs.o.ptr,
            lse: lse.ptr,
            q_strides: strides[0],
            k_strides: strides[1],
            v_strides: strides[2],
            o_strides: strides[3],
            batch: u32_field("batch", p.batch)?,
            heads_q: u32_field("heads_q", hq)?,
            group: u32_field("group", call.group)?,
            seqlen_q: u32_field("seqlen_q", p.seqlen_q)?,
            seqlen_k: u32_field("seqlen_k", p.seqlen_k)?,
            head_dim: d as u32,
            head_dim_v: dv as u32,
            scale_log2: call.scale_log2,
            causal: p.causal as u32,
            m_blocks: m_blocks as u32,
            num_splits: 1,
            total_q: u32_field("total_q", rows_q)?,
            total_k: u32_field("total_k", rows_k)?,
            // Sinks (the only modification taken): the dQ kernel reads the logits.
            mods: call.mods.unwrap_or_default(),
            ..FwdParams::default()
        };
        // Counters: per (batch, head, query block), or one per block of the Fragments layout,
        // whose blocks (64 rows, padded per sequence) also size its accumulator and statistics.
        let (counters, accum_len) = match layout {
            AccumLayout::Fragments => {
                // And a padding block (see `AccumLayout`).
                let blocks = FragmentBlocks::count(&fwd, call.packed.is_some());
                (blocks, (blocks + 1) * 64 * padded as u128)
            }
            AccumLayout::Rows => (p.batch as u128 * hq as u128 * m_blocks as u128, row_slots * padded as u128),
        };
        // 32-bit indices in the kernels: rows x heads, counters, accumulator chunks.
        limit("query rows x heads", row_slots)?;
        limit("counters", counters)?;
        limit("dQ accumulator chunks", accum_len / AccumLayout::CHUNK as u128)?;
        let mut params = BwdParams {
            fwd,
            dout: grads.dout.ptr,
            dq: grads.dq.ptr,
            dk: grads.dk.ptr,
            dv: grads.dv.ptr,
            dout_strides: strides[3],
            dq_strides: strides[0],
            dk_strides: strides[1],
            dv_strides: strides[2],
            scale: p.scale(),
            accum_dim: padded as u32,
            accum_len: accum_len as u64,
            n_blocks: n_blocks as u32,
            rows: rows as u32,
            dsinks: dsinks.map_or(0, |d| d.ptr),
            ..BwdParams::default()
        };
        if let Some(v) = &call.packed {
            [params.fwd.cu_seqlens_q, params.fwd.cu_seqlens_k] = v.cu_seqlens;
            plan.upload = v.upload.clone();
        }
        let row_grid = limit("row CTAs", (row_slots * params.row_lanes() as u128).div_ceil(BWD_ROW_THREADS as u128))?;
        plan.grids = if rows_q > 0 { [row_grid, main_grid, row_grid] } else { [0, main_grid, 0] };
        plan.params = params;
        let [_, sems] = plan.workspace_layout();
        plan.workspace_bytes = sems + if p.deterministic { (counters as usize * 4).next_multiple_of(16) } else { 0 };
        if let (Some(mask), Flavor::Sparse) = (&m.blocks, kernels[1].flavor()) {
            let (lists, sizes) = plan_lists(mask, &plan.params, bm, p.deterministic)?;
            let bytes = sizes.map(|n| (n * 4).next_multiple_of(16));
            let kernels = [BwdStep::SparseBits, BwdStep::SparseLists].map(|step| Kernel::Bwd { dtype, step });
            // A CTA per row of the mask, and a warp per 32 key blocks of a (batch entry, K/V head).
            let lists_grid = p.batch as u128 * hkv as u128 * lists.kv_blocks.div_ceil(32) as u128;
            let grids = [limit("block mask rows", (mask.batch * mask.heads * mask.q_blocks) as u128)?, limit("list CTAs", lists_grid)?];
            plan.params.lists = lists;
            plan.lists = Some(SparseLists { kernels: [(kernels[0], grids[0]), (kernels[1], grids[1])], offset: plan.workspace_bytes, bytes });
            plan.workspace_bytes += bytes.iter().sum::<usize>();
        }
        Ok(plan)
    }
}

impl Gpu {
    /// [`AttentionParams::plan_backward`] for this GPU.
    pub fn plan_backward(&self, params: &AttentionParams, bufs: &Buffers, grads: &GradBuffers) -> Result<BackwardPlan> {
        params.plan_backward(bufs, grads, &self.target())
    }

    /// Launches the backward pass on `stream` (asynchronously) after validating every input:
    /// from the forward call's `q`, `k`, `v`, its output `out` and log-sum-exp `lse` (as
    /// [`Gpu::attention_forward`] wrote them) and `dout`, the loss's gradient with respect to
    /// the output, writes `dq`, `dk` and `dv`.
    ///
    /// Same call description as the forward (`params`: shapes, GQA, causal, scale, strides,
    /// variable-length offsets; not paged caches), same buffer types. Each gradient has its tensor's
    /// strides (dO the output's). Under GQA/MQA, dK and dV are summed over each K/V head's query heads.
    /// Of the attention modifications it takes sliding windows and ALiBi (modification twins of
    /// the Hopper kernel on sm_90a, of the `mma.sync` kernels elsewhere), softcap (the
    /// `mma.sync` modification kernels: its derivative pass does not fit the Hopper kernel's
    /// registers), block masks (block-sparse twins of the Hopper kernel, or with a
    /// window, softcap or ALiBi, or off sm_90a, of the `mma.sync` modification kernels; each key
    /// block walks the query blocks that list it; two small launches turn the mask around first, into a
    /// workspace of one u32 per (query step, 128-key block) pair, two in deterministic mode:
    /// O((seqlen / 64) x (seqlen / 128)) per head, as the mask's own lists) and sinks
    /// ([`crate::AttentionParamsBuilder::sinks`]), whose own
    /// gradient [`Gpu::attention_backward_with_sinks`] also writes. Rows that
    /// see no key get zero dQ; keys no row sees get zero dK and dV. V (with the output, dO and
    /// dV) may have a head dimension of its own ([`crate::AttentionParamsBuilder::head_dim_v`]):
    /// the kernels are those of the wider. Memory beyond the buffers: a workspace of `(the
    /// wider head dimension padded to 64/128/256 + 1)` f32 per (batch, head, query row) (`+ 2` on
    /// H100/H200, whose rows round up to 64 per (sequence, head)). With
    /// [`AttentionParams::deterministic`], every gradient is bit-identical from run to run.
    ///
    /// Returns the first validation error without launching anything (every buffer is
    /// untouched); `Ok` means the kernels were queued.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_backward<T, S, Q, K, V, O, L, DO, DQ, DK, DV>(
        &self,
        stream: &S,
        params: &AttentionParams,
        q: &Q,
        k: &K,
        v: &V,
        out: &O,
        lse: &L,
        dout: &DO,
        dq: &mut DQ,
        dk: &mut DK,
        dv: &mut DV,
    ) -> Result<()>
    where
        T: Element,
        S: LaunchStream + ?Sized,
        Q: DeviceRead<T, S> + ?Sized,
        K: DeviceRead<T, S> + ?Sized,
        V: DeviceRead<T, S> + ?Sized,
        O: DeviceRead<T, S> + ?Sized,
        L: DeviceRead<f32, S> + ?Sized,
        DO: DeviceRead<T, S> + ?Sized,
        DQ: DeviceWrite<T, S> + ?Sized,
        DK: DeviceWrite<T, S> + ?Sized,
        DV: DeviceWrite<T, S> + ?Sized,
    {
        // SAFETY: the shipped kernels.
        unsafe { self.backward_typed(stream, params, (q, k, v, out, lse, dout), (dq, dk, dv), None, None) }
    }

    /// [`Gpu::attention_backward`] with the main kernel from the caller's own module
    /// ([`crate::custom`]), for a call whose modification reads the data of
    /// [`crate::AttentionParamsBuilder::user_data`]; the prep and dQ kernels are the shipped
    /// ones. Planned as any call with modifications (`mma.sync` main kernels of the modification
    /// table). The sinks' gradient goes through [`AttentionParams::plan_backward`] and
    /// [`Gpu::launch_backward_custom`].
    ///
    /// Errors: those of [`Gpu::attention_backward`]; [`Error::CustomKernels`] where `kernels`
    /// has no entry for the planned main kernel (naming it).
    ///
    /// # Safety
    /// As for [`Gpu::attention_forward_custom`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn attention_backward_custom<T, S, Q, K, V, O, L, DO, DQ, DK, DV>(
        &self,
        kernels: &CustomKernels,
        stream: &S,
        params: &AttentionParams,
        q: &Q,
        k: &K,
        v: &V,
        out: &O,
        lse: &L,
        dout: &DO,
        dq: &mut DQ,
        dk: &mut DK,
        dv: &mut DV,
    ) -> Result<()>
    where
        T: Element,
        S: LaunchStream + ?Sized,
        Q: DeviceRead<T, S> + ?Sized,
        K: DeviceRead<T, S> + ?Sized,
        V: DeviceRead<T, S> + ?Sized,
        O: DeviceRead<T, S> + ?Sized,
        L: DeviceRead<f32, S> + ?Sized,
        DO: DeviceRead<T, S> + ?Sized,
        DQ: DeviceWrite<T, S> + ?Sized,
        DK: DeviceWrite<T, S> + ?Sized,
        DV: DeviceWrite<T, S> + ?Sized,
    {
        // SAFETY: per this function's contract.
        unsafe { self.backward_typed(stream, params, (q, k, v, out, lse, dout), (dq, dk, dv), None, Some(kernels)) }
    }

    /// [`Gpu::attention_backward`] of a call with sinks that also writes the sinks' gradient
    /// into `dsinks` (f32, one per query head): `-sum over the head's rows of exp(sink - lse)
    /// * dot(dO, O)`, the same bits every run. A call without sinks is an error.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_backward_with_sinks<T, S, Q, K, V, O, L, DO, DQ, DK, DV>(
        &self,
        stream: &S,
        params: &AttentionParams,
        q: &Q,
        k: &K,
        v: &V,
        out: &O,
        lse: &L,
        dout: &DO,
        dq: &mut DQ,
        dk: &mut DK,
        dv: &mut DV,
        dsinks: &mut dyn DeviceWrite<f32, S>,
    ) -> Result<()>
    where
        T: Element,
        S: LaunchStream + ?Sized,
        Q: DeviceRead<T, S> + ?Sized,
        K: DeviceRead<T, S> + ?Sized,
        V: DeviceRead<T, S> + ?Sized,
        O: DeviceRead<T, S> + ?Sized,
        L: DeviceRead<f32, S> + ?Sized,
        DO: DeviceRead<T, S> + ?Sized,
        DQ: DeviceWrite<T, S> + ?Sized,
        DK: DeviceWrite<T, S> + ?Sized,
        DV: DeviceWrite<T, S> + ?Sized,
    {
        // SAFETY: the shipped kernels.
        unsafe { self.backward_typed(stream, params, (q, k, v, out, lse, dout), (dq, dk, dv), Some(dsinks), None) }
    }

    /// The typed backward entries, with the sinks' gradient written where `dsinks` is given (as
    /// the forward's optional log-sum-exp), the main kernel from `custom` where given.
    ///
    /// # Safety
    /// As for [`Gpu::attention_backward_custom`] where `custom` is given.
    unsafe fn backward_typed<T, S, Q, K, V, O, L, DO, DQ, DK, DV>(
        &self,
        stream: &S,
        params: &AttentionParams,
        (q, k, v, out, lse, dout): (&Q, &K, &V, &O, &L, &DO),
        (dq, dk, dv): (&mut DQ, &mut DK, &mut DV),
        dsinks: Option<&mut dyn DeviceWrite<f32, S>>,
        custom: Option<&CustomKernels>,
    ) -> Result<()>
    where
        T: Element,
        S: LaunchStream + ?Sized,
        Q: DeviceRead<T, S> + ?Sized,
        K: DeviceRead<T, S> + ?Sized,
        V: DeviceRead<T, S> + ?Sized,
        O: DeviceRead<T, S> + ?Sized,
        L: DeviceRead<f32, S> + ?Sized,
        DO: DeviceRead<T, S> + ?Sized,
        DQ: DeviceWrite<T, S> + ?Sized,
        DK: DeviceWrite<T, S> + ?Sized,
        DV: DeviceWrite<T, S> + ?Sized,
    {
        let mut g = self.enter_typed_call(stream, params)?;
        let bufs = Buffers::new(T::DTYPE, q.read(stream, &mut g), k.read(stream, &mut g), v.read(stream, &mut g), out.read(stream, &mut g)).lse(lse.read(stream, &mut g));
        let grads = GradBuffers::new(dout.read(stream, &mut g), dq.write(stream, &mut g), dk.write(stream, &mut g), dv.write(stream, &mut g));
        let grads = match dsinks {
            Some(d) => grads.dsinks(d.write(stream, &mut g)),
            None => grads,
        };
        let plan = self.plan_backward(params, &bufs, &grads)?;
        // SAFETY: the plan checked every address against these borrowed buffers and the index
        // arrays `params` borrows; the stream is this context's; the caller vouches for custom
        // kernels.
        let launched = unsafe { self.launch_backward_on(stream.raw(), &plan, custom) };
        drop(g);
        launched
    }

    /// [`Gpu::attention_backward`] on raw device addresses and a raw `CUstream`, as
    /// [`Gpu::attention_forward_raw`] is to the forward: `bufs` holds Q, K, V, the output and
    /// the log-sum-exp (required), `grads` dO, dQ, dK and dV, each as an address and a
    /// capacity in elements.
    ///
    /// # Safety
    /// As for [`Gpu::attention_forward_raw`], for every buffer of `bufs` and `grads`: true
    /// capacities of live allocations usable in this GPU's context, nothing else writing the
    /// inputs or touching the gradients until the stream has passed the kernels, and `stream`
    /// null or a live stream of this context.
    pub unsafe fn attention_backward_raw(&self, stream: *mut c_void, params: &AttentionParams, bufs: &Buffers, grads: &GradBuffers) -> Result<()> {
        self.make_current()?;
        let plan = self.plan_backward(params, bufs, grads)?;
        if plan.is_empty() {
            return Ok(());
        }
        self.check_stream(stream)?;
        // SAFETY: per this function's contract.
        unsafe { self.launch_backward(stream, &plan) }
    }

    /// Launches a [`BackwardPlan`] on a raw `CUstream` with a workspace (the stream's kept one
    /// where it fits, else a stream-ordered allocation).
    ///
    /// # Safety
    /// As for [`Gpu::launch`]: the plan unchanged from [`AttentionParams::plan_backward`] with
    /// true capacities of live buffers, a valid stream, this GPU's context current.
    ///
    /// A plan with user data ([`crate::AttentionParamsBuilder::user_data`]) is refused: only
    /// the caller's own main kernel reads it ([`Gpu::launch_backward_custom`]).
    pub unsafe fn launch_backward(&self, stream: *mut c_void, plan: &BackwardPlan) -> Result<()> {
        // SAFETY: per this function's contract.
        unsafe { self.launch_backward_on(stream, plan, None) }
    }

    /// [`Gpu::launch_backward`] with the main kernel from the caller's own module (`custom`).
    ///
    /// # Safety
    /// As for [`Gpu::launch_backward`] and [`Gpu::launch_backward_custom`].
    pub(crate) unsafe fn launch_backward_on(&self, stream: *mut c_void, plan: &BackwardPlan, custom: Option<&CustomKernels>) -> Result<()> {
        user_data_needs_custom(plan.params.fwd.mods.user, custom)?;
        if let (Some(d), 0) = (plan.dsinks, plan.grids[2]) {
            // No query row, so no dQ kernel to write it: every row's sum is empty.
            let driver = self.driver;
            // SAFETY: the plan checked `d` for `len` f32 values; the stream is the caller's.
            driver.check("cuMemsetD32Async", unsafe { (driver.memset_d32_async)(d.ptr, 0, d.len, stream as _) })?;
        }
        if plan.grids.iter().all(|&g| g == 0) {
            return Ok(());
        }
        let available = self.max_shared_memory_per_block();
        if plan.smem > available {
            return Err(Error::SharedMemory { kernel: plan.kernels[1].to_string(), needed: plan.smem as u64, available: available as u64 });
        }
        let hopper = matches!(plan.kernels[1], Kernel::Bwd { step: BwdStep::MainSm90 { .. }, .. });
        if plan.kernels[1].needs_sm90a() && self.arch() != Arch::Sm90a {
            let (major, minor) = self.compute_capability();
            let path = if hopper { "wgmma" } else { "mma-sync" };
            return Err(Error::PathUnavailable { path, needs: "an sm_90a GPU (H100/H200)", major, minor });
        }
        // The dQ kernel's shared memory holds the sinks' gradient's partial sums, when asked.
        let smems = [0, plan.smem, if plan.params.dsinks != 0 { DSINKS_SMEM as u32 } else { 0 }];
        // In launch order, each with its function, grid and shared memory: a block-sparse
        // call's list kernels, then prep, main and dQ.
        let mut launches = vec![];
        for &(kernel, grid) in plan.lists.iter().flat_map(|l| &l.kernels) {
            launches.push((kernel, self.kernel_function(kernel, 0)?, grid, 0));
        }
        for (i, &kernel) in plan.kernels.iter().enumerate() {
            let func = if i == 1 { self.function_of(kernel, smems[i], custom)? } else { self.kernel_function(kernel, smems[i])? };
            launches.push((kernel, func, plan.grids[i], smems[i]));
        }
        let maps = if hopper { Some(encode_bwd_maps(plan)?) } else { None };
        let [dsum, sems] = plan.workspace_layout();
        let offsets = plan.upload.as_deref().unwrap_or(&[]);
        let run = |ws: WorkspaceAddrs| {
            let mut p = plan.params;
            if let (Some(base), Some(offsets)) = (ws.offsets, &plan.upload) {
                let per_array = p.fwd.batch as u64 + 1;
                p.fwd.cu_seqlens_q = base;
                p.fwd.cu_seqlens_k = if offsets.len() as u64 > per_array { base + 4 * per_array } else { 0 };
            }
            p.dq_accum = ws.partials;
            p.dsum = ws.partials + dsum as u64;
            p.dq_semaphore = if plan.deterministic { ws.partials + sems as u64 } else { 0 };
            if let Some(l) = &plan.lists {
                let at = |part: usize| ws.partials + (l.offset + l.bytes[..part].iter().sum::<usize>()) as u64;
                p.lists.bits = at(0);
                p.lists.counts = at(1);
                p.lists.entries = at(2);
                p.lists.turns = if plan.deterministic { at(3) } else { 0 };
            }
            for &(kernel, func, grid, smem) in launches.iter().filter(|l| l.2 > 0) {
                let arg = &mut p as *mut BwdParams as *mut c_void;
                let map = |m: &mut TensorMapParam| m as *mut TensorMapParam as *mut c_void;
                // The Hopper main kernel takes its four tensor maps first; the driver reads as
                // many arguments as the kernel has parameters.
                let mut maps = maps;
                let mut args = match maps.as_mut() {
                    Some([q, k, v, dout]) if kernel == plan.kernels[1] => [map(q), map(k), map(v), map(dout), arg],
                    _ => [arg, std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut()],
                };
                let d = self.driver;
                // SAFETY: the kernel takes the parameters `args` points at, valid for this plan
                // and workspace (a block-sparse call's lists lie in it).
                let r = unsafe { (d.launch_kernel)(func, grid, 1, 1, kernel.threads() as u32, 1, 1, smem, stream, args.as_mut_ptr(), std::ptr::null_mut()) };
                d.check("cuLaunchKernel", r)?;
            }
            Ok(())
        };
        // SAFETY: as for this function; `run` enqueues on `stream` only.
        unsafe { self.workspaces.with(stream, offsets, 0, plan.workspace_bytes, run) }
    }
}

/// The Hopper main kernel's Q, K, V and dO maps (see [`crate::launch`]): Q and dO in boxes of
/// `block_m` rows, K and V of `block_n`; a variable-length call's packed rows are one sequence
/// (its tiles read the next sequence's rows, or zeros past the buffers' last row). With no query
/// row only K and V are read (for zero dK, dV): K's map stands in for Q's and dO's; with no key
/// row nothing is, and Q's stands in for K's and V's.
fn encode_bwd_maps(plan: &BackwardPlan) -> Result<[TensorMapParam; 4]> {
    let (b, f) = (&plan.params, &plan.params.fwd);
    let main = plan.kernels[1];
    let (dtype, d, dv) = (main.dtype(), f.head_dim as usize, f.head_dim_v as usize);
    let (hq, hkv) = (f.heads_q as usize, (f.heads_q / f.group) as usize);
    let (bm, bn) = (main.block_m() as u32, main.block_n() as u32);
    let (batch, rows_q, rows_k) = match main {
        Kernel::Bwd { step: BwdStep::MainSm90 { varlen: true, .. }, .. } => (1, f.total_q as usize, f.total_k as usize),
        _ => (f.batch as usize, f.seqlen_q as usize, f.seqlen_k as usize),
    };
    // Each map of its tensor's head dimension (Q, K: `head_dim`; V, dO: `head_dim_v`): the
    // boxes past it read zeros.
    let elem = MapElement::of(dtype)?;
    let kv = |ptr, strides, d| encode_map(elem, ptr, strides, [batch, rows_k, hkv], d, bn).map(|m| m.param());
    let rows = |ptr, strides, d| encode_map(elem, ptr, strides, [batch, rows_q, hq], d, bm).map(|m| m.param());
    match (rows_q, rows_k) {
        (0, _) => {
            let (k, v) = (kv(f.k, f.k_strides, d)?, kv(f.v, f.v_strides, dv)?);
            Ok([k, k, v, k])
        }
        (_, 0) => {
            let q = rows(f.q, f.q_strides, d)?;
            Ok([q, q, q, rows(b.dout, b.dout_strides, dv)?])
        }
        _ => Ok([rows(f.q, f.q_strides, d)?, kv(f.k, f.k_strides, d)?, kv(f.v, f.v_strides, dv)?, rows(b.dout, b.dout_strides, dv)?]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::element::DType;

    /// Separate buffers of exactly the call's sizes, 1 MiB apart per element of the largest.
    fn plan(p: &AttentionParams, target: &Target) -> Result<BackwardPlan> {
        let q = p.batch * p.seqlen_q * p.heads_q * p.head_dim;
        let k = p.batch * p.seqlen_k * p.heads_kv * p.head_dim;
        let stride = ((q.max(k) * 4) as u64).next_multiple_of(1 << 20);
        let at = |i: u64, len: usize| BufferRef::new((1 << 32) + i * stride, len);
        let bufs = Buffers::new(DType::Bf16, at(0, q), at(1, k), at(2, k), at(3, q)).lse(at(4, p.batch * p.heads_q * p.seqlen_q));
        let grads = GradBuffers::new(at(5, q), at(6, q), at(7, k), at(8, k));
        p.plan_backward(&bufs, &grads, target)
    }

    fn params(head_dim: usize) -> crate::params::AttentionParamsBuilder<'static> {
        AttentionParams::builder().batch(2).seqlen_q(1000).seqlen_k(3000).heads_q(8).heads_kv(2).head_dim(head_dim).causal(true)
    }

    #[test]
    fn hopper_takes_fixed_length_calls_on_sm90a_and_keeps_its_accumulator_layout() {
        for (d, padded) in [(64, 64), (128, 128), (96, 128), (40, 64), (256, 256), (200, 256)] {
            let pl = plan(&params(d).build().unwrap(), &Target::H100).unwrap();
            let Kernel::Bwd { step: step @ BwdStep::MainSm90 { config: c, varlen: false, .. }, .. } = pl.kernels[1] else { panic!("{:?}", pl.kernels[1]) };
            assert_eq!((c.head_dim, pl.kernels[2]), (padded, Kernel::Bwd { dtype: DType::Bf16, step: BwdStep::Dq(AccumLayout::Fragments) }));
            assert_eq!(step.accum_layout(), AccumLayout::Fragments);
            // 64-row chunks of the padded head dim per (batch, head): ceil(1000 / 64) = 16.
            assert_eq!(pl.params.accum_len, (2 * 8 * 16 + 1) * 64 * padded as u64);
            // 128 keys per CTA, 64 at head_dim 256 (both consumers on the same keys).
            let bn = if padded == 256 { 64 } else { 128 };
            assert_eq!((c.block_n(), pl.params.n_blocks, pl.grids[1]), (bn, 3000u32.div_ceil(bn as u32), 2 * 2 * 3000u32.div_ceil(bn as u32)));
        }
        // Elsewhere, and where the Hopper kernel does not take the call: mma.sync, rows.
        let det = params(128).deterministic(true).build().unwrap();
        for (p, t) in [(params(128).build().unwrap(), Target::A100), (det.clone(), Target::A100), (params(256).build().unwrap(), Target::A100)] {
            let pl = plan(&p, &t).unwrap();
            assert!(matches!(pl.kernels[1], Kernel::Bwd { step: BwdStep::Main { accum: AccumLayout::Rows, .. }, .. }), "{:?}", pl.kernels[1]);
            assert_eq!(pl.kernels[2], Kernel::Bwd { dtype: DType::Bf16, step: BwdStep::Dq(AccumLayout::Rows) });
            assert_eq!(pl.params.accum_len, 2 * 8 * 1000 * pl.params.accum_dim as u64);
        }
        // Forced families.
        let mma = params(64).kernel(KernelChoice::MmaSync { config: None }).build().unwrap();
        // mma.sync on sm_90a adds in fragment order, with the Hopper kernel's row kernels.
        let pl = plan(&mma, &Target::H100).unwrap();
        assert!(matches!(pl.kernels[1], Kernel::Bwd { step: BwdStep::Main { accum: AccumLayout::Fragments, .. }, .. }));
        assert_eq!(pl.kernels[0], Kernel::Bwd { dtype: DType::Bf16, step: BwdStep::Prep(AccumLayout::Fragments) });
        assert_eq!(pl.params.accum_len, (2 * 8 * 16 + 1) * 64 * 64);
        let wgmma = KernelChoice::Wgmma { config: None, persistent: None };
        assert!(matches!(plan(&params(64).kernel(wgmma).build().unwrap(), &Target::A100), Err(Error::PathUnavailable { .. })));
        // Deterministic calls too, with one counter per 64-row query block.
        let mut det_wgmma = det;
        det_wgmma.kernel = wgmma;
        let pl = plan(&det_wgmma, &Target::H100).unwrap();
        assert!(matches!(pl.kernels[1], Kernel::Bwd { step: BwdStep::MainSm90 { .. }, .. }) && pl.deterministic);
        assert_eq!(pl.params.fwd.m_blocks, 16);
        let forced = params(64).kernel(KernelChoice::MmaSync { config: Some(flashrs_abi::tiles::CONFIGS[0]) }).build().unwrap();
        assert!(matches!(plan(&forced, &Target::H100), Err(Error::InvalidShape { what: "kernel", .. })));
    }

    #[test]
    fn hopper_takes_variable_length_calls_with_blocks_padded_per_sequence() {
        // Sequences of 1, 100 and 64 query rows (165 packed), 300, 0 and 70 keys.
        let (cq, ck) = ([0, 1, 101, 165], [0, 300, 300, 370]);
        let p = AttentionParams::builder().heads_q(8).heads_kv(2).head_dim(128).causal(true).deterministic(true).varlen(&cq, &ck).build().unwrap();
        let (q, k) = (165 * 8 * 128, 370 * 2 * 128);
        let at = |i: u64, len: usize| BufferRef::new((1 << 32) + i * (1 << 24), len);
        let bufs = Buffers::new(DType::F16, at(0, q), at(1, k), at(2, k), at(3, q)).lse(at(4, 8 * 165));
        let grads = GradBuffers::new(at(5, q), at(6, q), at(7, k), at(8, k));
        let pl = p.plan_backward(&bufs, &grads, &Target::H100).unwrap();
        let Kernel::Bwd { step: BwdStep::MainSm90 { config, varlen: true, .. }, .. } = pl.kernels[1] else { panic!("{:?}", pl.kernels[1]) };
        assert_eq!(pl.kernels[1].to_string(), "flash_bwd_sm90_varlen_f16_d128_64x128s2");
        // Per head 165 / 64 + 3 = 5 blocks (the sequences need 1 + 2 + 1), 8 heads.
        let blocks = 8 * 5;
        assert_eq!(pl.params.accum_len, (blocks + 1) * 64 * 128);
        // Accumulator and statistics (128 f32 a block), each with a padding block, and one
        // counter a block.
        assert_eq!(pl.workspace_bytes as u64, 4 * ((blocks + 1) * 64 * 128 + (blocks + 1) * 128 + blocks));
        // The longest sequence's keys size the grid: 300 keys, 3 blocks of 128 per (sequence, K/V head).
        assert_eq!((config.block_n(), pl.params.n_blocks, pl.grids[1]), (128, 3, 3 * 2 * 3));
        // The row kernels walk every sequence padded to the longest's blocks: 3 x 2 x 64 rows.
        assert_eq!((pl.params.rows, pl.grids[0]), (384, 384 * 8 * 16 / 256), "16 lanes a row at head_dim 128");
    }
}
