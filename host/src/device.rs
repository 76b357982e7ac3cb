//! The GPU: driver initialisation, context, and the kernel modules for its architecture.
use cust::context::{Context, CurrentContext};
use cust::device::{Device, DeviceAttribute};
use cust::module::Module;

use std::collections::HashMap;
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::ptx;
use crate::workspace::StreamWorkspaces;

/// Which PTX module a GPU runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// Ampere and newer without Hopper's arch-specific features.
    Sm80,
    /// Hopper (compute capability 9.0): wgmma, TMA, setmaxnreg.
    Sm90a,
}

/// One GPU with a current context and its kernels loaded.
///
/// The context is made current on the creating thread; use the `Gpu` from that thread (or make
/// its context current with [`Gpu::make_current`]).
///
/// The context is the device's **primary context** (cust's `Context::new` retains it with
/// `cuDevicePrimaryCtxRetain` and releases it on drop), the same one the CUDA runtime,
/// cudarc and candle use for that device. So a `Gpu` opened with the same ordinal works
/// directly on their memory and streams, through [`Gpu::attention_forward_raw`], and
/// dropping the `Gpu` does not destroy a context that others still hold.
/// [`Gpu::raw_context`] gives the handle, to compare with another crate's.
///
/// Dropping a `Gpu` waits for the work queued in its context (`cuCtxSynchronize`), then frees
/// the split-KV workspaces it kept per stream ([`crate::workspace`]).
pub struct Gpu {
    // Field order matters: modules must unload before the context is destroyed.
    module: Module,
    device: Device,
    arch: Arch,
    cc: (i32, i32),
    sm_count: u32,
    max_smem_optin: u32,
    workspace_pool: Option<WorkspacePool>,
    /// CTAs per SM of kernels asked about so far ([`Gpu::resident_ctas`]).
    occupancy: Mutex<HashMap<String, u32>>,
    /// Kernels looked up so far ([`Gpu::kernel_function`]): the handle (as an address, which
    /// keeps `Gpu` `Send` and `Sync`) and the dynamic shared memory it has been opted in to.
    functions: Mutex<HashMap<String, (usize, u32)>>,
    /// Split-KV workspaces kept per stream.
    pub(crate) workspaces: StreamWorkspaces,
    _context: Context,
}

impl Gpu {
    /// Initialises the driver and opens GPU `ordinal`, loading the PTX for its architecture.
    ///
    /// Retains the device's primary context (shared with every other user of the device in
    /// this process) and makes it current on the calling thread.
    ///
    /// Returns [`Error::NoGpu`] without a driver or device and [`Error::UnsupportedGpu`] for
    /// GPUs older than sm_80.
    pub fn new(ordinal: u32) -> Result<Self> {
        cust::init(cust::CudaFlags::empty()).map_err(|e| Error::NoGpu(format!("driver init: {e}")))?;
        let count = Device::num_devices().map_err(|e| Error::NoGpu(e.to_string()))?;
        if ordinal >= count {
            return Err(Error::NoGpu(format!("GPU {ordinal} requested, {count} present")));
        }
        let device = Device::get_device(ordinal)?;
        let major = device.get_attribute(DeviceAttribute::ComputeCapabilityMajor)?;
        let minor = device.get_attribute(DeviceAttribute::ComputeCapabilityMinor)?;
        if major < 8 {
            return Err(Error::UnsupportedGpu { major, minor });
        }
        let sm_count = device.get_attribute(DeviceAttribute::MultiprocessorCount)? as u32;
        let max_smem_optin = smem_optin(device)?;
        let context = Context::new(device)?;
        // sm_90a code runs on compute capability 9.0 only; later GPUs JIT the portable module.
        let arch = if (major, minor) == (9, 0) { Arch::Sm90a } else { Arch::Sm80 };
        let src = match arch {
            Arch::Sm80 => ptx::PTX_SM80,
            Arch::Sm90a => ptx::PTX_SM90A,
        };
        let module = Module::from_ptx(src, &[])?;
        let workspace_pool = WorkspacePool::new(ordinal as i32);
        let (occupancy, functions) = (Mutex::new(HashMap::new()), Mutex::new(HashMap::new()));
        Ok(Gpu {
            module,
            device,
            arch,
            cc: (major, minor),
            sm_count,
            max_smem_optin,
            workspace_pool,
            occupancy,
            functions,
            workspaces: StreamWorkspaces::new(),
            _context: context,
        })
    }

    /// The pool per-launch workspaces (split-KV partials, variable-length offsets) come from,
    /// if this GPU supports memory pools; `None` means the device's default pool.
    pub(crate) fn workspace_pool(&self) -> Option<cust::sys::CUmemoryPool> {
        self.workspace_pool.as_ref().map(|p| p.0)
    }

    /// Makes this GPU's context current on the calling thread.
    pub fn make_current(&self) -> Result<()> {
        CurrentContext::set_current(&self._context)?;
        Ok(())
    }

    /// The raw `CUcontext` of this GPU: the device's primary context.
    pub fn raw_context(&self) -> cust::sys::CUcontext {
        self._context.as_raw()
    }

    /// The loaded module holding every kernel of [`Gpu::arch`].
    pub fn module(&self) -> &Module {
        &self.module
    }

    /// The PTX module this GPU runs.
    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// Compute capability (major, minor).
    pub fn compute_capability(&self) -> (i32, i32) {
        self.cc
    }

    /// Number of streaming multiprocessors.
    pub fn sm_count(&self) -> u32 {
        self.sm_count
    }

