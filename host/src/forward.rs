//! The entry points: plan a call for this GPU and launch it, on cust buffers (safe) or on raw
//! device addresses and a raw `CUstream` (for projects on other CUDA crates).
use std::ffi::c_void;

use cust::memory::DeviceSlice;
use cust::prelude::Stream;
use flashrs_abi::Kernel;

use crate::buffers::{BufferRef, Buffers};
use crate::device::Gpu;
use crate::element::Element;
use crate::error::{Error, Result, check_driver};
use crate::params::AttentionParams;
use crate::plan::{LaunchPlan, plan};

impl Gpu {
    /// [`AttentionParams::plan`] for this GPU ([`Gpu::target`]), counting its CTA slots per
    /// kernel with the driver's occupancy calculator. Pure host code apart from that query.
    pub fn plan_forward(&self, params: &AttentionParams, bufs: &Buffers) -> Result<LaunchPlan> {
        let target = self.target();
        let slots = |k: &Kernel| {
            let estimate = || target.resident_ctas(k.threads(), k.smem_bytes());
            let per_sm = self.resident_ctas(*k).map_or_else(|_| estimate(), |n| n as usize);
            target.sm_count as usize * per_sm.max(1)
        };
        plan(params, bufs, &target, &slots)
    }

    /// Launches forward attention on `stream` (asynchronously) after validating every input.
    ///
    /// `q`, `k`, `v` and `out` hold the tensors the call's [`crate::Layout`] describes: `[batch,
    /// seqlen, heads, head_dim]` with the strides of `params` (contiguous by default), packed
    /// `[total, heads, head_dim]` rows for a variable-length call, whole `[num_pages,
    /// page_size, heads_kv, head_dim]` caches for a paged one; the layout's index arrays are
    /// borrowed in `params` itself. `lse`, if given, receives the f32 log-sum-exp of each (batch,
    /// head, query row), `-inf` for rows that see no key (whose output is 0). A call with zero
    /// batch, heads or query rows does nothing and returns `Ok`.
    ///
    /// `T` must match [`AttentionParams::dtype`]. This GPU's context must be current on the
    /// calling thread (it is on the thread that created the `Gpu`; elsewhere call
    /// [`Gpu::make_current`]), and `stream` must belong to it.
    ///
    /// Returns the first validation error without launching anything. `Ok` means the kernel was
    /// queued: errors while it runs surface at the next synchronisation.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_forward<T: Element>(
        &self,
        stream: &Stream,
        params: &AttentionParams,
        q: &DeviceSlice<T>,
        k: &DeviceSlice<T>,
        v: &DeviceSlice<T>,
        out: &mut DeviceSlice<T>,
        lse: Option<&mut DeviceSlice<f32>>,
    ) -> Result<()> {
        if params.dtype != T::DTYPE {
            let reason = format!("params say {:?}, buffers hold {:?}", params.dtype, T::DTYPE);
            return Err(Error::InvalidShape { what: "dtype", reason });
        }
        let bufs = Buffers { q: BufferRef::of(q), k: BufferRef::of(k), v: BufferRef::of(v), o: BufferRef::of(out), lse: lse.map(|l| BufferRef::of(l)) };
        let plan = self.plan_forward(params, &bufs)?;
        // SAFETY: the plan checked every address the kernel forms against these borrowed
        // buffers and the index arrays `params` borrows.
        unsafe { self.launch(stream.as_inner() as *mut c_void, &plan) }
    }

    /// Launches forward attention on a raw `CUstream`, with the tensors given as device
    /// addresses and capacities: the entry point for projects whose buffers and streams come
    /// from another CUDA crate (cudarc, candle, a runtime-API library).
    ///
    /// It is [`Gpu::attention_forward`] without the cust types: `bufs` holds each tensor's
    /// device address and capacity **in elements** (of [`AttentionParams::dtype`] for Q, K, V
    /// and the output, of `f32` for the log-sum-exp), and the same validation runs before
    /// anything is launched. `stream` is any crate's `CUstream` handle cast to a pointer (for
    /// example `cudarc_stream.cu_stream() as *mut c_void`); null means the context's legacy
    /// default stream.
    ///
    /// Before launching, this GPU's context is made current on the calling thread if it is not
    /// already (as cudarc does before its own calls). That context is the device's **primary
    /// context** ([`Gpu::new`] retains it), the one cudarc's `CudaContext::new(ordinal)`,
    /// candle's `CudaDevice` and the CUDA runtime use: memory and streams from them are valid
    /// here as they are, provided the `Gpu` was opened with the same device ordinal.
    ///
    /// # Safety
    ///
    /// The planner checks every address the kernel will form against the given capacities,
    /// and refuses null addresses and outputs that overlap each other or the inputs; the caller
    /// vouches for the capacities themselves and for the lifetime of the memory:
    ///
    /// * Each `BufferRef` (and each index array of the layout) describes device memory usable
    ///   in this GPU's context, and its `len` elements from `ptr` on lie within one live
    ///   allocation: `len` is a true capacity, never more than what was allocated.
    /// * The memory stays allocated, and nothing else writes Q, K, V or the index arrays or
    ///   reads or writes the output or log-sum-exp, from this call until the stream has passed
    ///   the kernel. Freeing in stream order on the same stream after the call is fine.
    /// * `stream` is null or a live stream created in this GPU's context, and stays alive until
    ///   the kernel has been queued (this call's return).
    pub unsafe fn attention_forward_raw(&self, stream: *mut c_void, params: &AttentionParams, bufs: &Buffers) -> Result<()> {
        let plan = self.plan_forward(params, bufs)?;
        if plan.is_empty() {
            return Ok(());
        }
        use cust::sys::{CUcontext, cuCtxGetCurrent, cuCtxSetCurrent};
        let mut current: CUcontext = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        check_driver("cuCtxGetCurrent", unsafe { cuCtxGetCurrent(&mut current) })?;
        if current != self.raw_context() {
            // SAFETY: this GPU's context, alive as long as `self`.
            check_driver("cuCtxSetCurrent", unsafe { cuCtxSetCurrent(self.raw_context()) })?;
        }
        // SAFETY: the plan checked every address against the capacities, which the caller
        // vouches for, as for the stream and the buffers' lifetimes.
        unsafe { self.launch(stream, &plan) }
    }
}
