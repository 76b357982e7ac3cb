//! The last stage: one function launches every [`LaunchPlan`] ([`Gpu::launch`]).
//!
//! It looks the kernel up (cached per [`Kernel`]), encodes the Hopper kernels' tensor maps
//! (they hold raw device addresses, so they are made per launch), binds the plan's workspace
//! (uploaded host offsets, split-KV counters and partials, a persistent launch's tile
//! counters; see [`crate::workspace`]) into the parameters, and calls `cuLaunchKernel`.
//!
//! Tensor maps: each tensor as a 4-D view `[head_dim, seqlen, heads, batch]` (innermost first)
//! with its strides, read in boxes of 64 columns (128 bytes, the 128-byte swizzle's width) by
//! the kernel's `block_m` (Q) or `block_n` (K, V) rows. Rows past the sequence and columns past
//! `head_dim` arrive as zeros, which is how ragged lengths and padded head dimensions are
//! handled. GQA/MQA index K and V by `head / group` in the map coordinates, without copies.
use std::ffi::c_void;

#[cfg(feature = "nccl")]
use flashrs_abi::merge::MERGE_THREADS;
#[cfg(feature = "nccl")]
use flashrs_abi::MergeParams;
use flashrs_abi::{DType, FwdParams, Kernel};

use crate::custom::{CustomKernels, user_data_needs_custom};
use crate::device::Gpu;
use crate::driver::{Driver, Handle};
use crate::error::{Error, Result};
use crate::plan::LaunchPlan;
use crate::select::MAX_STRIDE_BYTES;
use crate::target::Arch;
use crate::tensor_map::{Swizzle, TensorDataType, TensorMap, TensorMapParam};
use crate::workspace::WorkspaceAddrs;

impl Gpu {
    /// Launches a plan on a raw `CUstream` (null: the legacy default stream): sets the kernel's
    /// dynamic shared memory opt-in and launches it with the plan's geometry, with the
    /// workspace it needs (the one this GPU keeps for `stream`, else one stream-ordered
    /// allocation for this launch, see [`crate::workspace`]). Does nothing for an empty plan.
    /// Useful to launch one plan many times without validating again (the benchmark does);
    /// unlike [`Gpu::attention_forward_raw`] it does not make the context current.
    ///
    /// Errors: a plan for a Hopper kernel on a GPU without sm_90a, or one needing more shared
    /// memory than this GPU allows (a plan made for another target).
    ///
    /// # Safety
    /// The plan's buffers must be live device allocations of this GPU's context, not freed or
    /// written by anything else until the stream reaches the kernel's end, and `stream` must
    /// be a valid stream of this context (or null). The plan must come unchanged from
    /// [`AttentionParams::plan`](crate::AttentionParams::plan) or [`Gpu::plan_forward`] with
    /// true capacities (its fields are public, and a plan edited by hand is not checked
    /// again), and this GPU's context must be current on the calling thread.
    ///
    /// A plan with user data ([`crate::AttentionParamsBuilder::user_data`]) is refused: only
    /// the caller's own kernels read it ([`Gpu::launch_custom`]).
    pub unsafe fn launch(&self, stream: *mut c_void, plan: &LaunchPlan) -> Result<()> {
        // SAFETY: per this function's contract.
        unsafe { self.launch_on(stream, plan, None) }
    }

    /// [`Gpu::launch`] on the shipped kernels, or on the caller's own (`custom`).
    ///
    /// # Safety
    /// As for [`Gpu::launch`] and [`Gpu::launch_custom`].
    pub(crate) unsafe fn launch_on(&self, stream: *mut c_void, plan: &LaunchPlan, custom: Option<&CustomKernels>) -> Result<()> {
        if plan.is_empty() {
            return Ok(());
        }
        user_data_needs_custom(plan.params.mods.user, custom)?;
        if plan.kernel.needs_sm90a() && self.arch() != Arch::Sm90a {
            let (major, minor) = self.compute_capability();
            return Err(Error::PathUnavailable { path: "wgmma", needs: "an sm_90a GPU (H100/H200)", major, minor });
        }
        let available = self.max_shared_memory_per_block();
        if plan.smem > available {
            return Err(Error::SharedMemory { kernel: plan.kernel.to_string(), needed: plan.smem as u64, available: available as u64 });
        }
        let func = self.function_of(plan.kernel, plan.smem, custom)?;
        let maps = match plan.kernel {
            Kernel::Sm90 { dtype, inputs, config, .. } => {
                let elem = match inputs {
                    None => MapElement::of(dtype)?,
                    Some(_) => MapElement::fp8(config.head_dim),
                };
                Some(encode_maps(elem, plan)?)
            }
            Kernel::Mma { .. } | Kernel::Bwd { .. } | Kernel::Merge { .. } => None,
        };
        let run = |ws: WorkspaceAddrs| {
            let mut params = plan.params;
            bind(plan, &mut params, ws);
            // SAFETY: the plan was validated for these buffers, the workspace is set up for
            // this launch, and the arguments match the kernel's parameters.
            unsafe { launch_raw(self.driver, func, stream, plan, &params, maps.as_ref()) }
        };
        let (counters, partial_bytes) = plan.workspace();
        let offsets = plan.upload.as_deref().unwrap_or(&[]);
        if counters == 0 && partial_bytes == 0 && offsets.is_empty() {
            return run(WorkspaceAddrs::NONE);
        }
        // SAFETY: as for this function; `run` enqueues on `stream` only.
        unsafe { self.workspaces.with(stream, offsets, counters, partial_bytes, run) }
    }
}

