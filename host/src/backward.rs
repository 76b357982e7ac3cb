//! The backward pass: dQ, dK and dV from Q, K, V, the forward's output and log-sum-exp, and dO.
//!
//! Planned like the forward (validate → choose a kernel → a checked plan, [`BackwardPlan`]) and
//! launched as three kernels on one stream ([`flashrs_abi::bwd`] describes them) with one
//! workspace: the f32 dQ accumulator and `dot(dO, O)` per (batch, head, query row), O(batch x
//! seqlen x heads x head_dim), and in deterministic mode one counter per query block.
//! Gradients have the strides of their tensors (dQ Q's, dK K's, dV V's, dO the output's).
use std::ffi::c_void;

use flashrs_abi::bwd::{BWD_CONFIGS, BWD_ROW_THREADS, BwdConfig};
use flashrs_abi::tiles::padded_head_dim;
use flashrs_abi::{BwdParams, BwdStep, FwdParams, Kernel};

use crate::buffers::{BufferRef, Buffers};
use crate::device::Gpu;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::layout::Kv;
use crate::memory::{DeviceRead, DeviceWrite, Guards, LaunchStream};
use crate::params::{AttentionParams, KernelChoice, Strides};
use crate::target::Target;
use crate::plan::u32_field;
use crate::validate::{check_tensor, kernel_strides, no_self_overlap, validate};
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
}

impl GradBuffers {
    /// dO, dQ, dK and dV.
    pub fn new(dout: BufferRef, dq: BufferRef, dk: BufferRef, dv: BufferRef) -> Self {
        GradBuffers { dout, dq, dk, dv }
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
}

impl BackwardPlan {
    /// True when there is nothing to compute.
    pub fn is_empty(&self) -> bool {
        self.grids.iter().all(|&g| g == 0)
    }

