//! Small host arrays carried to the GPU inside a launch's parameters.
//!
//! A variable-length call's offsets live on the host; copying them with `cuMemcpyHtoDAsync`
//! from pageable memory synchronises the stream first (the host waits for every queued kernel)
//! and cannot be captured into a graph. A kernel's parameters, by contrast, are copied when it
//! is launched (and into the graph node when captured), so [`upload_i32`] takes the values by
//! value and stores them where they are needed, [`UPLOAD_I32_MAX`] per launch.
//!
//! The parameter's layout is the ABI crate's ([`flashrs_abi::upload`]), shared with the host.

pub use flashrs_abi::upload::{UPLOAD_I32_MAX, UploadI32};

/// `ld.param.b32` of the i32 `byte` bytes into [`upload_i32`]'s parameter. Indexing `p.vals`
/// in Rust would make LLVM copy the whole 4 KB parameter to local memory first (in every
/// thread); a `.param` address taken with `mov` is read in place (PTX allows `ld.param`
/// through it for kernel parameters).
#[cfg(target_arch = "nvptx64")]
#[inline(always)]
fn ld_param_b32(byte: u64) -> i32 {
    let v: i32;
    unsafe {
        core::arch::asm!(
            "{{ .reg .b64 a; mov.b64 a, upload_i32_param_0; add.s64 a, a, {o}; ld.param.b32 {v}, [a]; }}",
            o = in(reg64) byte, v = out(reg32) v, options(pure, nomem, nostack))
    };
    v
}

/// Stores `p.vals[..p.len]` at `p.dst`, the block's threads striding over them.
#[cfg(target_arch = "nvptx64")]
#[cfg(feature = "entries")]
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn upload_i32(p: UploadI32) {
    use crate::arch::ids::{block_dim_x, thread_idx_x};
    let n = (p.len as usize).min(UPLOAD_I32_MAX);
    let vals = core::mem::offset_of!(UploadI32, vals) as u64;
    let mut i = thread_idx_x() as usize;
    while i < n {
        unsafe { *(p.dst as *mut i32).add(i) = ld_param_b32(vals + 4 * i as u64) };
        i += block_dim_x() as usize;
    }
}