#[cfg(feature = "nccl")]
impl Gpu {
    /// Launches the merge kernel ([`flashrs_abi::merge`], ring attention's, [`crate::ring`]) of
    /// element type `dtype` on a raw `CUstream`. Does nothing for a launch that covers no row.
    ///
    /// # Safety
    /// Every address of `p` is a live device allocation of this GPU's context holding what the
    /// merge reads and writes for `p`'s extents, not written by anything else until the stream
    /// passes the kernel; `stream` is a valid stream of the context, which is current.
    pub(crate) unsafe fn launch_merge(&self, stream: *mut c_void, dtype: DType, p: &MergeParams) -> Result<()> {
        if p.warps() == 0 {
            return Ok(());
        }
        let grid = u32::try_from(p.grid()).ok().filter(|&g| g < 1 << 31).ok_or_else(|| Error::LaunchLimit(format!("merge of {} rows", p.warps())))?;
        let kernel = Kernel::Merge { dtype };
        let func = self.kernel_function(kernel, 0)?;
        let mut params = *p;
        let mut args = [&mut params as *mut MergeParams as *mut c_void];
        let d = self.driver;
        // SAFETY: per this function's contract; `args` points at the kernel's one parameter.
        let r = unsafe { (d.launch_kernel)(func, grid, 1, 1, MERGE_THREADS as u32, 1, 1, 0, stream, args.as_mut_ptr(), std::ptr::null_mut()) };
        d.check("cuLaunchKernel", r)
    }
}

/// Points the parameters at a launch's workspace: uploaded host offsets (the query offsets,
/// then the key offsets where the plan has them), split-KV counters and partials (O, then the
/// log-sum-exps), a persistent launch's tile counters.
fn bind(plan: &LaunchPlan, params: &mut FwdParams, ws: WorkspaceAddrs) {
    if let (Some(base), Some(offsets)) = (ws.offsets, &plan.upload) {
        let per_array = params.batch as u64 + 1;
        params.cu_seqlens_q = base;
        params.cu_seqlens_k = if offsets.len() as u64 > per_array { base + 4 * per_array } else { 0 };
    }
    if let Some(s) = &plan.split {
        params.split_counters = ws.counters;
        params.o_accum = ws.partials;
        params.lse_accum = ws.partials + (s.o_accum_len * 4) as u64;
    }
    if plan.persistent {
        params.tile_counter = ws.counters;
    }
}

/// The tensor maps a Hopper forward kernel takes before its parameters: Q, K and V, and for
/// the paged kernels (`paged`) V's again in boxes of 8 rows and of 1 row.
#[derive(Clone, Copy)]
struct Maps {
    maps: [TensorMapParam; 5],
    paged: bool,
}

/// `cuLaunchKernel` of a plan's kernel: by-value [`FwdParams`], after the tensor maps of the
/// Hopper kernels.
///
/// # Safety
/// `func` is the plan's kernel of the current context's module, `params` valid for its
/// geometry, `stream` a valid stream of the context.
unsafe fn launch_raw(d: &Driver, func: Handle, stream: *mut c_void, plan: &LaunchPlan, params: &FwdParams, maps: Option<&Maps>) -> Result<()> {
    let mut params = *params;
    let mut maps = maps.copied();
    let p = &mut params as *mut FwdParams as *mut c_void;
    let map = |m: &mut TensorMapParam| m as *mut TensorMapParam as *mut c_void;
    let null = std::ptr::null_mut();
    // The driver reads as many arguments as the kernel has parameters.
    let mut args: [*mut c_void; 6] = match maps.as_mut() {
        Some(Maps { maps: [q, k, v, v8, v1], paged: true }) => [map(q), map(k), map(v), map(v8), map(v1), p],
        Some(Maps { maps: [q, k, v, ..], paged: false }) => [map(q), map(k), map(v), p, null, null],
        None => [p, null, null, null, null, null],
    };
    // SAFETY: per this function's contract; `args` point at live values of the parameter types.
    let r = unsafe { (d.launch_kernel)(func, plan.grid, 1, 1, plan.block, 1, 1, plan.smem, stream, args.as_mut_ptr(), std::ptr::null_mut()) };
    d.check("cuLaunchKernel", r)
}

