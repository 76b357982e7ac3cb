//! With the `cust` backend, checks that libcuda can be linked the way cust does it, and says how
//! to provide it when it cannot (the link would otherwise fail with "unable to find library
//! -lcuda"; when cust finds no CUDA folder at all, its own build script stops first, with "Could
//! not find a cuda installation", and the README says what to do). The kernels need no build
//! step: they ship compiled (see `src/kernels.rs`).
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-env-changed=CUDA_LIBRARY_PATH");
    if std::env::var_os("CARGO_FEATURE_CUST").is_none() || std::env::var_os("DOCS_RS").is_some() {
        return;
    }
    // Where cust's build script (find_cuda_helper) looks: each `CUDA_LIBRARY_PATH` entry, then
    // the usual toolkit folders; a folder counts when its `lib64` exists.
    let mut roots: Vec<PathBuf> = std::env::var("CUDA_LIBRARY_PATH").map(|v| std::env::split_paths(&v).collect()).unwrap_or_default();
    roots.extend(["/opt/cuda", "/usr/local/cuda"].map(PathBuf::from));
    if let Ok(dirs) = std::fs::read_dir("/usr/local") {
        roots.extend(dirs.flatten().map(|e| e.path()).filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("cuda-"))));
    }
    let mut libs: Vec<PathBuf> = roots.iter().map(|r| r.join("lib64")).filter(|l| l.is_dir()).collect();
    // The linker also searches its own folders.
    libs.extend(std::env::var("LIBRARY_PATH").map(|v| std::env::split_paths(&v).collect::<Vec<_>>()).unwrap_or_default());
    libs.extend(["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib64", "/lib"].map(PathBuf::from));
    let linkable = |dir: &Path| dir.join("libcuda.so").exists() || dir.join("stubs/libcuda.so").exists();
    if cfg!(target_os = "linux") && !libs.iter().any(|l| linkable(l)) {
        println!(
            "cargo::error=flashrs's `cust` backend links libcuda, as cust does, and found no libcuda.so to link against. \
             Either set CUDA_LIBRARY_PATH to a folder whose lib64/ holds libcuda.so (a CUDA toolkit, or a folder \
             where lib64/libcuda.so links to the driver's libcuda.so.1), or use the cudarc backend, which loads \
             libcuda at run time: flashrs = {{ default-features = false, features = [\"cudarc\"] }}."
        );
    }
}
