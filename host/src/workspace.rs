//! Launch workspaces: split-KV's arrival counters and partial results, persistent launches'
//! tile counters, variable-length calls' uploaded offsets.
//!
//! A launch that needs one wants counters that are zero when it starts and scratch bytes.
//! Allocating, zeroing and freeing them per call costs host time before the kernel can start,
//! which a decode call of a few tens of microseconds feels (about 2.5 us of a 57 us batch-1,
//! 32k-key call on an H100). So each stream keeps one workspace: launches on one stream are
//! ordered, so they can share it, and the kernels leave every counter at zero (the last split
//! of a query block resets its own), so it is ready for the next launch.
//!
//! Streams are told apart by `cuStreamGetId` (CUDA 12.0), which never reuses an ID, so a
//! stream destroyed with work in flight cannot hand its workspace to a new stream that got the
//! same handle. The kept workspaces are bounded ([`MAX_KEPT_STREAMS`] streams,
//! [`MAX_KEPT_BYTES`] in all): an application that makes a stream per request would otherwise
//! grow without bound, because the library cannot tell when a stream is gone. A stream that
//! does not get a kept workspace (past the bounds, where the driver lacks `cuStreamGetId`,
//! while the stream is being captured into a graph, whose replays could run on other streams at
//! the same time) takes a per-launch one: a stream-ordered allocation from the library's own
//! memory pool, freed with `cuMemFreeAsync` after the kernel. [`crate::Gpu::release_workspaces`]
//! frees the kept ones.
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

use flashrs_abi::upload::{UPLOAD_I32_MAX, UPLOAD_I32_THREADS, UploadI32};

use crate::driver::{CuDevicePtr, Driver, Handle, MemPoolProps, consts};
use crate::error::Result;

/// Most streams that keep a workspace.
pub const MAX_KEPT_STREAMS: usize = 16;

/// Most bytes the kept workspaces hold together. One stream keeps at most half of it: larger
/// split calls run long enough that a per-launch allocation does not matter, and keeping them
/// would pin their memory.
pub const MAX_KEPT_BYTES: usize = 64 << 20;

/// Device addresses of a launch's workspace.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WorkspaceAddrs {
    /// Where a host-offset plan's offsets were uploaded.
    pub offsets: Option<u64>,
    /// The u32 counters (zero at launch).
    pub counters: u64,
    /// The scratch bytes after them (past the offsets).
    pub partials: u64,
}

impl WorkspaceAddrs {
    /// A launch that needs no workspace.
    pub const NONE: WorkspaceAddrs = WorkspaceAddrs { offsets: None, counters: 0, partials: 0 };
}

/// Bytes `counters` u32 counters take at the front of a workspace (16-byte aligned scratch
/// follows).
pub fn counter_bytes(counters: usize) -> usize {
    (counters * 4).next_multiple_of(16)
}

/// A GPU's launch workspaces: the ones kept per stream, the library's pool the others come
/// from, and the kernel that stores uploaded offsets.
pub(crate) struct Workspaces {
    driver: &'static Driver,
    kept: StreamWorkspaces,
    pool: Option<WorkspacePool>,
    /// The module's `upload_i32`, as an address (which keeps the owner `Send` and `Sync`).
    upload: usize,
}

impl Workspaces {
    /// The workspaces of GPU `ordinal`, whose module's `upload_i32` kernel is `upload`.
    pub fn new(driver: &'static Driver, ordinal: u32, upload: Handle) -> Self {
        let pool = WorkspacePool::new(driver, ordinal as i32);
        Workspaces { driver, kept: StreamWorkspaces { driver, kept: Mutex::new(HashMap::new()) }, pool, upload: upload as usize }
    }

    /// The pool per-launch workspaces come from; `None` means the device's default pool.
    fn pool(&self) -> Option<Handle> {
        self.pool.as_ref().map(|p| p.handle as Handle)
    }

    /// Streams and bytes kept now.
    pub fn kept(&self) -> (usize, usize) {
        self.kept.kept()
    }

    /// Frees every kept workspace.
    ///
    /// # Safety
    /// The caller has synchronised the context (no launch still uses them) and made it current.
    pub unsafe fn release(&self) {
        // SAFETY: as for this function.
        unsafe { self.kept.release() }
    }

