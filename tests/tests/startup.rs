//! A cold start: the first `Gpu::new` of a process with the driver's compute cache off (as in a
//! fresh container) loads the shipped image for the GPU, and where that is machine code (every
//! architecture the build knows) it is ready in under 0.5 s. Its own test binary, so that
//! nothing opened the GPU before.
use flashrs::kernels::{Code, Image};
use flashrs_tests::gpu_or_skip;

/// The most a cold `Gpu::new` may take when it loads a cubin.
const COLD_START_LIMIT_S: f64 = 0.5;

#[test]
fn a_cold_gpu_opens_fast() {
    // Before any CUDA call of this process: no cached JIT output may help.
    // SAFETY: no other thread reads the environment while it is set, before the driver loads.
    unsafe { std::env::set_var("CUDA_CACHE_DISABLE", "1") };
    let start = std::time::Instant::now();
    let Some(gpu) = gpu_or_skip("a_cold_gpu_opens_fast") else { return };
    let wall = start.elapsed().as_secs_f64();
    let (major, minor) = gpu.compute_capability();
    let image = gpu.image();
    println!(
        "cold Gpu::new on {} (sm_{major}{minor}): {:.1} ms, {:.1} ms of it in opening the device and loading {} ({} bytes)",
        gpu.name().unwrap(),
        wall * 1e3,
        gpu.startup().as_secs_f64() * 1e3,
        image.name,
        image.size()
    );
    if Image::for_gpu((major as u32, minor as u32)).any(|i| i.code == Code::Cubin) {
        assert_eq!(image.code, Code::Cubin, "a cubin ships for this GPU, yet it loaded {}", image.name);
        assert!(wall < COLD_START_LIMIT_S, "cold start took {wall:.3} s, more than {COLD_START_LIMIT_S} s");
    } else {
        println!("no cubin ships for sm_{major}{minor}: the driver compiled the PTX");
    }
}
