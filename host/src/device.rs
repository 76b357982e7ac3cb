//! The GPU: driver initialisation, context, the kernel module for its architecture, and the
//! kernels looked up in it.
use cust::context::{Context, CurrentContext};
use cust::device::{Device, DeviceAttribute};
use cust::module::Module;

use std::collections::HashMap;
use std::sync::Mutex;

use flashrs_abi::Kernel;

use crate::error::{Error, Result, check_driver};
use crate::ptx;
use crate::target::{Arch, Target};
use crate::workspace::Workspaces;

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
    target: Target,
    /// CTAs per SM of kernels asked about so far ([`Gpu::resident_ctas`]).
    occupancy: Mutex<HashMap<Kernel, u32>>,
    /// Kernels looked up so far ([`Gpu::kernel_function`]): the handle (as an address, which
    /// keeps `Gpu` `Send` and `Sync`) and the dynamic shared memory it has been opted in to.
    functions: Mutex<HashMap<Kernel, (usize, u32)>>,
    /// Launch workspaces: the kept per-stream ones and the pool of per-launch ones.
    pub(crate) workspaces: Workspaces,
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
        use cust::sys::CUdevice_attribute::*;
        let target = Target {
            arch: Arch::for_compute_capability(major as u32, minor as u32),
            compute_capability: (major as u32, minor as u32),
            sm_count,
            max_smem_per_block: attribute(device, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?,
            smem_per_sm: attribute(device, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)?,
        };
        let context = Context::new(device)?;
        let src = match target.arch {
            Arch::Sm80 => ptx::PTX_SM80,
            Arch::Sm90a => ptx::PTX_SM90A,
        };
        let module = Module::from_ptx(src, &[])?;
        let (occupancy, functions) = (Mutex::new(HashMap::new()), Mutex::new(HashMap::new()));
        let workspaces = Workspaces::new(ordinal, module.get_function("upload_i32")?.to_raw());
        Ok(Gpu {
            module,
            device,
            target,
            occupancy,
            functions,
            workspaces,
            _context: context,
        })
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
        self.target.arch
    }

    /// Compute capability (major, minor).
    pub fn compute_capability(&self) -> (i32, i32) {
        let (major, minor) = self.target.compute_capability;
        (major as i32, minor as i32)
    }

    /// Number of streaming multiprocessors.
    pub fn sm_count(&self) -> u32 {
        self.target.sm_count
    }

    /// This GPU as kernel selection sees it (its limits read from the driver).
    pub fn target(&self) -> Target {
        self.target
    }

    /// CTAs of `kernel` that one SM holds at once, from the driver's occupancy calculator
    /// (registers, shared memory, threads); cached per kernel, so a plan asks the driver once.
    pub fn resident_ctas(&self, kernel: Kernel) -> Result<u32> {
        if let Some(&n) = self.occupancy.lock().map_err(|_| Error::LaunchLimit("occupancy cache poisoned".into()))?.get(&kernel) {
            return Ok(n);
        }
        let (threads, smem) = (kernel.threads() as i32, kernel.smem_bytes() as u32);
        let func = self.kernel_function(kernel, smem)?;
        let mut n = 0i32;
        // SAFETY: a valid out-pointer and function.
        let r = unsafe { cust::sys::cuOccupancyMaxActiveBlocksPerMultiprocessor(&mut n, func, threads, smem as usize) };
        check_driver("cuOccupancyMaxActiveBlocksPerMultiprocessor", r)?;
        let n = n.max(0) as u32;
        if let Ok(mut cache) = self.occupancy.lock() {
            cache.insert(kernel, n);
        }
        Ok(n)
    }

    /// `kernel` in this GPU's module, opted in to at least `smem` bytes of dynamic shared
    /// memory. Cached: a decode call is a few microseconds of GPU time, and looking the kernel
    /// up by name and setting its attribute on every launch cost a noticeable part of that.
    pub(crate) fn kernel_function(&self, kernel: Kernel, smem: u32) -> Result<cust::sys::CUfunction> {
        let poisoned = |_| Error::LaunchLimit("kernel cache poisoned".into());
        let mut cache = self.functions.lock().map_err(poisoned)?;
        let (func, opted) = match cache.get(&kernel) {
            Some(&(f, opted)) if smem <= opted => return Ok(f as cust::sys::CUfunction),
            Some(&(f, opted)) => (f as cust::sys::CUfunction, opted),
            None => (self.module.get_function(kernel.to_string())?.to_raw(), 0),
        };
        use cust::sys::{CUfunction_attribute, cuFuncSetAttribute};
        let attr = CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
        // SAFETY: `func` is a function of this GPU's loaded module.
        check_driver("cuFuncSetAttribute", unsafe { cuFuncSetAttribute(func, attr, smem as i32) })?;
        cache.insert(kernel, (func as usize, smem.max(opted)));
        Ok(func)
    }

    /// The per-stream workspaces kept now: (streams, bytes). At most
    /// [`crate::workspace::MAX_KEPT_STREAMS`] and [`crate::workspace::MAX_KEPT_BYTES`].
    pub fn kept_workspaces(&self) -> (usize, usize) {
        self.workspaces.kept()
    }

    /// Frees every kept per-stream workspace, after waiting for the work queued in this GPU's
    /// context (the next launch on a stream makes a new one).
    pub fn release_workspaces(&self) -> Result<()> {
        self.make_current()?;
        // SAFETY: this GPU's context is current.
        check_driver("cuCtxSynchronize", unsafe { cust::sys::cuCtxSynchronize() })?;
        // SAFETY: synchronised: no launch still uses them.
        unsafe { self.workspaces.release() };
        Ok(())
    }

    /// Largest dynamic shared memory a block may opt in to, in bytes.
    pub fn max_shared_memory_per_block(&self) -> u32 {
        self.target.max_smem_per_block
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

// cust 0.3 has no enum variant for these attributes; ask the driver directly.
fn attribute(device: Device, attr: cust::sys::CUdevice_attribute) -> Result<u32> {
    let mut v = 0i32;
    // SAFETY: `v` is a valid out-pointer and `device` a device handle from the driver.
    let r = unsafe { cust::sys::cuDeviceGetAttribute(&mut v, attr, device.as_raw()) };
    check_driver("cuDeviceGetAttribute", r)?;
    Ok(v.max(0) as u32)
}