    /// Calls `launch` (which enqueues one kernel on `stream`) with a workspace holding
    /// `offsets` (stored at the front of the scratch, in stream order, by [`upload_i32`]),
    /// `counters` u32 counters that are zero when the kernel starts and that it leaves at zero,
    /// and `partial_bytes` bytes of scratch: the stream's kept workspace where it can have one,
    /// otherwise one stream-ordered allocation from the library's pool, its counters zeroed
    /// before the launch and freed after it.
    ///
    /// # Safety
    /// `stream` is a valid stream of the GPU's context, which is current.
    pub unsafe fn with(
        &self,
        stream: *mut c_void,
        offsets: &[i32],
        counters: usize,
        partial_bytes: usize,
        launch: impl Fn(WorkspaceAddrs) -> Result<()>,
    ) -> Result<()> {
        let d = self.driver;
        // The scratch: offsets (4-byte items padded to 16 bytes), then the partials.
        let off_bytes = (offsets.len() * 4).next_multiple_of(16);
        let with_offsets = |counters: u64, scratch: u64| -> Result<()> {
            let mut ws = WorkspaceAddrs { offsets: None, counters, partials: scratch + off_bytes as u64 };
            if !offsets.is_empty() {
                // In launch parameters, not a pageable copy (which would wait for the stream).
                // SAFETY: the scratch holds `off_bytes` bytes for them, ordered on `stream`.
                unsafe { upload_i32(d, self.upload as Handle, stream, scratch, offsets)? };
                ws.offsets = Some(scratch);
            }
            launch(ws)
        };
        // SAFETY: as for this function; `with_offsets` enqueues on `stream` only.
        if let Some(launched) = unsafe { self.kept.with(stream, self.pool(), counters, off_bytes + partial_bytes, with_offsets) } {
            return launched;
        }
        // One allocation: the counters, then the scratch.
        let counter_bytes = counter_bytes(counters);
        let bytes = counter_bytes + off_bytes + partial_bytes;
        // SAFETY: `stream` is valid per this function's contract.
        let base = unsafe { alloc_async(d, stream, self.pool(), bytes.max(16))? };
        let run = || -> Result<()> {
            if counters > 0 {
                // SAFETY: the counters lie in the allocation just made, ordered on `stream`.
                d.check("cuMemsetD32Async", unsafe { (d.memset_d32_async)(base, 0, counters, stream) })?;
            }
            with_offsets(base, base + counter_bytes as u64)
        };
        let result = run();
        // SAFETY: `base` came from a stream-ordered allocation; freed after the kernel in order.
        let freed = d.check("cuMemFreeAsync", unsafe { (d.mem_free_async)(base, stream) });
        result.and(freed)
    }
}

/// Stores `vals` at device address `dst` on `stream` through `upload_i32` launches (`func`),
/// the values in the launches' parameters: unlike a copy from pageable host memory, this
/// neither waits for the stream's queued work nor breaks a graph capture, and `vals` may go as
/// soon as it returns.
///
/// # Safety
/// `stream` is a valid stream of the current context, `func` its module's `upload_i32`, and
/// `dst` has room for `vals.len()` i32 values.
pub(crate) unsafe fn upload_i32(d: &Driver, func: Handle, stream: *mut c_void, dst: CuDevicePtr, vals: &[i32]) -> Result<()> {
    for (i, chunk) in vals.chunks(UPLOAD_I32_MAX).enumerate() {
        let mut p = UploadI32 { dst: dst + (i * UPLOAD_I32_MAX * 4) as u64, len: chunk.len() as u32, vals: [0; UPLOAD_I32_MAX] };
        p.vals[..chunk.len()].copy_from_slice(chunk);
        let mut args = [&mut p as *mut UploadI32 as *mut c_void];
        // SAFETY: one by-value `UploadI32` argument, as the kernel takes; the rest per the caller.
        let r = unsafe { (d.launch_kernel)(func, 1, 1, 1, UPLOAD_I32_THREADS, 1, 1, 0, stream, args.as_mut_ptr(), std::ptr::null_mut()) };
        d.check("cuLaunchKernel", r)?;
    }
    Ok(())
}

/// One stream's workspace: `counters` u32 arrival counters (zero between launches) from `ptr`,
/// then `partials` bytes.
struct Workspace {
    ptr: CuDevicePtr,
    counters: usize,
    partials: usize,
}

