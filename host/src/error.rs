//! The library's error type.

/// Everything that can go wrong, each variant naming the problem.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No usable CUDA driver or GPU (the driver library is missing, or no device is present).
    #[error("no CUDA GPU available: {0}")]
    NoGpu(String),
    /// The GPU is older than the oldest architecture the kernels are built for.
    #[error("GPU compute capability {major}.{minor} is not supported (sm_80 or newer needed)")]
    UnsupportedGpu {
        /// Major compute capability.
        major: i32,
        /// Minor compute capability.
        minor: i32,
    },
    /// A kernel path was requested that this GPU cannot run.
    #[error("kernel path {path} needs {needs}, this GPU is sm_{major}{minor}")]
    PathUnavailable {
        /// The requested path.
        path: &'static str,
        /// What it needs.
        needs: &'static str,
        /// Major compute capability.
        major: i32,
        /// Minor compute capability.
        minor: i32,
    },
    /// A CUDA driver call failed.
    #[error("{call} failed: {name} ({code})")]
    Driver {
        /// The driver function.
        call: &'static str,
        /// Its `CUresult`.
        code: u32,
        /// The result's name (`CUDA_ERROR_INVALID_VALUE`).
        name: String,
    },
    /// The shipped kernels cannot be used: an image does not decompress to what the manifest
    /// says, or the driver loads none of the images for this GPU.
    #[error("kernels: {0}")]
    Kernels(String),
    /// The caller's own kernels ([`crate::custom`]) cannot serve a call: their module holds no
    /// forward entry, or not the kernel the call was planned for.
    #[error("custom kernels: {0}")]
    CustomKernels(String),
    /// A stream or context that is not this GPU's primary context.
    #[error("wrong CUDA context: {0}")]
    WrongContext(String),
    /// A required parameter was not given to the builder.
    #[error("{0} is required and was not set")]
    MissingParam(&'static str),
    /// A size or dimension is invalid (zero heads, head_dim out of range, ...).
    #[error("invalid {what}: {reason}")]
    InvalidShape {
        /// The dimension.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// head_dim is not one the kernels support.
    #[error("unsupported head_dim {0}: must be a multiple of 8 between 8 and 256")]
    UnsupportedHeadDim(usize),
    /// head_dim_v (V's and the output's head dimension) is not one the kernels support.
    #[error("unsupported head_dim_v {0}: must be a multiple of 8 between 8 and 256")]
    UnsupportedHeadDimV(usize),
    /// heads_q is not a multiple of heads_kv.
    #[error("heads_q ({heads_q}) must be a multiple of heads_kv ({heads_kv}) for grouped-query attention")]
    GqaRatio {
        /// Query heads.
        heads_q: usize,
        /// Key/value heads.
        heads_kv: usize,
    },
    /// A buffer is smaller than its shape and strides imply.
    #[error("{tensor} buffer holds {len} elements, but shape and strides reach element {needed}")]
    BufferTooSmall {
        /// Which tensor.
        tensor: &'static str,
        /// Elements needed (highest offset + 1).
        needed: u64,
        /// Elements the buffer holds.
        len: u64,
    },
    /// A base address or stride breaks the 16-byte vector loads the kernels use.
    #[error("{tensor} is misaligned: {reason}")]
    Misaligned {
        /// Which tensor.
        tensor: &'static str,
        /// What is misaligned.
        reason: String,
    },
    /// Strides that the kernels cannot address (negative, or overflowing 64-bit offsets), or
    /// output strides that put two elements at one address.
    #[error("{tensor} has invalid strides: {reason}")]
    InvalidStrides {
        /// Which tensor.
        tensor: &'static str,
        /// Why.
        reason: String,
    },
    /// A buffer the kernel would touch is unusable: a null address, or memory the kernel writes
    /// (output, log-sum-exp) overlapping another tensor's.
    #[error("invalid {tensor} buffer: {reason}")]
    InvalidBuffer {
        /// Which tensor.
        tensor: &'static str,
        /// Why.
        reason: String,
    },
    /// The launch would exceed a hardware limit (grid size, a kernel parameter's range).
    #[error("launch too large: {0}")]
    LaunchLimit(String),
    /// The kernel a call needs takes more shared memory per CTA than the GPU allows: no
    /// configuration of it fits (or the forced one does not).
    #[error("{kernel} needs {needed} bytes of shared memory per CTA, the GPU allows {available}")]
    SharedMemory {
        /// The kernel.
        kernel: String,
        /// Bytes it needs.
        needed: u64,
        /// Bytes a CTA may have on the GPU.
        available: u64,
    },
    /// Ring attention across GPUs: NCCL is missing or failed, or the ring's transfers could not
    /// be ordered (see `flashrs::ring`, feature `nccl`).
    #[error("ring communication: {0}")]
    Communication(String),
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
