//! Small host arrays carried to the GPU inside a launch's parameters.
//!
//! A variable-length call's offsets live on the host; copying them with `cuMemcpyHtoDAsync`
//! from pageable memory synchronises the stream first (the host waits for every queued kernel)
//! and cannot be captured into a graph. A kernel's parameters, by contrast, are copied when it
//! is launched (and into the graph node when captured), so the device crate's `upload_i32`
//! takes the values by value ([`UploadI32`]) and stores them where they are needed,
//! [`UPLOAD_I32_MAX`] per launch.

/// Values one launch carries: the parameter struct stays within the 4 KB every GPU takes.
pub const UPLOAD_I32_MAX: usize = 1000;

/// The parameters of the device crate's `upload_i32` kernel (one block of 256 threads).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UploadI32 {
    /// Device address of the first destination element.
    pub dst: u64,
    /// Values to store (at most [`UPLOAD_I32_MAX`]).
    pub len: u32,
    /// The values; those past `len` are ignored.
    pub vals: [i32; UPLOAD_I32_MAX],
}

/// Threads of the `upload_i32` block.
pub const UPLOAD_I32_THREADS: u32 = 256;
