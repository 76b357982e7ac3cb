//! The kernels this crate ships: compiled forms of the device crate, embedded compressed, and
//! which of them a GPU loads.
//!
//! # What is shipped and why
//!
//! `cargo xtask build-ptx` compiles the device crate `kernels-gpu` with rustc's NVPTX backend
//! (the nightly `rust-toolchain.toml` pins) into two PTX modules, `sm_80` (every `mma.sync`
//! kernel, for compute capability 8.0 and newer) and `sm_90a` (those plus the Hopper kernels),
//! assembles them with ptxas into cubins for sm_80, sm_86, sm_89 and sm_90a, and writes all six
//! zstd-compressed under `host/kernels/` with a manifest of their sources and hashes. This crate
//! embeds those files, so building it needs neither the nightly nor a CUDA toolkit, and a GPU
//! loads machine code instead of JIT-compiling megabytes of PTX at every cold start (the
//! driver's cache does not survive a fresh container). The PTX stays as the fallback for GPUs
//! no cubin runs on.
//!
//! [`Image::for_gpu`] orders the images a GPU can load: the cubin of its own architecture,
//! then an older cubin of its major version (an sm_80 cubin runs on sm_86, sm_87 and sm_89),
//! then the PTX of its module. [`Gpu::new`](crate::Gpu) loads the first the driver accepts
//! and decompresses only that one.
//!
//! # Kernel names
//!
//! Every kernel entry point is a [`Kernel`](crate::Kernel): family (`mma.sync` or Hopper),
//! [`Variant`](crate::Variant), element type and tile configuration. Its name is derived from
//! it in one place (its `Display`), and [`Kernel::all`](crate::Kernel::all) lists them: both
//! modules hold every `mma.sync` kernel, the sm_90a module also the Hopper ones. The build
//! checks each entry against the configuration it instantiates. Other entries (`probe_*`,
//! `upload_i32`, `bench_spin`) are not part of the interface.
//!
//! # Kernel ABI
//!
//! An `mma.sync` forward kernel takes one [`FwdParams`](crate::FwdParams) by value; a Hopper
//! one takes three [`TensorMapParam`](crate::tensor_map::TensorMapParam)s (Q, K, V) and then the
//! `FwdParams`. The grid is 1-D ([`LaunchPlan::grid`](crate::LaunchPlan::grid) CTAs), the
//! block 1-D ([`LaunchPlan::block`](crate::LaunchPlan::block) threads), and the dynamic shared
//! memory [`LaunchPlan::smem`](crate::LaunchPlan::smem) bytes, above the default 48 KiB limit
//! for most kernels (the function's `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES` must be
//! set first). The kernels trust their parameters completely: everything the planner checks is
//! a precondition. Plans with a workspace (split-KV, host offsets, persistent launches) need
//! device memory bound into the parameters; launch those through
//! [`Gpu::launch`](crate::Gpu::launch).
use std::io::Read;

use crate::error::{Error, Result};
use crate::target::Arch;

/// How an image is compiled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    /// PTX text, which the driver compiles for the GPU when it loads it.
    Ptx,
    /// Machine code (SASS) for one GPU architecture.
    Cubin,
}

/// One compiled form of the kernels, as shipped (zstd-compressed).
#[derive(Debug)]
pub struct Image {
    /// File name without `.zst` (`sm_86.cubin`).
    pub name: &'static str,
    /// The kernels it holds: those of [`Arch::Sm80`] or of [`Arch::Sm90a`].
    pub module: Arch,
    /// The compute capability it is compiled for.
    pub compute_capability: (u32, u32),
    /// PTX or cubin.
    pub code: Code,
    zst: &'static [u8],
}

macro_rules! image {
    ($name:literal, $module:expr, $cc:expr, $code:expr) => {
        Image {
            name: $name,
            module: $module,
            compute_capability: $cc,
            code: $code,
            zst: include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/kernels/", $name, ".zst")),
        }
    };
}

/// Every shipped image.
pub static IMAGES: [Image; 6] = [
    image!("sm_90a.cubin", Arch::Sm90a, (9, 0), Code::Cubin),
    image!("sm_89.cubin", Arch::Sm80, (8, 9), Code::Cubin),
    image!("sm_86.cubin", Arch::Sm80, (8, 6), Code::Cubin),
    image!("sm_80.cubin", Arch::Sm80, (8, 0), Code::Cubin),
    image!("sm_90a.ptx", Arch::Sm90a, (9, 0), Code::Ptx),
    image!("sm_80.ptx", Arch::Sm80, (8, 0), Code::Ptx),
];

/// The manifest `cargo xtask build-ptx` wrote with the images: the digest of the sources, the
/// toolchain, the ptxas version, and each file's size and sha256.
pub const MANIFEST: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/kernels/MANIFEST"));

impl Image {
    /// Uncompressed size in bytes, as the manifest gives it (0 for a file it does not list).
    pub fn size(&self) -> usize {
        let size = |l: &str| l.strip_prefix("file ")?.strip_prefix(self.name)?.strip_prefix(' ')?.split(' ').next()?.parse().ok();
        MANIFEST.lines().find_map(size).unwrap_or(0)
    }

    /// Whether a GPU of compute capability `cc` can load this image: a cubin of the same major
    /// version and no newer minor one (architecture-specific `sm_90a` code only on 9.0), PTX on
    /// anything at least as new (`sm_90a` PTX only on 9.0).
    pub fn runs_on(&self, cc: (u32, u32)) -> bool {
        let (major, minor) = self.compute_capability;
        let specific = self.module == Arch::Sm90a;
        match self.code {
            _ if specific => cc == (major, minor),
            Code::Cubin => cc.0 == major && cc.1 >= minor,
            Code::Ptx => cc >= (major, minor),
        }
    }