impl Workspace {
    fn bytes(&self) -> usize {
        counter_bytes(self.counters) + self.partials
    }
}

/// Whether a stream may keep a workspace of `bytes` (replacing one of `old` bytes, if it keeps
/// one) while `kept` streams keep `total` bytes.
fn admits(kept: usize, total: usize, old: Option<usize>, bytes: usize) -> bool {
    let streams = kept + usize::from(old.is_none());
    streams <= MAX_KEPT_STREAMS && total - old.unwrap_or(0) + bytes <= MAX_KEPT_BYTES
}

/// The workspaces of one context's streams (none where the driver lacks `cuStreamGetId`).
struct StreamWorkspaces {
    driver: &'static Driver,
    kept: Mutex<HashMap<u64, Workspace>>,
}

impl StreamWorkspaces {
    /// Streams and bytes kept now.
    fn kept(&self) -> (usize, usize) {
        self.kept.lock().map_or((0, 0), |k| (k.len(), k.values().map(Workspace::bytes).sum()))
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
        pool: Option<Handle>,
        counters: usize,
        partials: usize,
        launch: impl FnOnce(CuDevicePtr, CuDevicePtr) -> Result<R>,
    ) -> Option<Result<R>> {
        let d = self.driver;
        let get_id = d.stream_get_id?;
        // SAFETY: `stream` is valid per this function's contract.
        if partials > MAX_KEPT_BYTES / 2 || unsafe { capturing(d, stream) } {
            return None;
        }
        let mut id = 0u64;
        // SAFETY: `stream` is valid per this function's contract; `id` a valid out-pointer.
        if unsafe { get_id(stream, &mut id) } != 0 {
            return None;
        }
        let mut kept = self.kept.lock().ok()?;
        if !kept.get(&id).is_some_and(|w| w.counters >= counters && w.partials >= partials) {
            // Room for the largest call so far, rounded up, so that a growing series of calls
            // reallocates a few times only.
            let (c0, p0) = kept.get(&id).map_or((0, 0), |w| (w.counters, w.partials));
            let grown = Workspace { ptr: 0, counters: counters.max(c0).next_power_of_two(), partials: partials.max(p0).next_power_of_two() };
            let total = kept.values().map(Workspace::bytes).sum();
            if !admits(kept.len(), total, kept.get(&id).map(Workspace::bytes), grown.bytes()) {
                return None;
            }
            let old = kept.remove(&id);
            // SAFETY: as for this function; the old workspace is freed in stream order, after
            // the launches that used it.
            match unsafe { allocate(d, stream, pool, grown, old) } {
                Ok(w) => {
                    kept.insert(id, w);
                }
                Err(e) => return Some(Err(e)),
            }
        }
        let w = &kept[&id];
        Some(launch(w.ptr, w.ptr + counter_bytes(w.counters) as u64))
    }

    /// Frees every kept workspace.
    ///
    /// # Safety
    /// The caller has synchronised the context (no launch still uses them) and made it current.
    pub unsafe fn release(&self) {
        if let Ok(mut kept) = self.kept.lock() {
            for (_, w) in kept.drain() {
                // SAFETY: allocated stream-ordered by `allocate`, no longer in use.
                unsafe { (self.driver.mem_free_async)(w.ptr, std::ptr::null_mut()) };
            }
        }
    }
}

/// True while `stream` is capturing into a graph (or the query fails: then nothing is kept).
unsafe fn capturing(d: &Driver, stream: *mut c_void) -> bool {
    let mut status = consts::STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: a valid stream per the caller, a valid out-pointer.
    let r = unsafe { (d.stream_is_capturing)(stream, &mut status) };
    r != 0 || status != consts::STREAM_CAPTURE_STATUS_NONE
}

/// A stream-ordered allocation of `bytes` on `stream`, from `pool` (else the device's default
/// pool): the per-launch workspaces and the kept ones.
///
/// # Safety
/// `stream` is a valid stream of the current context and `pool` (if any) a pool of its device.
unsafe fn alloc_async(d: &Driver, stream: *mut c_void, pool: Option<Handle>, bytes: usize) -> Result<CuDevicePtr> {
    let mut ptr: CuDevicePtr = 0;
    // SAFETY: a valid out-pointer; `stream` and `pool` valid per the caller.
    let r = unsafe {
        match pool {
            Some(pool) => (d.mem_alloc_from_pool_async)(&mut ptr, bytes, pool, stream),
            None => (d.mem_alloc_async)(&mut ptr, bytes, stream),
        }
    };
    d.check("cuMemAllocAsync", r)?;
    Ok(ptr)
}

