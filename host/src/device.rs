//! The GPU: its primary context, the kernel image loaded for its architecture, and the kernels
//! looked up in it. Backend-neutral: [`Gpu::new`] (cust) and `Gpu::from_cudarc` (cudarc) differ
//! only in how they reach the driver (the `cuGetProcAddress` they resolve its functions with).
use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_void};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use flashrs_abi::Kernel;

use crate::driver::{CuDevice, Driver, Handle, consts};
use crate::error::{Error, Result};
use crate::kernels::Image;
use crate::target::{Arch, Target};
use crate::workspace::Workspaces;

/// One GPU: its primary context, retained, and its kernels loaded.
///
/// The context is the device's **primary context**, the one the CUDA runtime, cust, cudarc and
/// candle use for that device, so their memory and streams work here as they are and dropping
/// the `Gpu` destroys nothing others hold. Opening a `Gpu` makes that context current on the
/// calling thread; every entry point makes it current again where it is not.
///
/// Opening loads one kernel image, the best the GPU runs ([`Image::for_gpu`]): machine code
/// for sm_80, sm_86, sm_89 and sm_90a, PTX elsewhere. [`Gpu::startup`] says how long opening
/// took and [`Gpu::image`] which image it loaded.
///
/// Dropping a `Gpu` waits for the work queued in its context (`cuCtxSynchronize`), then frees
/// the workspaces it kept per stream ([`crate::workspace`]), its module and its hold on the
/// context.
pub struct Gpu {
    pub(crate) driver: &'static Driver,
    target: Target,
    image: &'static Image,
    startup: Duration,
    /// CTAs per SM of kernels asked about so far ([`Gpu::resident_ctas`]).
    occupancy: Mutex<HashMap<Kernel, u32>>,
    /// Kernels looked up so far ([`Gpu::kernel_function`]).
    functions: Functions,
    // Drop order: the workspaces' pool and the module go before the context.
    /// Launch workspaces: the kept per-stream ones and the pool of per-launch ones.
    pub(crate) workspaces: Workspaces,
    module: LoadedModule,
    context: PrimaryContext,
}