    /// CTAs of kernel `name` that one SM holds at once with `threads` threads and `smem` bytes
    /// of dynamic shared memory each, from the driver's occupancy calculator (registers,
    /// shared memory, threads); cached per kernel, so a plan asks the driver once.
    pub fn resident_ctas(&self, name: &str, threads: u32, smem: u32) -> Result<u32> {
        let key = format!("{name}/{threads}/{smem}");
        if let Some(&n) = self.occupancy.lock().map_err(|_| Error::LaunchLimit("occupancy cache poisoned".into()))?.get(&key) {
            return Ok(n);
        }
        let func = self.kernel_function(name, smem)?;
        let mut n = 0i32;
        // SAFETY: a valid out-pointer and function.
        let r = unsafe { cust::sys::cuOccupancyMaxActiveBlocksPerMultiprocessor(&mut n, func, threads as i32, smem as usize) };
        crate::error::check_driver("cuOccupancyMaxActiveBlocksPerMultiprocessor", r)?;
        let n = n.max(0) as u32;
        if let Ok(mut cache) = self.occupancy.lock() {
            cache.insert(key, n);
        }
        Ok(n)
    }

    /// Kernel `name` of this GPU's module, opted in to at least `smem` bytes of dynamic shared
    /// memory. Cached: a decode call is a few microseconds of GPU time, and looking the kernel
    /// up by name and setting its attribute on every launch cost a noticeable part of that.
    pub(crate) fn kernel_function(&self, name: &str, smem: u32) -> Result<cust::sys::CUfunction> {
        let poisoned = |_| Error::LaunchLimit("kernel cache poisoned".into());
        let mut cache = self.functions.lock().map_err(poisoned)?;
        let (func, opted) = match cache.get(name) {
            Some(&(f, opted)) if smem <= opted => return Ok(f as cust::sys::CUfunction),
            Some(&(f, opted)) => (f as cust::sys::CUfunction, opted),
            None => (self.module.get_function(name)?.to_raw(), 0),
        };
        use cust::sys::{CUfunction_attribute, cuFuncSetAttribute};
        let attr = CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
        // SAFETY: `func` is a function of this GPU's loaded module.
        crate::error::check_driver("cuFuncSetAttribute", unsafe { cuFuncSetAttribute(func, attr, smem as i32) })?;
        cache.insert(name.to_owned(), (func as usize, smem.max(opted)));
        Ok(func)
    }

    /// Largest dynamic shared memory a block may opt in to, in bytes.
    pub fn max_shared_memory_per_block(&self) -> u32 {
        self.max_smem_optin
    }

    /// The device's name.
    pub fn name(&self) -> Result<String> {
        Ok(self.device.name()?)
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // The kept split workspaces go before the pool they came from; launches still queued
        // may use them, so wait for the context first.
        if self.make_current().is_ok() {
            // SAFETY: this GPU's context is current; after the synchronisation nothing uses them.
            unsafe {
                cust::sys::cuCtxSynchronize();
                self.workspaces.release();
            }
        }
    }
}

// cust 0.3 has no enum variant for this attribute; ask the driver directly.
fn smem_optin(device: Device) -> Result<u32> {
    use cust::sys::{CUdevice_attribute, cuDeviceGetAttribute};
    let mut v = 0i32;
    let attr = CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN;
    // SAFETY: `v` is a valid out-pointer and `device` a device handle from the driver.
    let r = unsafe { cuDeviceGetAttribute(&mut v, attr, device.as_raw()) };
    crate::error::check_driver("cuDeviceGetAttribute", r)?;
    Ok(v as u32)
}

/// The library's own stream-ordered memory pool for per-launch workspaces.
///
/// The device's default pool has a release threshold of 0: memory freed by one launch goes back
/// to the OS at the next synchronisation and the next launch maps it again, which costs more
/// than a decode kernel. This pool keeps what it has mapped (threshold: unlimited) without
/// changing the default pool other code in the process relies on.
pub(crate) struct WorkspacePool(cust::sys::CUmemoryPool);

impl WorkspacePool {
    /// A pool on device `ordinal`, or `None` where the driver has no memory pools.
    fn new(ordinal: i32) -> Option<Self> {
        use cust::sys::*;
        let props = CUmemPoolProps {
            allocType: CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
            handleTypes: CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE,
            location: CUmemLocation { type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: ordinal },
            win32SecurityAttributes: std::ptr::null_mut(),
            reserved: [0; 64],
        };
        let mut pool: CUmemoryPool = std::ptr::null_mut();
        // SAFETY: valid properties and out-pointer.
        if unsafe { cuMemPoolCreate(&mut pool, &props) } != CUresult::CUDA_SUCCESS {
            return None;
        }
        let pool = WorkspacePool(pool);
        let mut keep_all = u64::MAX;
        let attr = CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD;
        // SAFETY: the attribute takes a u64, passed by pointer.
        let r = unsafe { cuMemPoolSetAttribute(pool.0, attr, &mut keep_all as *mut u64 as *mut std::ffi::c_void) };
        (r == CUresult::CUDA_SUCCESS).then_some(pool)
    }
}

impl Drop for WorkspacePool {
    fn drop(&mut self) {
        // SAFETY: the pool came from cuMemPoolCreate; with allocations still pending the driver
        // releases it once they are freed.
        unsafe { cust::sys::cuMemPoolDestroy(self.0) };
    }
}

// SAFETY: a pool handle is a driver object usable from any thread of its context.
unsafe impl Send for WorkspacePool {}
// SAFETY: as above; the library only passes the handle to the driver.
unsafe impl Sync for WorkspacePool {}