    /// The images a GPU of compute capability `cc` can load, best first: cubins of its module
    /// ([`Arch::for_compute_capability`]) from the newest architecture down, then its PTX.
    pub fn for_gpu(cc: (u32, u32)) -> impl Iterator<Item = &'static Image> {
        let module = Arch::for_compute_capability(cc.0, cc.1);
        IMAGES.iter().filter(move |i| i.module == module && i.runs_on(cc))
    }

    /// The uncompressed image (PTX text with a terminating NUL, as the driver takes it).
    pub fn bytes(&self) -> Result<Vec<u8>> {
        let corrupt = |e: String| Error::Kernels(format!("{}: {e}", self.name));
        let len = self.size();
        let mut out = Vec::with_capacity(len + 1);
        let mut decoder = ruzstd::decoding::StreamingDecoder::new(self.zst).map_err(|e| corrupt(e.to_string()))?;
        decoder.read_to_end(&mut out).map_err(|e| corrupt(e.to_string()))?;
        if out.len() != len {
            return Err(corrupt(format!("{} bytes decompressed, the manifest says {len}", out.len())));
        }
        if self.code == Code::Ptx {
            out.push(0);
        }
        Ok(out)
    }

    /// The PTX text of `module` (for projects that load the kernels themselves, and for
    /// inspection).
    pub fn ptx(module: Arch) -> Result<String> {
        let image = IMAGES.iter().find(|i| i.module == module && i.code == Code::Ptx).ok_or_else(|| Error::Kernels(format!("no {module:?} PTX shipped")))?;
        let mut bytes = image.bytes()?;
        bytes.pop();
        String::from_utf8(bytes).map_err(|e| Error::Kernels(format!("{}: {e}", image.name)))
    }
}

/// The kernel entry points (`.entry` directives) of a PTX module, in the module's order.
pub fn entry_names(ptx: &str) -> Vec<&str> {
    ptx.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace().skip_while(|w| *w != ".entry");
            words.next()?;
            let name = words.next()?;
            Some(name.split('(').next().unwrap_or(name))
        })
        .filter(|name| !name.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BwdStep, Kernel};

    #[test]
    fn every_image_decompresses_to_its_manifest_entry() {
        use sha2::Digest;
        for image in &IMAGES {
            let bytes = image.bytes().unwrap();
            let body = if image.code == Code::Ptx { &bytes[..bytes.len() - 1] } else { &bytes[..] };
            let sha: String = sha2::Sha256::digest(body).iter().map(|b| format!("{b:02x}")).collect();
            let line = format!("file {} {} {sha}", image.name, image.size());
            assert!(MANIFEST.lines().any(|l| l == line), "{} does not match the manifest", image.name);
        }
    }

    #[test]
    fn every_kernel_is_in_the_modules_it_belongs_to() {
        let (sm80, sm90) = (Image::ptx(Arch::Sm80).unwrap(), Image::ptx(Arch::Sm90a).unwrap());
        let (sm80, sm90) = (entry_names(&sm80), entry_names(&sm90));
        for k in Kernel::all() {
            let name = k.to_string();
            assert!(sm90.contains(&name.as_str()), "{name} missing from the sm_90a module");
            assert_eq!(sm80.contains(&name.as_str()), !k.needs_sm90a(), "{name} in the sm_80 module");
        }
        // Hopper kernels carry the register budget setmaxnreg needs at entry (xtask adds it).
        let ptx = Image::ptx(Arch::Sm90a).unwrap();
        let hopper = |k: &Kernel| matches!(k, Kernel::Sm90 { .. } | Kernel::Bwd { step: BwdStep::MainSm90 { .. }, .. });
        for k in Kernel::all().filter(hopper) {
            let name = k.to_string();
            let header = ptx.split(&format!(".entry {name}(")).nth(1).and_then(|r| r.split('{').next()).unwrap();
            assert!(header.contains(&format!(".maxntid {}, 1, 1", k.threads())), "{name}: {header}");
        }
    }

    #[test]
    fn gpus_load_their_own_cubin_first_and_ptx_last() {
        let names = |cc| Image::for_gpu(cc).map(|i| i.name).collect::<Vec<_>>();
        assert_eq!(names((9, 0)), ["sm_90a.cubin", "sm_90a.ptx"]);
        assert_eq!(names((8, 0)), ["sm_80.cubin", "sm_80.ptx"]);
        assert_eq!(names((8, 6)), ["sm_86.cubin", "sm_80.cubin", "sm_80.ptx"]);
        assert_eq!(names((8, 7)), ["sm_86.cubin", "sm_80.cubin", "sm_80.ptx"]);
        assert_eq!(names((8, 9)), ["sm_89.cubin", "sm_86.cubin", "sm_80.cubin", "sm_80.ptx"]);
        assert_eq!(names((10, 0)), ["sm_80.ptx"]);
        assert_eq!(names((12, 0)), ["sm_80.ptx"]);
        assert!(names((7, 5)).is_empty());
        assert!(IMAGES.iter().all(|i| i.size() > 0), "an image the manifest does not list");
    }

    #[test]
    fn entry_names_parses_entry_directives() {
        let ptx = ".version 8.0\n.visible .entry foo(\n\t.param .u64 foo_param_0\n)\n.entry bar()\n.func baz()\n";
        assert_eq!(entry_names(ptx), ["foo", "bar"]);
    }
}