impl Gpu {
    /// Opens GPU `ordinal` through `driver`: initialises the driver, retains the device's
    /// primary context, makes it current and loads the best image of the kernels it runs.
    pub(crate) fn open(driver: &'static Driver, ordinal: u32) -> Result<Gpu> {
        let start = Instant::now();
        let d = driver;
        // SAFETY: plain driver calls with valid out-pointers.
        unsafe {
            d.check("cuInit", (d.init)(0)).map_err(|e| Error::NoGpu(format!("driver init: {e}")))?;
            let mut count = 0;
            d.check("cuDeviceGetCount", (d.device_get_count)(&mut count)).map_err(|e| Error::NoGpu(e.to_string()))?;
            if ordinal >= count.max(0) as u32 {
                return Err(Error::NoGpu(format!("GPU {ordinal} requested, {count} present")));
            }
            let mut device: CuDevice = 0;
            d.check("cuDeviceGet", (d.device_get)(&mut device, ordinal as i32))?;
            let attribute = |attr| -> Result<u32> {
                let mut v = 0;
                d.check("cuDeviceGetAttribute", (d.device_get_attribute)(&mut v, attr, device))?;
                Ok(v.max(0) as u32)
            };
            let cc = (attribute(consts::DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?, attribute(consts::DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?);
            if cc.0 < 8 {
                return Err(Error::UnsupportedGpu { major: cc.0 as i32, minor: cc.1 as i32 });
            }
            let target = Target {
                arch: Arch::for_compute_capability(cc.0, cc.1),
                compute_capability: cc,
                sm_count: attribute(consts::DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
                max_smem_per_block: attribute(consts::DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?,
                smem_per_sm: attribute(consts::DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)?,
            };
            let context = PrimaryContext::retain(d, device)?;
            d.check("cuCtxSetCurrent", (d.ctx_set_current)(context.handle as Handle))?;
            let (module, image) = LoadedModule::load_for(d, cc)?;
            let upload = module.function(c"upload_i32")?;
            let workspaces = Workspaces::new(d, ordinal, upload);
            Ok(Gpu {
                driver,
                target,
                image,
                startup: start.elapsed(),
                occupancy: Mutex::new(HashMap::new()),
                functions: Functions::default(),
                workspaces,
                module,
                context,
            })
        }
    }

    /// Makes this GPU's context current on the calling thread, if it is not already.
    pub fn make_current(&self) -> Result<()> {
        let d = self.driver;
        let mut current: Handle = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; the context lives as long as `self`.
        unsafe {
            d.check("cuCtxGetCurrent", (d.ctx_get_current)(&mut current))?;
            if current != self.raw_context() {
                d.check("cuCtxSetCurrent", (d.ctx_set_current)(self.raw_context()))?;
            }
        }
        Ok(())
    }

    /// The raw `CUcontext` of this GPU: the device's primary context.
    pub fn raw_context(&self) -> *mut c_void {
        self.context.handle as Handle
    }

    /// The raw `CUfunction` of entry point `name` in the loaded module, for launching kernels
    /// outside the attention interface (the probes, a timing spin); attention kernels go through
    /// [`Gpu::launch`].
    pub fn raw_function(&self, name: &str) -> Result<*mut c_void> {
        let name = CString::new(name).map_err(|_| Error::Kernels(format!("{name:?} is not a kernel name")))?;
        self.module.function(&name)
    }

    /// The image this GPU loaded.
    pub fn image(&self) -> &'static Image {
        self.image
    }

    /// How long opening took: driver initialisation, context, loading the module (a cold start
    /// in a fresh process).
    pub fn startup(&self) -> Duration {
        self.startup
    }

    /// The module this GPU runs.
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

    /// Largest dynamic shared memory a block may opt in to, in bytes.
    pub fn max_shared_memory_per_block(&self) -> u32 {
        self.target.max_smem_per_block
    }

    /// The device's name.
    pub fn name(&self) -> Result<String> {
        let mut buf: [c_char; 256] = [0; 256];
        let d = self.driver;
        // SAFETY: a 256-byte buffer, as passed; the driver NUL-terminates it.
        unsafe { d.check("cuDeviceGetName", (d.device_get_name)(buf.as_mut_ptr(), 256, self.context.device))? };
        // SAFETY: NUL-terminated by the driver.
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
    }

    /// CTAs of `kernel` that one SM holds at once, from the driver's occupancy calculator
    /// (registers, shared memory, threads); cached per kernel, so a plan asks the driver once.
    pub fn resident_ctas(&self, kernel: Kernel) -> Result<u32> {
        if let Some(&n) = self.occupancy.lock().map_err(|_| Error::LaunchLimit("occupancy cache poisoned".into()))?.get(&kernel) {
            return Ok(n);
        }
        let (threads, smem) = (kernel.threads() as i32, kernel.smem_bytes() as u32);
        let func = self.kernel_function(kernel, smem)?;
        let mut n = 0;
        let d = self.driver;
        // SAFETY: a valid out-pointer and function.
        d.check("cuOccupancyMaxActiveBlocksPerMultiprocessor", unsafe { (d.occupancy_max_active_blocks)(&mut n, func, threads, smem as usize) })?;
        let n = n.max(0) as u32;
        if let Ok(mut cache) = self.occupancy.lock() {
            cache.insert(kernel, n);
        }
        Ok(n)
    }

    /// `kernel` in this GPU's module, opted in to at least `smem` bytes of dynamic shared
    /// memory. Cached: a decode call is a few microseconds of GPU time, and looking the kernel
    /// up by name and setting its attribute on every launch cost a noticeable part of that.
    pub(crate) fn kernel_function(&self, kernel: Kernel, smem: u32) -> Result<Handle> {
        self.functions.get(self.driver, kernel, smem, || self.raw_function(&kernel.to_string()))
    }

    /// Checks that `stream` (null: the legacy default stream) belongs to this GPU's context.
    pub(crate) fn check_stream(&self, stream: *mut c_void) -> Result<()> {
        let d = self.driver;
        let mut ctx: Handle = std::ptr::null_mut();
        // SAFETY: a stream handle from a live stream object of the caller's crate; valid out-pointer.
        d.check("cuStreamGetCtx", unsafe { (d.stream_get_ctx)(stream, &mut ctx) })?;
        if ctx != self.raw_context() {
            return Err(Error::WrongContext("the stream belongs to another CUDA context than this GPU's primary context".into()));
        }
        Ok(())
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
        let d = self.driver;
        // SAFETY: this GPU's context is current.
        d.check("cuCtxSynchronize", unsafe { (d.ctx_synchronize)() })?;
        // SAFETY: synchronised: no launch still uses them.
        unsafe { self.workspaces.release() };
        Ok(())
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // Launches still queued may use the kept workspaces: wait for the context first. The
        // pool, the module and the context then go as the fields drop, in that order.
        if self.make_current().is_ok() {
            // SAFETY: this GPU's context is current; after the synchronisation nothing uses them.
            unsafe {
                (self.driver.ctx_synchronize)();
                self.workspaces.release();
            }
        }
    }
}

/// A retained primary context, released on drop.
struct PrimaryContext {
    driver: &'static Driver,
    device: CuDevice,
    /// The `CUcontext`, as an address (keeps `Gpu` `Send` and `Sync`).
    handle: usize,
}

impl PrimaryContext {
    fn retain(d: &'static Driver, device: CuDevice) -> Result<PrimaryContext> {
        let mut ctx: Handle = std::ptr::null_mut();
        // SAFETY: a valid device and out-pointer.
        d.check("cuDevicePrimaryCtxRetain", unsafe { (d.primary_ctx_retain)(&mut ctx, device) })?;
        Ok(PrimaryContext { driver: d, device, handle: ctx as usize })
    }
}

impl Drop for PrimaryContext {
    fn drop(&mut self) {
        // SAFETY: retained in `retain`; released once.
        unsafe { (self.driver.primary_ctx_release)(self.device) };
    }
}

/// A loaded module, unloaded on drop in the context it was loaded in (made current for that,
/// the thread's current context restored after).
pub(crate) struct LoadedModule {
    driver: &'static Driver,
    handle: usize,
    /// The context current at load, as an address.
    context: usize,
}

impl LoadedModule {
    /// Loads the first image for compute capability `cc` that the driver accepts
    /// ([`Image::for_gpu`]); the context is current.
    fn load_for(d: &'static Driver, cc: (u32, u32)) -> Result<(LoadedModule, &'static Image)> {
        let mut refused = Vec::new();
        for image in Image::for_gpu(cc) {
            match LoadedModule::load(d, &image.bytes()?) {
                Ok(module) => return Ok((module, image)),
                Err(e) => refused.push(format!("{}: {e}", image.name)),
            }
        }
        Err(Error::Kernels(format!("no shipped image loads on compute capability {}.{}: {}", cc.0, cc.1, refused.join("; "))))
    }

    /// Loads an image into the current context: a complete cubin, or PTX text ending in a NUL.
    pub(crate) fn load(d: &'static Driver, image: &[u8]) -> Result<LoadedModule> {
        let (mut module, mut context): (Handle, Handle) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: a valid out-pointer.
        d.check("cuCtxGetCurrent", unsafe { (d.ctx_get_current)(&mut context) })?;
        // SAFETY: a complete cubin or NUL-terminated PTX image (the driver reads to its own
        // end), a valid out-pointer.
        d.check("cuModuleLoadData", unsafe { (d.module_load_data)(&mut module, image.as_ptr() as *const c_void) })?;
        Ok(LoadedModule { driver: d, handle: module as usize, context: context as usize })
    }

    pub(crate) fn function(&self, name: &CStr) -> Result<Handle> {
        let mut f: Handle = std::ptr::null_mut();
        let d = self.driver;
        // SAFETY: a loaded module, a NUL-terminated name, a valid out-pointer.
        d.check("cuModuleGetFunction", unsafe { (d.module_get_function)(&mut f, self.handle as Handle, name.as_ptr()) })?;
        Ok(f)
    }
}

impl Drop for LoadedModule {
    fn drop(&mut self) {
        let (d, ours) = (self.driver, self.context as Handle);
        let mut current: Handle = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; the module was loaded in `ours` (whose owner, a `Gpu`,
        // outlives it), unloaded once, and the thread's context is put back.
        unsafe {
            (d.ctx_get_current)(&mut current);
            if current != ours {
                (d.ctx_set_current)(ours);
            }
            (d.module_unload)(self.handle as Handle);
            if current != ours {
                (d.ctx_set_current)(current);
            }
        }
    }
}

/// Kernel functions looked up so far, by kernel: the handle (as an address, which keeps its
/// owner `Send` and `Sync`) and the dynamic shared memory it has been opted in to.
#[derive(Default)]
pub(crate) struct Functions(Mutex<HashMap<Kernel, (usize, u32)>>);

impl Functions {
    /// `kernel`'s function, looked up with `find` the first time, opted in to at least `smem`
    /// bytes of dynamic shared memory.
    pub(crate) fn get(&self, d: &Driver, kernel: Kernel, smem: u32, find: impl FnOnce() -> Result<Handle>) -> Result<Handle> {
        let poisoned = |_| Error::LaunchLimit("kernel cache poisoned".into());
        let mut cache = self.0.lock().map_err(poisoned)?;
        let (func, opted) = match cache.get(&kernel) {
            Some(&(f, opted)) if smem <= opted => return Ok(f as Handle),
            Some(&(f, opted)) => (f as Handle, opted),
            None => (find()?, 0),
        };
        let attr = consts::FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
        // SAFETY: `func` is a function of a loaded module.
        d.check("cuFuncSetAttribute", unsafe { (d.func_set_attribute)(func, attr, smem as i32) })?;
        cache.insert(kernel, (func as usize, smem.max(opted)));
        Ok(func)
    }
}