/// Allocates `w` on `stream` with zeroed counters, freeing `old` (if any) after the launches
/// already queued there.
unsafe fn allocate(d: &Driver, stream: *mut c_void, pool: Option<Handle>, mut w: Workspace, old: Option<Workspace>) -> Result<Workspace> {
    if let Some(old) = old {
        // SAFETY: stream-ordered free of a workspace only this stream used.
        d.check("cuMemFreeAsync", unsafe { (d.mem_free_async)(old.ptr, stream) })?;
    }
    // SAFETY: `stream` and `pool` valid per the caller.
    w.ptr = unsafe { alloc_async(d, stream, pool, w.bytes())? };
    // SAFETY: the counters lie at the front of the allocation just made, ordered on `stream`.
    let r = unsafe { (d.memset_d32_async)(w.ptr, 0, w.counters, stream) };
    if let Err(e) = d.check("cuMemsetD32Async", r) {
        // SAFETY: as above; nothing uses it.
        unsafe { (d.mem_free_async)(w.ptr, stream) };
        return Err(e);
    }
    Ok(w)
}

/// The library's own stream-ordered memory pool for per-launch workspaces.
///
/// The device's default pool has a release threshold of 0: memory freed by one launch goes back
/// to the OS at the next synchronisation and the next launch maps it again, which costs more
/// than a decode kernel. This pool keeps what it has mapped (threshold: unlimited) without
/// changing the default pool other code in the process relies on.
struct WorkspacePool {
    driver: &'static Driver,
    /// The `CUmemoryPool`, as an address (keeps the owner `Send` and `Sync`).
    handle: usize,
}

impl WorkspacePool {
    /// A pool on device `ordinal`, or `None` where the driver has no memory pools.
    fn new(d: &'static Driver, ordinal: i32) -> Option<Self> {
        let props = MemPoolProps {
            alloc_type: consts::MEM_ALLOCATION_TYPE_PINNED,
            handle_types: 0,
            location_type: consts::MEM_LOCATION_TYPE_DEVICE,
            location_id: ordinal,
            win32_security_attributes: std::ptr::null_mut(),
            reserved: [0; 64],
        };
        let mut pool: Handle = std::ptr::null_mut();
        // SAFETY: valid properties and out-pointer.
        if unsafe { (d.mem_pool_create)(&mut pool, &props) } != 0 {
            return None;
        }
        let pool = WorkspacePool { driver: d, handle: pool as usize };
        let mut keep_all = u64::MAX;
        // SAFETY: the attribute takes a u64, passed by pointer.
        let r = unsafe { (d.mem_pool_set_attribute)(pool.handle as Handle, consts::MEMPOOL_ATTR_RELEASE_THRESHOLD, &mut keep_all as *mut u64 as *mut c_void) };
        (r == 0).then_some(pool)
    }
}

impl Drop for WorkspacePool {
    fn drop(&mut self) {
        // SAFETY: the pool came from cuMemPoolCreate; with allocations still pending the driver
        // releases it once they are freed.
        unsafe { (self.driver.mem_pool_destroy)(self.handle as Handle) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_workspaces_are_bounded_in_streams_and_bytes() {
        // A new stream while fewer than the most are kept, within the bytes.
        assert!(admits(0, 0, None, 1 << 20));
        assert!(admits(MAX_KEPT_STREAMS - 1, 0, None, 16));
        assert!(!admits(MAX_KEPT_STREAMS, 0, None, 16));
        // A kept stream grows within the bytes, counting its old workspace as freed.
        assert!(admits(MAX_KEPT_STREAMS, MAX_KEPT_BYTES, Some(MAX_KEPT_BYTES / 2), MAX_KEPT_BYTES / 2));
        assert!(admits(2, MAX_KEPT_BYTES - 16, Some(16), 32));
        assert!(!admits(2, MAX_KEPT_BYTES - 16, Some(16), 48));
        assert!(!admits(1, MAX_KEPT_BYTES / 2, None, MAX_KEPT_BYTES / 2 + 16));
    }
}
