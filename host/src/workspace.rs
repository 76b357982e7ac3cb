//! Launch workspaces kept per stream: split-KV's counters and partials, persistent launches'
//! tile counters, variable-length calls' offsets.
//!
//! A split-KV launch needs arrival counters that are zero when it starts and room for its f32
//! partial results (a variable-length call, room for its offsets, which a small kernel stores
//! in stream order). Allocating, zeroing and freeing them per call costs host time before the
//! kernel can start, which a decode call of a few tens of microseconds feels (about 2.5 us of
//! a 57 us batch-1, 32k-key call on an H100). So each stream keeps one workspace: launches on
//! one stream are ordered, so they can share it, and the kernel leaves every counter at zero
//! (the last split of a query block resets its own), so it is ready for the next launch.
//!
//! Streams are told apart by `cuStreamGetId` (CUDA 12.0), which never reuses an ID, so a
//! stream destroyed with work in flight cannot hand its workspace to a new stream that got the
//! same handle. Where the driver lacks it, while a stream is being captured into a graph
//! (whose replays could run on other streams at the same time), and for partial results
//! larger than [`MAX_KEPT_BYTES`], launches take a per-call workspace instead.
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

use cust::sys::{CUdeviceptr, CUmemoryPool, CUresult, CUstream};

use crate::error::{Result, check_driver};

#[path = "../../kernels-gpu/src/upload.rs"]
mod upload;

/// Stores `vals` at device address `dst` on `stream` through `upload_i32` launches (`func`),
/// the values in the launches' parameters: unlike a copy from pageable host memory, this
/// neither waits for the stream's queued work nor breaks a graph capture, and `vals` may go as
/// soon as it returns.
///
/// # Safety
/// `stream` is a valid stream of the current context, `func` its module's `upload_i32`, and
/// `dst` has room for `vals.len()` i32 values.
pub(crate) unsafe fn upload_i32(func: cust::sys::CUfunction, stream: *mut c_void, dst: CUdeviceptr, vals: &[i32]) -> Result<()> {
    for (i, chunk) in vals.chunks(upload::UPLOAD_I32_MAX).enumerate() {
        let mut p = upload::UploadI32 { dst: dst + (i * upload::UPLOAD_I32_MAX * 4) as u64, len: chunk.len() as u32, vals: [0; upload::UPLOAD_I32_MAX] };
        p.vals[..chunk.len()].copy_from_slice(chunk);
        let mut args = [&mut p as *mut upload::UploadI32 as *mut c_void];
        // SAFETY: one by-value `UploadI32` argument, as the kernel takes; the rest per the caller.
        let r = unsafe { cust::sys::cuLaunchKernel(func, 1, 1, 1, 256, 1, 1, 0, stream as CUstream, args.as_mut_ptr(), std::ptr::null_mut()) };
        check_driver("cuLaunchKernel", r)?;
    }
    Ok(())
}

/// Largest workspace kept per stream: larger split calls run for long enough that a per-call
/// allocation does not matter, and keeping them would pin their memory.
pub const MAX_KEPT_BYTES: usize = 32 << 20;

/// `cuStreamGetId`'s signature.
type StreamGetId = unsafe extern "C" fn(CUstream, *mut u64) -> CUresult;

/// One stream's workspace: `counters` u32 arrival counters (zero between launches) from `ptr`,
/// then `partials` bytes.
struct Workspace {
    ptr: CUdeviceptr,
    counters: usize,
    partials: usize,
}

/// The workspaces of one context's streams.
pub(crate) struct StreamWorkspaces {
    get_id: Option<StreamGetId>,
    kept: Mutex<HashMap<u64, Workspace>>,
}

/// Bytes the counters take at the front of a workspace (16-byte aligned partials follow).
pub fn counter_bytes(counters: usize) -> usize {
    (counters * 4).next_multiple_of(16)
}

