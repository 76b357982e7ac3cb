//! The entry points: plan a call for this GPU and launch it, on typed buffers of any CUDA crate
//! ([`crate::memory`]; safe) or on raw device addresses and a raw `CUstream`.
use std::ffi::c_void;

use flashrs_abi::Kernel;

use crate::buffers::Buffers;
use crate::custom::CustomKernels;
use crate::device::Gpu;
use crate::element::{Element, KvElement, QueryElement};
use crate::error::Result;
use crate::memory::{DeviceRead, DeviceWrite, Guards, LaunchStream};
use crate::params::{AttentionParams, KernelChoice, KernelPath};
use crate::plan::{LaunchPlan, plan};

impl Gpu {
    /// What every typed entry point does before it reads its buffers: this GPU's context made
    /// current, `stream` checked to be one of it, and the arrays `params` borrows (index arrays,
    /// ALiBi slopes, sinks, a block mask) tracked for `stream` in the guards it returns (the buffers' go into
    /// them too).
    pub(crate) fn enter_typed_call<'a, S: LaunchStream + ?Sized>(&self, stream: &'a S, params: &AttentionParams<'a>) -> Result<Guards<'a>> {
        self.make_current()?;
        self.check_stream(stream.raw())?;
        let mut guards = Guards::default();
        for index in params.layout.device_indices() {
            stream.track(&index, &mut guards);
        }
        for array in params.mods.device_arrays().chain(params.descale.device_arrays()) {
            stream.track(&array, &mut guards);
        }
        for index in params.mods.device_indices() {
            stream.track(&index, &mut guards);
        }
        Ok(guards)
    }

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
    /// The buffers are any CUDA crate's that implement the [`crate::memory`] traits: cust's
    /// `DeviceBuffer` / `DeviceSlice` on a cust `Stream` (feature `cust`), cudarc's
    /// `CudaSlice` / `CudaView` / `CudaViewMut` on a `CudaStream` (feature `cudarc`, which
    /// also records each access for cudarc's stream synchronisation). The element type `T`
    /// (`f16` or `bf16`) is the output's and, as a rule, Q's; K and V are of `T` too, or FP8
    /// caches ([`crate::E4m3`], [`crate::E5m2`]) dequantized by the call's
    /// [`crate::AttentionParamsBuilder::kv_descale`], run on the `mma.sync` path (split-capable
    /// kernels; head dimensions multiples of 16, no attention modifications). With K and V of
    /// [`crate::E4m3`], Q may be [`crate::E4m3`] too ([`QueryElement`]): FP8 attention on
    /// sm_90a's `wgmma`, dequantized by [`crate::AttentionParamsBuilder::q_descale`] as well
    /// (contiguous or variable-length K/V, no modifications, unsplit).
    ///
    /// `q`, `k`, `v` and `out` hold the tensors the call's [`crate::Layout`] describes: `[batch,
    /// seqlen, heads, head_dim]` with the strides of `params` (contiguous by default), packed
    /// `[total, heads, head_dim]` rows for a variable-length call, whole `[num_pages,
    /// page_size, heads_kv, head_dim]` caches for a paged one; the layout's index arrays are
    /// borrowed in `params` itself. `lse`, if given, receives the f32 log-sum-exp of each (batch,
    /// head, query row), `-inf` for rows that see no key (whose output is 0). A call with zero
    /// batch, heads or query rows does nothing and returns `Ok`.
    ///
    /// `stream` must belong to this GPU's context (the device's primary context), which is made
    /// current on the calling thread where it is not.
    ///
    /// Returns the first validation error without launching anything. `Ok` means the kernel was
    /// queued: errors while it runs surface at the next synchronisation.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_forward<T, C, E, S, Q, K, V, O>(
        &self,
        stream: &S,
        params: &AttentionParams,
        q: &Q,
        k: &K,
        v: &V,
        out: &mut O,
        lse: Option<&mut dyn DeviceWrite<f32, S>>,
    ) -> Result<()>
    where
        T: Element,
        C: KvElement<T>,
        E: QueryElement<T, C>,
        S: LaunchStream + ?Sized,
        Q: DeviceRead<E, S> + ?Sized,
        K: DeviceRead<C, S> + ?Sized,
        V: DeviceRead<C, S> + ?Sized,
        O: DeviceWrite<T, S> + ?Sized,
    {
        // SAFETY: the shipped kernels.
        unsafe { self.forward_typed::<T, C, E, S, Q, K, V, O>(None, stream, params, q, k, v, out, lse) }
    }

    /// [`Gpu::attention_forward`] on the caller's own kernels ([`crate::custom`]), for a call
    /// whose modification reads the data of [`crate::AttentionParamsBuilder::user_data`].
    /// Validated and planned as any call with modifications; a call that does not force a
    /// kernel path runs on `mma.sync` where `kernels` has no Hopper entry.
    ///
    /// Errors: those of [`Gpu::attention_forward`]; [`crate::Error::CustomKernels`] where `kernels`
    /// has no entry for the planned kernel (naming it).
    ///
    /// # Safety
    /// `kernels` were built from the device crate's entry macros, and their modifications
    /// read nothing past the user data's capacity: this library cannot check what the
    /// caller's device code reads.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn attention_forward_custom<T, S, Q, K, V, O>(
        &self,
        kernels: &CustomKernels,
        stream: &S,
        params: &AttentionParams,
        q: &Q,
        k: &K,
        v: &V,
        out: &mut O,
        lse: Option<&mut dyn DeviceWrite<f32, S>>,
    ) -> Result<()>
    where
        T: Element,
        S: LaunchStream + ?Sized,
        Q: DeviceRead<T, S> + ?Sized,
        K: DeviceRead<T, S> + ?Sized,
        V: DeviceRead<T, S> + ?Sized,
        O: DeviceWrite<T, S> + ?Sized,
    {
        let mma = (!kernels.has_hopper() && params.kernel == KernelChoice::Auto).then(|| params.to_builder().path(KernelPath::MmaSync).build()).transpose()?;
        // SAFETY: per this function's contract.
        unsafe { self.forward_typed::<T, T, T, S, Q, K, V, O>(Some(kernels), stream, mma.as_ref().unwrap_or(params), q, k, v, out, lse) }
    }

    /// The typed entry points' body: borrow the buffers for `stream`, plan, launch on the
    /// shipped kernels or on `custom`.
    ///
    /// # Safety
    /// As for [`Gpu::attention_forward_custom`] where `custom` is given.
    #[allow(clippy::too_many_arguments)]
    unsafe fn forward_typed<T, C, E, S, Q, K, V, O>(
        &self,
        custom: Option<&CustomKernels>,
        stream: &S,
        params: &AttentionParams,
        q: &Q,
        k: &K,
        v: &V,
        out: &mut O,
        lse: Option<&mut dyn DeviceWrite<f32, S>>,
    ) -> Result<()>
    where
        T: Element,
        C: KvElement<T>,
        E: QueryElement<T, C>,
        S: LaunchStream + ?Sized,
        Q: DeviceRead<E, S> + ?Sized,
        K: DeviceRead<C, S> + ?Sized,
        V: DeviceRead<C, S> + ?Sized,
        O: DeviceWrite<T, S> + ?Sized,
    {
        let mut guards = self.enter_typed_call(stream, params)?;
        let mut bufs = Buffers::new(T::DTYPE, q.read(stream, &mut guards), k.read(stream, &mut guards), v.read(stream, &mut guards), out.write(stream, &mut guards));
        bufs.kv = C::FP8;
        bufs.query_fp8 = E::FP8;
        bufs.lse = lse.map(|l| l.write(stream, &mut guards));
        let plan = self.plan_forward(params, &bufs)?;
        // SAFETY: the plan checked every address the kernel forms against these borrowed
        // buffers and the index arrays `params` borrows; the stream is this context's; the
        // caller vouches for custom kernels.
        let launched = unsafe { self.launch_on(stream.raw(), &plan, custom) };
        drop(guards);
        launched
    }

    /// Launches forward attention on a raw `CUstream`, with the tensors given as device
    /// addresses and capacities: the entry point for projects whose buffers and streams come
    /// from another CUDA crate (cudarc, candle, a runtime-API library).
    ///
    /// It is [`Gpu::attention_forward`] without typed buffers: `bufs` holds each tensor's
    /// device address and capacity **in elements** (of [`Buffers::dtype`] for Q, K, V and the
    /// output, of `f32` for the log-sum-exp), and the same validation runs before anything is
    /// launched. `stream` is any crate's `CUstream` handle cast to a pointer (for
    /// example `cudarc_stream.cu_stream() as *mut c_void`); null means the context's legacy
    /// default stream.
    ///
    /// First, this GPU's context is made current on the calling thread if it is not
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
        // Current before planning too: planning asks the driver about the kernels' occupancy.
        self.make_current()?;
        let plan = self.plan_forward(params, bufs)?;
        if plan.is_empty() {
            return Ok(());
        }
        self.check_stream(stream)?;
        // SAFETY: the plan checked every address against the capacities, which the caller
        // vouches for, as for the stream and the buffers' lifetimes.
        unsafe { self.launch(stream, &plan) }
    }
}
