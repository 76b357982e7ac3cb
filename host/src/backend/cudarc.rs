//! cudarc: `Gpu::from_cudarc`, and its `CudaSlice` / `CudaView` / `CudaViewMut` and
//! `CudaStream` as typed buffers. The driver is the libcuda cudarc loads at run time, so a
//! program that uses only this backend links no CUDA library.
use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;

use ::cudarc::driver::{CudaContext, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceSlice};

use crate::buffers::BufferRef;
use crate::device::Gpu;
use crate::driver::{CuResult, Driver};
use crate::error::{Error, Result};
use crate::layout::{ArraySource, DeviceArray};
use crate::memory::{DeviceRead, DeviceWrite, Guards, LaunchStream};

/// The `cuGetProcAddress` of the libcuda cudarc loaded.
unsafe extern "C" fn get_proc_address(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64) -> CuResult {
    // SAFETY: forwarded as received; the status out-pointer is optional.
    unsafe { ::cudarc::driver::sys::cuGetProcAddress_v2(symbol, pfn, version, flags, std::ptr::null_mut()) as CuResult }
}

impl Gpu {
    /// Opens the GPU of a cudarc context (which has loaded the driver), loading the kernels for
    /// its architecture. The context must be the device's primary context, as
    /// `CudaContext::new` makes it; the `Gpu` holds it too, and makes it current on the calling
    /// thread.
    pub fn from_cudarc(ctx: &Arc<CudaContext>) -> Result<Gpu> {
        // SAFETY: the `cuGetProcAddress` of the driver library cudarc loaded for `ctx`.
        let driver = unsafe { Driver::load(get_proc_address)? };
        let ordinal = u32::try_from(ctx.ordinal()).map_err(|_| Error::NoGpu(format!("device ordinal {}", ctx.ordinal())))?;
        let gpu = Gpu::open(driver, ordinal)?;
        if gpu.raw_context() != ctx.cu_ctx() as *mut c_void {
            return Err(Error::WrongContext("the cudarc context is not its device's primary context".into()));
        }
        Ok(gpu)
    }
}

/// A cudarc stream, owned or shared (public in a private module: not nameable outside).
pub trait Cudarc {
    fn stream(&self) -> &CudaStream;
}

impl Cudarc for CudaStream {
    fn stream(&self) -> &CudaStream {
        self
    }
}

impl Cudarc for Arc<CudaStream> {
    fn stream(&self) -> &CudaStream {
        self
    }
}

/// `LaunchStream` for cudarc streams: index arrays made from cudarc memory are read in the
/// stream's order (it waits for their last write, and records the read).
macro_rules! cudarc_stream {
    ($t:ty) => {
        // SAFETY: a cudarc stream's handle lives as long as the stream.
        unsafe impl LaunchStream for $t {
            fn raw(&self) -> *mut c_void {
                Cudarc::stream(self).cu_stream() as *mut c_void
            }
            fn track<'a, T>(&'a self, array: &DeviceArray<'a, T>, guards: &mut Guards<'a>) {
                if let crate::layout::Source::Cudarc(memory) = array.source() {
                    memory.record(Cudarc::stream(self), guards);
                }
            }
        }
    };
}
cudarc_stream!(CudaStream);
cudarc_stream!(Arc<CudaStream>);

/// `DeviceRead` (and, with `mut`, `DeviceWrite`) for a cudarc memory type: its address and
/// length, the access recorded on the stream until the kernel is queued.
macro_rules! cudarc_memory {
    (read $t:ty) => {
        // SAFETY: cudarc memory is one allocation of `len` elements, alive while borrowed.
        unsafe impl<T, S: Cudarc + ?Sized> DeviceRead<T, S> for $t {
            fn read<'a>(&'a self, stream: &'a S, guards: &mut Guards<'a>) -> BufferRef {
                let (ptr, guard) = self.device_ptr(stream.stream());
                guards.keep(guard);
                BufferRef::new(ptr, self.len())
            }
        }
    };
    (write $t:ty) => {
        // SAFETY: as above; the mutable borrow excludes other users in this program.
        unsafe impl<T, S: Cudarc + ?Sized> DeviceWrite<T, S> for $t {
            fn write<'a>(&'a mut self, stream: &'a S, guards: &mut Guards<'a>) -> BufferRef {
                let len = self.len();
                let (ptr, guard) = self.device_ptr_mut(stream.stream());
                guards.keep(guard);
                BufferRef::new(ptr, len)
            }
        }
    };
}
cudarc_memory!(read CudaSlice<T>);
cudarc_memory!(read CudaView<'_, T>);
cudarc_memory!(read CudaViewMut<'_, T>);
cudarc_memory!(write CudaSlice<T>);
cudarc_memory!(write CudaViewMut<'_, T>);

/// cudarc memory a [`DeviceArray`] borrows, whatever its element type: a launch records its
/// read on the launch stream.
pub(crate) trait Tracked: Sync {
    /// Orders `stream` after the memory's last write and records the read until `guards` drop.
    fn record<'a>(&'a self, stream: &'a CudaStream, guards: &mut Guards<'a>);
}

/// `ArraySource` (and `Tracked`) for cudarc memory: the address, read on the memory's own
/// stream for now (planning needs it before a launch stream is known); a launch then orders
/// itself after the memory's last write ([`LaunchStream::track`]).
macro_rules! cudarc_array {
    ($t:ty) => {
        impl<T: Sync> Tracked for $t {
            fn record<'a>(&'a self, stream: &'a CudaStream, guards: &mut Guards<'a>) {
                guards.keep(self.device_ptr(stream).1);
            }
        }
        // SAFETY: as for `DeviceRead`.
        unsafe impl<T: Sync> ArraySource<T> for $t {
            fn array(&self) -> DeviceArray<'_, T> {
                let (ptr, _) = self.device_ptr(DeviceSlice::stream(self));
                DeviceArray::tracked(BufferRef::new(ptr, self.len()), self)
            }
        }
    };
}
cudarc_array!(CudaSlice<T>);
cudarc_array!(CudaView<'_, T>);