    /// Byte offsets in the workspace of dsum and of the counters (the accumulator is first).
    fn workspace_layout(&self) -> [usize; 2] {
        let p = &self.params;
        let rows = p.rows as usize * p.fwd.heads_q as usize;
        let dsum = (rows * p.accum_dim as usize * 4).next_multiple_of(16);
        [dsum, dsum + (rows * 4).next_multiple_of(16)]
    }
}

/// The backward configuration for `head_dim` on `target`: its padded dimension's first that fits.
fn choose(head_dim: usize, target: &Target) -> Result<BwdConfig> {
    let padded = padded_head_dim(head_dim).ok_or(Error::UnsupportedHeadDim(head_dim))?;
    let ours = || BWD_CONFIGS.iter().filter(move |c| c.head_dim == padded);
    ours().find(|c| c.smem_bytes() <= target.max_smem_per_block as usize).copied().ok_or_else(|| Error::SharedMemory {
        kernel: "the backward pass".into(),
        needed: ours().map(|c| c.smem_bytes()).min().unwrap_or(0) as u64,
        available: target.max_smem_per_block as u64,
    })
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
        if !matches!(p.kernel, KernelChoice::Auto | KernelChoice::MmaSync { config: None }) {
            return Err(Error::InvalidShape { what: "kernel", reason: "the backward pass runs on its own mma.sync kernels: leave the kernel choice automatic".into() });
        }
        let call = validate(p, bufs)?;
        let config = choose(p.head_dim, target)?;
        let dtype = bufs.dtype;
        let kernels = [Kernel::Bwd { dtype, step: BwdStep::Prep }, Kernel::Bwd { dtype, step: BwdStep::Main(config) }, Kernel::Bwd { dtype, step: BwdStep::Dq }];
        let (rows_q, rows_k) = match &call.packed {
            Some(v) => (v.total_q, v.total_k),
            None => (p.seqlen_q, p.seqlen_k),
        };
        let nb = if call.packed.is_some() { 1 } else { p.batch };
        let mut plan = BackwardPlan { kernels, grids: [0; 3], smem: config.smem_bytes() as u32, params: BwdParams::default(), upload: None, workspace_bytes: 0, deterministic: p.deterministic };
        if p.batch == 0 || p.heads_q == 0 || (rows_q == 0 && rows_k == 0) {
            return Ok(plan);
        }
        let strides = kernel_strides(p, call.packed.is_some(), false)?;
        let st = |[batch, row, head]: [i64; 3]| Strides { batch, row, head };
        let [q_s, k_s, v_s, o_s] = strides.map(st);
        let (d, hq, hkv) = (p.head_dim, p.heads_q, p.heads_kv);
        let (q_dims, k_dims) = ([nb, rows_q, hq, d], [nb, rows_k, hkv, d]);
        // The forward's buffers as the forward checks them (with no query row, K, V and the
        // index arrays alone), and their byte spans; then the gradients'.
        let mut read = if rows_q > 0 { call.check_buffers()? } else { call.index_spans()? };
        let mut written = vec![];
        if rows_q > 0 {
            read.push(("dout", grads.dout.ptr, check_tensor("dout", grads.dout, o_s, q_dims, 2)?));
            written.push(("dq", grads.dq.ptr, check_tensor("dq", grads.dq, q_s, q_dims, 2)?, q_s, q_dims));
        }
        if rows_k > 0 {
            if rows_q == 0 {
                read.push(("k", bufs.k.ptr, check_tensor("k", bufs.k, k_s, k_dims, 2)?));
                read.push(("v", bufs.v.ptr, check_tensor("v", bufs.v, v_s, k_dims, 2)?));
            }
            written.push(("dk", grads.dk.ptr, check_tensor("dk", grads.dk, k_s, k_dims, 2)?, k_s, k_dims));
            written.push(("dv", grads.dv.ptr, check_tensor("dv", grads.dv, v_s, k_dims, 2)?, v_s, k_dims));
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

        let (bm, bn) = (config.block_m, config.block_n);
        let m_blocks = p.seqlen_q.div_ceil(bm);
        let n_blocks = p.seqlen_k.div_ceil(bn);
        let rows = if call.packed.is_some() { rows_q as u128 } else { p.batch as u128 * p.seqlen_q as u128 };
        let row_warps = rows * hq as u128;
        // 32-bit indices in the kernels: warps, rows x heads, counters.
        limit("query rows x heads", row_warps)?;
        limit("counters", p.batch as u128 * hq as u128 * m_blocks as u128)?;
        let main_grid = limit("backward CTAs", p.batch as u128 * hkv as u128 * n_blocks as u128)?;
        let row_grid = limit("row CTAs", row_warps.div_ceil((BWD_ROW_THREADS / 32) as u128))?;
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
            scale_log2: call.scale_log2,
            causal: p.causal as u32,
            m_blocks: m_blocks as u32,
            num_splits: 1,
            total_q: u32_field("total_q", rows_q)?,
            total_k: u32_field("total_k", rows_k)?,
            ..FwdParams::default()
        };
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
            accum_dim: config.head_dim as u32,
            n_blocks: n_blocks as u32,
            rows: rows as u32,
            ..BwdParams::default()
        };
        if let Some(v) = &call.packed {
            [params.fwd.cu_seqlens_q, params.fwd.cu_seqlens_k] = v.cu_seqlens;
            plan.upload = v.upload.clone();
        }
        plan.params = params;
        plan.grids = if rows_q > 0 { [row_grid, main_grid, row_grid] } else { [0, main_grid, 0] };
        let [_, sems] = plan.workspace_layout();
        plan.workspace_bytes = sems + if p.deterministic { (p.batch * hq * m_blocks * 4).next_multiple_of(16) } else { 0 };
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
    /// variable-length offsets; not paged caches), same buffer types. Each gradient has its
    /// tensor's strides (dO the output's). Under GQA/MQA, dK and dV are summed over each K/V
    /// head's query heads. Rows that see no key get zero dQ; keys no row sees get zero dK and
    /// dV. Memory beyond the buffers: a workspace of `(head_dim padded to 64/128/256 + 1)` f32
    /// per (batch, head, query row). With [`AttentionParams::deterministic`], every gradient
    /// is bit-identical from run to run.
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
        self.make_current()?;
        self.check_stream(stream.raw())?;
        let mut g = Guards::default();
        let bufs = Buffers::new(T::DTYPE, q.read(stream, &mut g), k.read(stream, &mut g), v.read(stream, &mut g), out.read(stream, &mut g)).lse(lse.read(stream, &mut g));
        let grads = GradBuffers::new(dout.read(stream, &mut g), dq.write(stream, &mut g), dk.write(stream, &mut g), dv.write(stream, &mut g));
        for index in params.layout.device_indices() {
            stream.track(&index, &mut g);
        }
        let plan = self.plan_backward(params, &bufs, &grads)?;
        // SAFETY: the plan checked every address against these borrowed buffers and the index
        // arrays `params` borrows; the stream is this context's.
        let launched = unsafe { self.launch_backward(stream.raw(), &plan) };
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
    pub unsafe fn launch_backward(&self, stream: *mut c_void, plan: &BackwardPlan) -> Result<()> {
        if plan.is_empty() {
            return Ok(());
        }
        let available = self.max_shared_memory_per_block();
        if plan.smem > available {
            return Err(Error::SharedMemory { kernel: plan.kernels[1].to_string(), needed: plan.smem as u64, available: available as u64 });
        }
        let funcs = [self.kernel_function(plan.kernels[0], 0)?, self.kernel_function(plan.kernels[1], plan.smem)?, self.kernel_function(plan.kernels[2], 0)?];
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
            for (i, &func) in funcs.iter().enumerate() {
                if plan.grids[i] == 0 {
                    continue;
                }
                let smem = if i == 1 { plan.smem } else { 0 };
                let mut arg = &mut p as *mut BwdParams as *mut c_void;
                let d = self.driver;
                // SAFETY: the kernel takes one `BwdParams`, valid for this plan and workspace.
                let r = unsafe { (d.launch_kernel)(func, plan.grids[i], 1, 1, plan.kernels[i].threads() as u32, 1, 1, smem, stream, &mut arg, std::ptr::null_mut()) };
                d.check("cuLaunchKernel", r)?;
            }
            Ok(())
        };
        // SAFETY: as for this function; `run` enqueues on `stream` only.
        unsafe { self.workspaces.with(stream, offsets, 0, plan.workspace_bytes, run) }
    }
}
