//! Developer tasks. `cargo xtask build-ptx` compiles, checks and reports the PTX modules.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use xtask::ship::{self, Manifest};
use xtask::{ARCHES, Build, DeviceCrate, KernelReport, assemble, check_spills, check_wgmma, find_ptxas, ptxas_version};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let done = match args.as_slice() {
        ["build-ptx"] => build_ptx(&root, false),
        ["build-ptx", "--check"] => build_ptx(&root, true),
        ["build-ptx", "--crate", dir] => build_custom(&root, Path::new(dir)),
        _ => {
            eprintln!(
                "usage: cargo xtask build-ptx [--check | --crate DIR]\n  compiles kernels-gpu to target/ptx/<arch>.ptx for {} with the pinned toolchain, \
                 rejects unresolved calls, checks that every kernel entry is named for the configuration it \
                 instantiates, assembles each module with ptxas ($PTXAS, .deps/bin/ptxas or PATH) for every GPU it \
                 serves (skipped when the PTX is unchanged), fails if a hot kernel (flash_*) spills or gets a wgmma wait ptxas injected, counts the \
                 tensor-core instructions in the SASS with nvdisasm, and writes the compressed PTX and cubins the \
                 library ships with their manifest to {}/.\n  --check: writes nothing, fails unless what it builds \
                 is exactly what is shipped (CI)\n  --crate DIR: builds a device crate built on kernels-gpu (its own \
                 mma_forward_kernel!/sm90_forward_kernel! entries) with the same checks, every entry held to no \
                 spills, into target/ptx/<lib>/<arch>.ptx, for flashrs's Gpu::load_custom_kernels",
                ARCHES.map(|a| a.name).join(", "),
                ship::SHIP_DIR
            );
            return ExitCode::FAILURE;
        }
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Builds, assembles and checks a custom device crate's modules (see [`DeviceCrate`]).
fn build_custom(root: &Path, dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let build = Build::new(root);
    let krate = DeviceCrate::at(&std::env::current_dir()?.join(dir))?;
    let ptxas = find_ptxas(root).ok_or("ptxas not found: run scripts/setup.sh, or set PTXAS")?;
    let ptxas_version = ptxas_version(&ptxas)?;
    let mut written = Vec::new();
    for arch in ARCHES {
        let ptx = build.build(&krate, arch)?;
        for &gpu in arch.assembled_for {
            let done = assemble(&ptxas, &ptxas_version, &ptx, gpu)?;
            if done.ran {
                println!("{gpu} (from {}):", ptx.display());
                let sass = find_nvdisasm(root).map(|d| sass_counts(&d, &done.cubin));
                print_table(&done.reports, sass.as_ref());
            }
            check_spills(gpu, &done.reports, true)?;
            check_wgmma(gpu, &done.reports)?;
        }
        written.push(ptx.display().to_string());
    }
    println!("build-ptx --crate: {}; no spills; wrote {}", krate.lib, written.join(", "));
    Ok(())
}

fn build_ptx(root: &Path, check: bool) -> Result<(), Box<dyn std::error::Error>> {
    let root = root.to_path_buf();
    let build = Build::new(&root);
    let device_crate = build.shipped();
    let ptxas = find_ptxas(&root).ok_or("ptxas not found: run scripts/setup.sh, or set PTXAS (the library ships cubins it assembles)")?;
    let ptxas_version = ptxas_version(&ptxas)?;
    let mut shipped: Vec<(String, Vec<u8>)> = Vec::new();
    let (mut kernels, mut most, mut skipped) = (Vec::new(), (0, String::new()), 0);
    for arch in ARCHES {
        let ptx = build.build(&device_crate, arch)?;
        shipped.push((format!("{}.ptx", arch.name), std::fs::read(&ptx)?));
        for &gpu in arch.assembled_for {
            let done = assemble(&ptxas, &ptxas_version, &ptx, gpu)?;
            if done.ran {
                println!("{gpu} (from {}):", ptx.display());
                let sass = find_nvdisasm(&root).map(|d| sass_counts(&d, &done.cubin));
                print_table(&done.reports, sass.as_ref());
            } else {
                skipped += 1;
            }
            check_spills(gpu, &done.reports, false)?;
            check_wgmma(gpu, &done.reports)?;
            let hot: Vec<&KernelReport> = done.reports.iter().filter(|r| r.is_hot()).collect();
            kernels.push(format!("{gpu} {}", hot.len()));
            if let Some(r) = hot.iter().max_by_key(|r| r.registers).filter(|r| r.registers > most.0) {
                most = (r.registers, format!("{} on {gpu}", r.name));
            }
            shipped.push((format!("{gpu}.cubin"), std::fs::read(&done.cubin)?));
        }
    }
    let manifest = Manifest {
        sources: ship::sources_digest(&root)?,
        toolchain: build.toolchain()?,
        ptxas: ptxas_version,
        files: shipped.iter().map(|(name, bytes)| ship::entry(name, bytes)).collect(),
    };
    let action = if check {
        let differences = manifest.differences(&Manifest::read(&root).unwrap_or_default());
        if !differences.is_empty() {
            return Err(format!(
                "the kernels in {} are not what these sources build (run `cargo xtask build-ptx` and commit them):\n  {}",
                ship::SHIP_DIR,
                differences.join("\n  ")
            )
            .into());
        }
        format!("{} match the build", ship::SHIP_DIR)
    } else {
        let written = ship::write(&root, &manifest, &shipped)?;
        if written.is_empty() { format!("{} unchanged", ship::SHIP_DIR) } else { format!("wrote {} in {}", written.join(", "), ship::SHIP_DIR) }
    };
    let skipped = if skipped > 0 { format!(" (ptxas skipped for {skipped} unchanged)") } else { String::new() };
    println!("build-ptx: kernels {}; most registers {} ({}); no spills{skipped}; {action}", kernels.join(", "), most.0, most.1);
    Ok(())
}

fn print_table(reports: &[KernelReport], sass: Option<&Vec<(String, SassCounts)>>) {
    println!(
        "  {:<44} {:>5} {:>7} {:>7} {:>6} {:>7}  sass(HMMA/xGMMA/UTMALDG/LDL+STL)",
        "kernel", "regs", "spill-s", "spill-l", "stack", "smem"
    );
    for r in reports {
        let counts = sass
            .and_then(|s| s.iter().find(|(n, _)| *n == r.name))
            .map(|(_, c)| format!("{}/{}/{}/{}", c.hmma, c.hgmma, c.utmaldg, c.local))
            .unwrap_or_else(|| "-".into());
        println!(
            "  {:<44} {:>5} {:>7} {:>7} {:>6} {:>7}  {}",
            r.name, r.registers, r.spill_stores, r.spill_loads, r.stack_frame, r.smem, counts
        );
    }
}

fn find_nvdisasm(root: &Path) -> Option<PathBuf> {
    std::env::var_os("NVDISASM")
        .map(PathBuf::from)
        .or_else(|| Some(root.join(".deps/bin/nvdisasm")).filter(|p| p.exists()))
}

#[derive(Default)]
struct SassCounts {
    hmma: usize,
    hgmma: usize,
    utmaldg: usize,
    local: usize,
}

/// Counts the instructions that show which path a kernel takes, per kernel, from the cubin.
fn sass_counts(nvdisasm: &Path, cubin: &Path) -> Vec<(String, SassCounts)> {
    let Ok(out) = Command::new(nvdisasm).arg("-c").arg(cubin).output() else { return vec![] };
    let mut all: Vec<(String, SassCounts)> = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some(name) = line.trim().strip_prefix(".text.").and_then(|n| n.strip_suffix(':')) {
            all.push((name.to_string(), SassCounts::default()));
        } else if let Some((_, c)) = all.last_mut() {
            let has = |op: &str| line.split_whitespace().any(|w| w.starts_with(op));
            c.hmma += has("HMMA.") as usize;
            // HGMMA for 16-bit operands, QGMMA for FP8.
            c.hgmma += (has("HGMMA.") || has("QGMMA.")) as usize;
            c.utmaldg += has("UTMALDG") as usize;
            c.local += (has("LDL") || has("STL")) as usize;
        }
    }
    all
}
