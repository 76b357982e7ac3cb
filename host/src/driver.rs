//! The CUDA driver functions the library calls, as one table of function pointers.
//!
//! Every driver call of the library (context, module, launch, workspaces, tensor maps) goes
//! through [`Driver`], resolved once per process with `cuGetProcAddress` at the CUDA 12.0 ABI.
//! A backend only says how to reach `cuGetProcAddress`: cust's link-time libcuda, or the libcuda
//! cudarc loads at run time. So the launch path exists once, whichever crate the caller's
//! buffers come from, and the types here are the C ABI's, independent of either crate's
//! bindings (which differ between crates and between their CUDA versions).
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

use crate::error::{Error, Result};

/// `CUresult`: 0 is success. Read as a plain integer, so a code newer than any binding is
/// still a value.
pub(crate) type CuResult = c_int;
/// `CUdevice`.
pub(crate) type CuDevice = c_int;
/// `CUdeviceptr`.
pub(crate) type CuDevicePtr = u64;
/// `CUcontext`, `CUmodule`, `CUfunction`, `CUstream`, `CUmemoryPool`: opaque handles.
pub(crate) type Handle = *mut c_void;

/// `cuGetProcAddress` (CUDA 11.3): the one entry point a backend provides.
pub(crate) type GetProcAddress = unsafe extern "C" fn(symbol: *const c_char, pfn: *mut *mut c_void, cuda_version: c_int, flags: u64) -> CuResult;

/// `CUmemPoolProps` (88 bytes; later CUDA versions carve fields out of `reserved`, which stays
/// zero).
#[repr(C)]
pub(crate) struct MemPoolProps {
    pub alloc_type: c_int,
    pub handle_types: c_int,
    pub location_type: c_int,
    pub location_id: c_int,
    pub win32_security_attributes: *mut c_void,
    pub reserved: [u8; 64],
}

/// Driver enum values the library passes.
pub(crate) mod consts {
    use std::ffi::c_int;
    pub const DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: c_int = 16;
    pub const DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: c_int = 75;
    pub const DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: c_int = 76;
    pub const DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: c_int = 81;
    pub const DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: c_int = 97;
    pub const FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: c_int = 8;
    pub const MEMPOOL_ATTR_RELEASE_THRESHOLD: c_int = 4;
    pub const MEM_ALLOCATION_TYPE_PINNED: c_int = 1;
    pub const MEM_LOCATION_TYPE_DEVICE: c_int = 1;
    pub const STREAM_CAPTURE_STATUS_NONE: c_int = 0;
}

/// Declares the table: each field a driver function, resolved under the name given (without
/// version suffix: `cuGetProcAddress` picks the version of the ABI asked for).
macro_rules! driver_table {
    ($($field:ident = $name:literal: fn($($arg:ty),*);)*) => {
        /// The driver functions the library calls (see the module docs).
        pub(crate) struct Driver {
            $(pub $field: unsafe extern "C" fn($($arg),*) -> CuResult,)*
            /// `cuStreamGetId` (CUDA 12.0), absent from older drivers: streams then keep no
            /// workspace ([`crate::workspace`]).
            pub stream_get_id: Option<unsafe extern "C" fn(Handle, *mut u64) -> CuResult>,
        }

        impl Driver {
            /// Resolves every function through `get` (at the CUDA 12.0 ABI).
            ///
            /// # Safety
            /// `get` is the `cuGetProcAddress` of a CUDA driver library.
            unsafe fn resolve(get: GetProcAddress) -> Result<Driver> {
                // SAFETY: as for this function; the names are NUL-terminated.
                let find = |name: &CStr| unsafe { lookup(get, name) };
                Ok(Driver {
                    $(
                        // SAFETY: the driver's function of this name has this C signature at
                        // the CUDA 12.0 ABI.
                        $field: unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) -> CuResult>(
                            find($name).ok_or(Error::NoGpu(format!("the CUDA driver lacks {} (CUDA 12.0 or newer needed)", $name.to_string_lossy())))?,
                        ) },
                    )*
                    // SAFETY: as above.
                    stream_get_id: find(c"cuStreamGetId").map(|f| unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn(Handle, *mut u64) -> CuResult>(f) }),
                })
            }
        }
    };
}