/// What a tensor map's element and box are: 16-bit elements in boxes of 64 columns (128
/// bytes), or FP8 bytes in boxes of the kernel's slab width (64 or 128 bytes), each swizzled by
/// its box's span.
#[derive(Clone, Copy)]
pub(crate) struct MapElement {
    data_type: TensorDataType,
    bytes: u64,
    box_cols: u32,
    swizzle: Swizzle,
}

impl MapElement {
    /// 16-bit elements of `dtype`.
    pub(crate) fn of(dtype: DType) -> Result<Self> {
        let data_type = match dtype {
            DType::F16 => TensorDataType::F16,
            DType::Bf16 => TensorDataType::Bf16,
            other => return Err(Error::Kernels(format!("no Hopper kernel takes {other:?}"))),
        };
        Ok(MapElement { data_type, bytes: 2, box_cols: 64, swizzle: Swizzle::B128 })
    }

    /// FP8 bytes for a kernel of padded head dimension `head_dim`: boxes of one slab row
    /// ([`flashrs_abi::sm90::slab_row`]), 64 or 128 bytes.
    fn fp8(head_dim: usize) -> Self {
        let box_cols = flashrs_abi::sm90::slab_row(head_dim);
        let swizzle = if box_cols == 128 { Swizzle::B128 } else { Swizzle::B64 };
        MapElement { data_type: TensorDataType::U8, bytes: 1, box_cols: box_cols as u32, swizzle }
    }
}

/// The map of one `[batch, seqlen, heads, head_dim]` tensor: 4-D `[head_dim, seqlen, heads,
/// batch]`, boxes of `elem`'s columns x `box_rows` rows, its swizzle, zero fill.
pub(crate) fn encode_map(elem: MapElement, ptr: u64, strides: [i64; 3], dims: [usize; 3], head_dim: usize, box_rows: u32) -> Result<TensorMap> {
    let [batch, seqlen, heads] = dims;
    let [sb, sr, sh] = strides;
    // A dimension of one index is never stepped: any legal stride describes it.
    let bytes = |stride: i64, extent: usize| {
        let b = stride as u64 * elem.bytes;
        if extent <= 1 && (b == 0 || b >= MAX_STRIDE_BYTES) { 16 } else { b }
    };
    TensorMap::tiled(
        elem.data_type,
        ptr,
        &[head_dim as u64, seqlen as u64, heads as u64, batch as u64],
        &[bytes(sr, seqlen), bytes(sh, heads), bytes(sb, batch)],
        &[elem.box_cols, box_rows, 1, 1],
    )
    .swizzle(elem.swizzle)
    .encode()
}

/// The Q, K and V maps of a Hopper launch. With no keys, K and V are never read (and their
/// strides were never validated): Q's map stands in for them.
///
/// Paged kernels read K and V as `[head_dim, page_size, heads, num_pages]` (the batch strides
/// are the page strides) in boxes of `min(page_size, block_n)` rows, so that a box never
/// crosses a page, and take V's map twice more, in boxes of 8 rows and of 1 row, for the rows
/// of a sequence's last page (see the device crate's `hopper::producer`).
fn encode_maps(elem: MapElement, plan: &LaunchPlan) -> Result<Maps> {
    let p = &plan.params;
    let (d, dv) = (p.head_dim as usize, p.head_dim_v as usize);
    let (hq, hkv) = (p.heads_q as usize, (p.heads_q / p.group) as usize);
    let paged = matches!(plan.kernel, Kernel::Sm90 { paged: true, .. });
    // Packed rows (variable-length) are one sequence: the maps end where the buffers' rows do,
    // so the last sequence's tiles read zeros past them.
    let (batch, [rows_q, rows_k]) = match plan.packed_rows {
        Some(rows) => (1, rows),
        None => (p.batch as usize, [p.seqlen_q as usize, p.seqlen_k as usize]),
    };
    let q = encode_map(elem, p.q, p.q_strides, [batch, rows_q, hq], d, plan.kernel.block_m() as u32)?.param();
    let bn = plan.kernel.block_n() as u32;
    let no_keys = if paged { p.seqlen_k == 0 } else { rows_k == 0 };
    let maps = if no_keys {
        [q; 5]
    } else if paged {
        let page_size = 1usize << p.page_shift;
        let dims = [p.last_page as usize + 1, page_size, hkv];
        let seg = page_size.min(bn as usize) as u32;
        let k = encode_map(elem, p.k, p.k_strides, dims, d, seg)?;
        let [v, v8, v1] = [seg, 8, 1].map(|rows| encode_map(elem, p.v, p.v_strides, dims, dv, rows));
        [q, k.param(), v?.param(), v8?.param(), v1?.param()]
    } else {
        let k = encode_map(elem, p.k, p.k_strides, [batch, rows_k, hkv], d, bn)?;
        let v = encode_map(elem, p.v, p.v_strides, [batch, rows_k, hkv], dv, bn)?;
        [q, k.param(), v.param(), q, q]
    };
    Ok(Maps { maps, paged })
}
