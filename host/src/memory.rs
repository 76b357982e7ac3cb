//! The buffers and streams the typed entry point ([`crate::Gpu::attention_forward`]) takes,
//! from any CUDA crate, through three traits: implemented here for cust's `DeviceSlice` /
//! `DeviceBuffer` and `Stream` (feature `cust`) and for cudarc's `CudaSlice` / `CudaView` /
//! `CudaViewMut` and `CudaStream` (feature `cudarc`), and implementable for others.
//!
//! A crate that orders work between streams by events (cudarc) needs to know that the kernel
//! reads or writes a buffer: [`DeviceRead::read`] and [`DeviceWrite::write`] may leave a value
//! in [`Guards`], which the entry point drops after the kernel is queued (cudarc's
//! `SyncOnDrop`, which records the access on the stream).
//!
//! The traits are `unsafe` to implement: the planner trusts the address and capacity they
//! report, and a wrong one would let a kernel touch memory outside the buffer.
use std::ffi::c_void;

use crate::buffers::BufferRef;
use crate::layout::DeviceArray;

/// Values kept from before a launch until after it (see the module docs).
#[derive(Default)]
pub struct Guards<'a>(Vec<Box<dyn Kept + 'a>>);

/// Anything at all: lets [`Guards`] hold values of any type until it drops them.
trait Kept {}
impl<T> Kept for T {}

impl<'a> Guards<'a> {
    /// Keeps `guard` until the launch has been queued.
    pub fn keep<G: 'a>(&mut self, guard: G) {
        self.0.push(Box::new(guard));
    }
}

/// A CUDA stream the typed entry point queues on.
///
/// # Safety
/// [`LaunchStream::raw`] returns a live `CUstream` handle, or null for the legacy default
/// stream, valid for as long as `self` is borrowed.
pub unsafe trait LaunchStream {
    /// The `CUstream` handle.
    fn raw(&self) -> *mut c_void;
    /// Records in `guards` that the call reads `array` (an offsets array, a block table, key
    /// counts, ALiBi slopes, sinks), for crates that track accesses; by default nothing.
    fn track<'a, T>(&'a self, array: &DeviceArray<'a, T>, guards: &mut Guards<'a>) {
        let _ = (array, guards);
    }
}

/// Device memory of `T`s that a kernel queued on a stream `S` reads.
///
/// # Safety
/// [`DeviceRead::read`] returns the device address and the true capacity in `T`s (never more
/// than is allocated from that address on) of memory usable in the stream's context, which
/// stays allocated for as long as `self` is borrowed, and after that until the stream has
/// passed work queued meanwhile.
pub unsafe trait DeviceRead<T, S: ?Sized> {
    /// The buffer, as the planner sees it, read by a kernel on `stream`.
    fn read<'a>(&'a self, stream: &'a S, guards: &mut Guards<'a>) -> BufferRef;
}

/// Device memory of `T`s that a kernel queued on a stream `S` writes.
///
/// # Safety
/// As for [`DeviceRead`], and the memory is not read or written by anything else while
/// borrowed.
pub unsafe trait DeviceWrite<T, S: ?Sized> {
    /// The buffer, as the planner sees it, written by a kernel on `stream`.
    fn write<'a>(&'a mut self, stream: &'a S, guards: &mut Guards<'a>) -> BufferRef;
}
