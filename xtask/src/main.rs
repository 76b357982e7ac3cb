//! Developer tasks. `cargo xtask build-ptx` compiles, checks and reports the PTX modules.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use xtask::{ARCHES, Build, KernelReport, check_spills, cubin_path, find_ptxas, ptxas_report};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("build-ptx") => match build_ptx() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
        _ => {
            eprintln!(
                "usage: cargo xtask build-ptx\n  compiles kernels-gpu to target/ptx/<arch>.ptx for {}, \
                 rejects unresolved calls, checks that every kernel entry is named for the \
                 configuration it instantiates, and with ptxas (\\$PTXAS, .deps/bin/ptxas or PATH) reports registers/spills/smem per kernel \
                 for every GPU the module serves, failing if a hot kernel (flash_*) spills; with \
                 nvdisasm it counts the tensor-core instructions in the SASS",
                ARCHES.map(|a| a.name).join(", ")
            );
            ExitCode::FAILURE
        }
    }
}

fn build_ptx() -> Result<(), Box<dyn std::error::Error>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let build = Build::new(&root);
    let ptxas = find_ptxas(&root);
    let mut summary = Vec::new();
    for arch in ARCHES {
        let ptx = build.build(arch)?;
        println!("{}: {}", arch.name, ptx.display());
        let Some(ptxas) = &ptxas else {
            println!("  ptxas not found (run scripts/setup.sh): skipped register/spill check");
            continue;
        };
        for &gpu in arch.assembled_for {
            let reports = ptxas_report(ptxas, &ptx, gpu)?;
            if gpu == arch.name {
                let sass = find_nvdisasm(&root).map(|d| sass_counts(&d, &cubin_path(&ptx, gpu)));
                print_table(&reports, sass.as_ref());
            }
            check_spills(gpu, &reports)?;
            let hot: Vec<&KernelReport> = reports.iter().filter(|r| r.is_hot()).collect();
            let most = hot.iter().max_by_key(|r| r.registers);
            summary.push(format!(
                "{gpu}: {} kernels, most registers {}",
                hot.len(),
                most.map_or("-".into(), |r| format!("{} ({})", r.registers, r.name))
            ));
        }
    }
    if !summary.is_empty() {
        println!("build-ptx: no spills; {}", summary.join("; "));
    }
    Ok(())
}

fn print_table(reports: &[KernelReport], sass: Option<&Vec<(String, SassCounts)>>) {
    println!(
        "  {:<44} {:>5} {:>7} {:>7} {:>6} {:>7}  sass(HMMA/HGMMA/UTMALDG/LDL+STL)",
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
            c.hgmma += has("HGMMA.") as usize;
            c.utmaldg += has("UTMALDG") as usize;
            c.local += (has("LDL") || has("STL")) as usize;
        }
    }
    all
}
