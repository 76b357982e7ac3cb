//! cust: [`Gpu::new`], and its `DeviceSlice` / `DeviceBuffer` and `Stream` as typed buffers.
use std::ffi::{c_char, c_int, c_void};

use ::cust::memory::{DeviceBuffer, DeviceCopy, DeviceMemory, DeviceSlice};
use ::cust::stream::Stream;

use crate::buffers::BufferRef;
use crate::device::Gpu;
use crate::driver::{CuResult, Driver};
use crate::error::Result;
use crate::layout::{ArraySource, DeviceArray};
use crate::memory::{DeviceRead, DeviceWrite, Guards, LaunchStream};

/// The `cuGetProcAddress` of the libcuda cust links.
unsafe extern "C" fn get_proc_address(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64) -> CuResult {
    // SAFETY: forwarded as received.
    unsafe { ::cust::sys::cuGetProcAddress(symbol, pfn, version, flags) as CuResult }
}

impl Gpu {
    /// Initialises the driver and opens GPU `ordinal`, loading the kernels for its
    /// architecture; retains the device's primary context (shared with every other user of the
    /// device in this process) and makes it current on the calling thread.
    ///
    /// Returns [`Error::NoGpu`](crate::Error::NoGpu) without a driver or device and
    /// [`Error::UnsupportedGpu`](crate::Error::UnsupportedGpu) for GPUs older than sm_80.
    pub fn new(ordinal: u32) -> Result<Gpu> {
        // SAFETY: the `cuGetProcAddress` of the driver library cust links.
        let driver = unsafe { Driver::load(get_proc_address)? };
        Gpu::open(driver, ordinal)
    }
}

// SAFETY: a cust stream's handle lives as long as the stream.
unsafe impl LaunchStream for Stream {
    fn raw(&self) -> *mut c_void {
        self.as_inner() as *mut c_void
    }
}

/// A cust slice's address and length (its true capacity).
fn buffer<T: DeviceCopy>(s: &DeviceSlice<T>) -> BufferRef {
    BufferRef::new(s.as_raw_ptr(), s.len())
}

// SAFETY: a cust slice is one allocation of `len` elements, alive while borrowed.
unsafe impl<T: DeviceCopy> DeviceRead<T, Stream> for DeviceSlice<T> {
    fn read<'a>(&'a self, _: &'a Stream, _: &mut Guards<'a>) -> BufferRef {
        buffer(self)
    }
}

// SAFETY: as above.
unsafe impl<T: DeviceCopy> DeviceRead<T, Stream> for DeviceBuffer<T> {
    fn read<'a>(&'a self, _: &'a Stream, _: &mut Guards<'a>) -> BufferRef {
        buffer(self)
    }
}

// SAFETY: as above; the mutable borrow excludes other users in this program.
unsafe impl<T: DeviceCopy> DeviceWrite<T, Stream> for DeviceSlice<T> {
    fn write<'a>(&'a mut self, _: &'a Stream, _: &mut Guards<'a>) -> BufferRef {
        buffer(self)
    }
}

// SAFETY: as above.
unsafe impl<T: DeviceCopy> DeviceWrite<T, Stream> for DeviceBuffer<T> {
    fn write<'a>(&'a mut self, _: &'a Stream, _: &mut Guards<'a>) -> BufferRef {
        buffer(self)
    }
}

// SAFETY: as above.
unsafe impl<T: DeviceCopy> ArraySource<T> for DeviceSlice<T> {
    fn array(&self) -> DeviceArray<'_, T> {
        DeviceArray::untracked(buffer(self))
    }
}

// SAFETY: as above.
unsafe impl<T: DeviceCopy> ArraySource<T> for DeviceBuffer<T> {
    fn array(&self) -> DeviceArray<'_, T> {
        DeviceArray::untracked(buffer(self))
    }
}
