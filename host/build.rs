//! Builds the device crate into PTX (the same code as `cargo xtask build-ptx`) so that a plain
//! `cargo build` of a fresh clone embeds up-to-date kernels.
use std::path::PathBuf;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest.parent().unwrap().to_path_buf();
    for p in ["kernels-gpu/src", "kernels-gpu/Cargo.toml", "abi/src", "abi/Cargo.toml", "rust-toolchain.toml"] {
        println!("cargo:rerun-if-changed={}", root.join(p).display());
    }
    let mut build = xtask::Build::new(&root);
    build.out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    for arch in xtask::ARCHES {
        if let Err(e) = build.build(arch) {
            panic!("building the {} PTX failed: {e}", arch.name);
        }
    }
}