impl StreamWorkspaces {
    /// Looks up `cuStreamGetId` in the driver (absent before CUDA 12.0: nothing is kept then).
    pub fn new() -> Self {
        let mut f: *mut c_void = std::ptr::null_mut();
        // SAFETY: a NUL-terminated name and a valid out-pointer.
        let r = unsafe { cust::sys::cuGetProcAddress(c"cuStreamGetId".as_ptr(), &mut f, 12000, 0) };
        // SAFETY: the driver returned its `cuStreamGetId`, whose C signature `StreamGetId` is.
        let get_id = (r == CUresult::CUDA_SUCCESS && !f.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, StreamGetId>(f) });
        StreamWorkspaces { get_id, kept: Mutex::new(HashMap::new()) }
    }

    /// Calls `launch(counters, partials)` with the addresses of `stream`'s kept workspace,
    /// grown to at least `counters` zeroed u32 counters and `partials` bytes after them, and
    /// returns its result; `None`, having called nothing, where the stream cannot keep one (see
    /// the module docs). The lock is held through `launch`, so no other thread replaces the
    /// workspace between the lookup and the launch that uses it.
    ///
    /// # Safety
    /// `stream` is a valid stream of the current context, `pool` (if any) a memory pool of its
    /// device, and `launch` enqueues on `stream` only.
    pub unsafe fn with<R>(
        &self,
        stream: *mut c_void,
        pool: Option<CUmemoryPool>,
        counters: usize,
        partials: usize,
        launch: impl FnOnce(CUdeviceptr, CUdeviceptr) -> Result<R>,
    ) -> Option<Result<R>> {
        let get_id = self.get_id?;
        if partials > MAX_KEPT_BYTES || unsafe { capturing(stream) } {
            return None;
        }
        let mut id = 0u64;
        // SAFETY: `stream` is valid per this function's contract; `id` a valid out-pointer.
        if unsafe { get_id(stream as CUstream, &mut id) } != CUresult::CUDA_SUCCESS {
            return None;
        }
        let mut kept = self.kept.lock().ok()?;
        if !kept.get(&id).is_some_and(|w| w.counters >= counters && w.partials >= partials) {
            let old = kept.remove(&id);
            // Room for the largest call so far, rounded up, so that a growing series of calls
            // reallocates a few times only.
            let (c0, p0) = old.as_ref().map_or((0, 0), |w| (w.counters, w.partials));
            let grown = Workspace { ptr: 0, counters: counters.max(c0).next_power_of_two(), partials: partials.max(p0).next_power_of_two() };
            // SAFETY: as for this function; the old workspace is freed in stream order, after
            // the launches that used it.
            match unsafe { allocate(stream, pool, grown, old) } {
                Ok(w) => {
                    kept.insert(id, w);
                }
                Err(e) => return Some(Err(e)),
            }
        }
        let w = &kept[&id];
        Some(launch(w.ptr, w.ptr + counter_bytes(w.counters) as u64))
    }

    /// Frees every kept workspace. The caller has synchronised the context (no launch still
    /// uses them) and made it current.
    pub unsafe fn release(&self) {
        if let Ok(mut kept) = self.kept.lock() {
            for (_, w) in kept.drain() {
                // SAFETY: allocated stream-ordered by `allocate`, no longer in use.
                unsafe { cust::sys::cuMemFreeAsync(w.ptr, std::ptr::null_mut()) };
            }
        }
    }
}

/// True while `stream` is capturing into a graph (or the query fails: then nothing is kept).
unsafe fn capturing(stream: *mut c_void) -> bool {
    use cust::sys::{CUstreamCaptureStatus, cuStreamIsCapturing};
    let mut status = CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: a valid stream per the caller, a valid out-pointer.
    let r = unsafe { cuStreamIsCapturing(stream as CUstream, &mut status) };
    r != CUresult::CUDA_SUCCESS || status != CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
}

/// A stream-ordered allocation of `bytes` on `stream`, from `pool` (else the device's default
/// pool): the per-call workspaces and the kept ones.
///
/// # Safety
/// `stream` is a valid stream of the current context and `pool` (if any) a pool of its device.
pub(crate) unsafe fn alloc_async(stream: *mut c_void, pool: Option<CUmemoryPool>, bytes: usize) -> Result<CUdeviceptr> {
    use cust::sys::{cuMemAllocAsync, cuMemAllocFromPoolAsync};
    let mut ptr: CUdeviceptr = 0;
    // SAFETY: a valid out-pointer; `stream` and `pool` valid per the caller.
    let r = unsafe {
        match pool {
            Some(pool) => cuMemAllocFromPoolAsync(&mut ptr, bytes, pool, stream as CUstream),
            None => cuMemAllocAsync(&mut ptr, bytes, stream as CUstream),
        }
    };
    check_driver("cuMemAllocAsync", r)?;
    Ok(ptr)
}

/// Allocates `w` on `stream` with zeroed counters, freeing `old` (if any) after the launches
/// already queued there.
unsafe fn allocate(stream: *mut c_void, pool: Option<CUmemoryPool>, mut w: Workspace, old: Option<Workspace>) -> Result<Workspace> {
    use cust::sys::{cuMemFreeAsync, cuMemsetD32Async};
    let s = stream as CUstream;
    if let Some(old) = old {
        // SAFETY: stream-ordered free of a workspace only this stream used.
        check_driver("cuMemFreeAsync", unsafe { cuMemFreeAsync(old.ptr, s) })?;
    }
    // SAFETY: `stream` and `pool` valid per the caller.
    w.ptr = unsafe { alloc_async(stream, pool, counter_bytes(w.counters) + w.partials)? };
    // SAFETY: the counters lie at the front of the allocation just made, ordered on `stream`.
    let r = unsafe { cuMemsetD32Async(w.ptr, 0, w.counters, s) };
    if let Err(e) = check_driver("cuMemsetD32Async", r) {
        // SAFETY: as above; nothing uses it.
        unsafe { cuMemFreeAsync(w.ptr, s) };
        return Err(e);
    }
    Ok(w)
}
