//! Shared helpers of the integration tests.
use std::io::Write;

pub mod attn;
pub mod expect;
pub mod paged;
pub mod varlen;

/// Opens GPU 0, or reports the test as skipped (with the reason) and returns `None` where no
/// GPU or driver is present. Any other failure to open the GPU is a test failure.
pub fn gpu_or_skip(test: &str) -> Option<flashrs::Gpu> {
    match flashrs::Gpu::new(0) {
        Ok(gpu) => Some(gpu),
        Err(flashrs::Error::NoGpu(reason)) => {
            // Straight to the handle: libtest captures print!/eprint!, and a skip must be seen.
            let _ = writeln!(std::io::stderr(), "SKIPPED {test}: no GPU ({reason})");
            None
        }
        Err(e) => panic!("{test}: opening the GPU failed: {e}"),
    }
}

/// [`gpu_or_skip`], also skipping (with the reason) GPUs that do not run the sm_90a module
/// (the Hopper kernels need an H100/H200).
pub fn hopper_or_skip(test: &str) -> Option<flashrs::Gpu> {
    let gpu = gpu_or_skip(test)?;
    if gpu.arch() != flashrs::Arch::Sm90a {
        let (major, minor) = gpu.compute_capability();
        let msg = format!("SKIPPED {test}: needs an sm_90a GPU (H100/H200), this one is sm_{major}{minor}");
        let _ = writeln!(std::io::stderr(), "{msg}");
        let _ = writeln!(std::io::stdout(), "{msg}");
        return None;
    }
    Some(gpu)
}