driver_table! {
    init = c"cuInit": fn(c_uint);
    device_get_count = c"cuDeviceGetCount": fn(*mut c_int);
    device_get = c"cuDeviceGet": fn(*mut CuDevice, c_int);
    device_get_attribute = c"cuDeviceGetAttribute": fn(*mut c_int, c_int, CuDevice);
    device_get_name = c"cuDeviceGetName": fn(*mut c_char, c_int, CuDevice);
    primary_ctx_retain = c"cuDevicePrimaryCtxRetain": fn(*mut Handle, CuDevice);
    primary_ctx_release = c"cuDevicePrimaryCtxRelease": fn(CuDevice);
    ctx_get_current = c"cuCtxGetCurrent": fn(*mut Handle);
    ctx_set_current = c"cuCtxSetCurrent": fn(Handle);
    ctx_synchronize = c"cuCtxSynchronize": fn();
    stream_get_ctx = c"cuStreamGetCtx": fn(Handle, *mut Handle);
    stream_is_capturing = c"cuStreamIsCapturing": fn(Handle, *mut c_int);
    module_load_data = c"cuModuleLoadData": fn(*mut Handle, *const c_void);
    module_unload = c"cuModuleUnload": fn(Handle);
    module_get_function = c"cuModuleGetFunction": fn(*mut Handle, Handle, *const c_char);
    func_set_attribute = c"cuFuncSetAttribute": fn(Handle, c_int, c_int);
    occupancy_max_active_blocks = c"cuOccupancyMaxActiveBlocksPerMultiprocessor": fn(*mut c_int, Handle, c_int, usize);
    launch_kernel = c"cuLaunchKernel": fn(Handle, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, Handle, *mut *mut c_void, *mut *mut c_void);
    mem_alloc_async = c"cuMemAllocAsync": fn(*mut CuDevicePtr, usize, Handle);
    mem_alloc_from_pool_async = c"cuMemAllocFromPoolAsync": fn(*mut CuDevicePtr, usize, Handle, Handle);
    mem_free_async = c"cuMemFreeAsync": fn(CuDevicePtr, Handle);
    memset_d32_async = c"cuMemsetD32Async": fn(CuDevicePtr, c_uint, usize, Handle);
    mem_pool_create = c"cuMemPoolCreate": fn(*mut Handle, *const MemPoolProps);
    mem_pool_set_attribute = c"cuMemPoolSetAttribute": fn(Handle, c_int, *mut c_void);
    mem_pool_destroy = c"cuMemPoolDestroy": fn(Handle);
    tensor_map_encode_tiled = c"cuTensorMapEncodeTiled": fn(*mut c_void, c_uint, c_uint, *mut c_void, *const u64, *const u64, *const u32, *const u32, c_uint, c_uint, c_uint, c_uint);
    get_error_name = c"cuGetErrorName": fn(CuResult, *mut *const c_char);
}

/// `name` through `get`, at the CUDA 12.0 ABI with the default (legacy) stream semantics.
///
/// # Safety
/// `get` is a driver's `cuGetProcAddress`.
unsafe fn lookup(get: GetProcAddress, name: &CStr) -> Option<*mut c_void> {
    let mut f: *mut c_void = std::ptr::null_mut();
    // SAFETY: a NUL-terminated name and a valid out-pointer.
    let r = unsafe { get(name.as_ptr(), &mut f, 12000, 0) };
    (r == 0 && !f.is_null()).then_some(f)
}

// SAFETY: plain function pointers into the driver, which is thread-safe.
unsafe impl Send for Driver {}
// SAFETY: as above.
unsafe impl Sync for Driver {}

static DRIVER: OnceLock<Driver> = OnceLock::new();

impl Driver {
    /// The process's table, resolved through `get` the first time (every backend reaches the
    /// same driver library, so the first one to ask fills it for all).
    ///
    /// # Safety
    /// `get` is the `cuGetProcAddress` of the process's CUDA driver library.
    pub(crate) unsafe fn load(get: GetProcAddress) -> Result<&'static Driver> {
        if let Some(d) = DRIVER.get() {
            return Ok(d);
        }
        // SAFETY: as for this function.
        let d = unsafe { Driver::resolve(get)? };
        Ok(DRIVER.get_or_init(|| d))
    }

    /// The table, once a GPU has been opened; [`Error::NoGpu`] before.
    pub(crate) fn get() -> Result<&'static Driver> {
        DRIVER.get().ok_or_else(|| Error::NoGpu("the CUDA driver has not been loaded: open a Gpu first".into()))
    }

    /// `Ok` for `CUDA_SUCCESS`, else [`Error::Driver`] naming `call` and the error.
    pub(crate) fn check(&self, call: &'static str, r: CuResult) -> Result<()> {
        if r == 0 {
            return Ok(());
        }
        let mut name: *const c_char = std::ptr::null();
        // SAFETY: a valid out-pointer; the driver returns a static string or leaves it null.
        let known = unsafe { (self.get_error_name)(r, &mut name) } == 0 && !name.is_null();
        // SAFETY: non-null names are NUL-terminated static strings.
        let name = if known { unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned() } else { "unknown error".into() };
        Err(Error::Driver { call, code: r as u32, name })
    }
}
