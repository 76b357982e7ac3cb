//! Builds the `kernels-gpu` crate into PTX modules, checks them, assembles them with ptxas and
//! writes what the library ships ([`ship`]): `cargo xtask build-ptx`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use flashrs_abi::Kernel;
use flashrs_abi::kernel::marked_entries;

pub mod divergence;
pub mod ship;

/// One PTX module to build: the `-C target-cpu` it is compiled for.
#[derive(Clone, Copy, Debug)]
pub struct Arch {
    /// rustc / ptxas name of the architecture, e.g. `sm_90a`.
    pub name: &'static str,
    /// The GPUs that run this module, each of which ptxas assembles it for (the driver
    /// compiles the PTX for the GPU it loads on: a kernel that spills on one of them is slow
    /// there).
    pub assembled_for: &'static [&'static str],
    /// Extra `-C target-feature`s, or "": the PTX ISA version where the target CPU's default
    /// lacks an instruction the module uses (sm_90a: vector `red`, PTX 8.1).
    pub features: &'static str,
}

/// The modules the host embeds: a portable Ampere+ one (A100, and the 99 KB-per-CTA sm_86 and
/// sm_89 GPUs) and a Hopper one (wgmma, TMA).
pub const ARCHES: [Arch; 2] =
    [Arch { name: "sm_80", assembled_for: &["sm_80", "sm_86", "sm_89"], features: "" }, Arch { name: "sm_90a", assembled_for: &["sm_90a"], features: "+ptx81" }];

/// Kernels whose names start with this prefix are hot: they must not spill.
pub const HOT_PREFIX: &str = "flash_";

/// Why a PTX build failed.
#[derive(Debug)]
pub enum PtxError {
    /// Running a tool failed or it exited non-zero.
    Tool { what: String, detail: String },
    /// The PTX references a function it does not define (a panic path, memcpy, ...).
    UnresolvedCall { arch: &'static str, symbols: Vec<String> },
    /// A hot kernel spills registers to local memory.
    Spills { arch: &'static str, kernels: Vec<String> },
    /// A kernel entry's name is not the one its configuration gives, or the module does not
    /// hold exactly the kernels the ABI lists ([`check_kernels`]).
    KernelIdentity { arch: &'static str, problems: Vec<String> },
    /// A kernel runs a warp-wide shuffle in thread-dependent control flow
    /// ([`divergence::divergent_shuffles`]): a hang where some lanes skip it.
    DivergentShuffle { arch: &'static str, sites: Vec<String> },
    /// ptxas put waits or fences of its own around a hot kernel's wgmma ([`check_wgmma`]).
    WgmmaWaits { arch: &'static str, kernels: Vec<String> },
}

impl fmt::Display for PtxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PtxError::Tool { what, detail } => write!(f, "{what} failed:\n{detail}"),
            PtxError::UnresolvedCall { arch, symbols } => write!(
                f,
                "{arch} PTX has unresolved `.extern .func` (keep panics, bounds checks and \
                 mem* calls out of device code): {}",
                symbols.join(", ")
            ),
            PtxError::Spills { arch, kernels } => {
                write!(f, "{arch}: hot kernels use local memory (spills or stack): {}", kernels.join(", "))
            }
            PtxError::KernelIdentity { arch, problems } => {
                write!(f, "{arch}: kernel entries do not match their configurations:\n  {}", problems.join("\n  "))
            }
            PtxError::DivergentShuffle { arch, sites } => write!(
                f,
                "{arch}: shuffles in thread-dependent control flow (LLVM moved a `pure` shuffle into a \
                 per-thread branch; see docs/DEVELOPING.md):\n  {}",
                sites.join("\n  ")
            ),
            PtxError::WgmmaWaits { arch, kernels } => write!(
                f,
                "{arch}: ptxas injected wgmma waits or fences, or serialized wgmma, in hot kernels \
                 (a register a wgmma writes or reads is used where ptxas cannot prove the wgmma done; \
                 see docs/DEVELOPING.md):\n  {}",
                kernels.join("\n  ")
            ),
        }
    }
}

impl std::error::Error for PtxError {}

/// Resource usage ptxas reported for one kernel.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KernelReport {
    /// Kernel (entry) name.
    pub name: String,
    /// Registers per thread.
    pub registers: u32,
    /// Bytes stored to local memory by spills.
    pub spill_stores: u32,
    /// Bytes loaded from local memory by spills.
    pub spill_loads: u32,
    /// Stack frame bytes (local arrays land here).
    pub stack_frame: u32,
    /// Static shared memory bytes.
    pub smem: u32,
    /// Functions the kernel calls (ptxas reports their properties after the kernel's): a call
    /// in a hot kernel is a function LLVM did not inline, whose registers live on a stack and
    /// across which ptxas serialises wgmma.
    pub callees: Vec<String>,
    /// The codes of ptxas's notes on the kernel's wgmma, one per note: a `warpgroup.wait` or
    /// `warpgroup.arrive` it injected (C7517, C7519), or wgmma it serialized.
    pub wgmma_notes: Vec<String>,
}

impl KernelReport {
    /// True for kernels that must never spill (see [`HOT_PREFIX`]).
    pub fn is_hot(&self) -> bool {
        self.name.starts_with(HOT_PREFIX)
    }
}

/// A device crate to compile: `kernels-gpu` itself (the modules the library ships), or a crate
/// built on it that declares its own forward entry points (`mma_forward_kernel!`,
/// `sm90_forward_kernel!`) with its own modifications, for `Gpu::load_custom_kernels`.
#[derive(Clone, Debug)]
pub struct DeviceCrate {
    /// The crate's folder (holds its `Cargo.toml`).
    pub dir: PathBuf,
    /// Its library's name (the package name with `_` for `-`): the compiled PTX is
    /// `<lib>-<hash>.s`.
    pub lib: String,
    /// True for `kernels-gpu`: its entries must be exactly [`Kernel::all`] ([`check_kernels`]).
    /// Else every marked entry must stand for a forward kernel of the ABI's tables
    /// ([`check_custom_kernels`]).
    pub shipped: bool,
}

impl DeviceCrate {
    /// The crate in folder `dir`, named by its `Cargo.toml`'s `[package] name`.
    pub fn at(dir: &Path) -> Result<DeviceCrate, PtxError> {
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).map_err(|e| io_err("reading the crate's Cargo.toml", e))?;
        let name = package_name(&manifest).ok_or_else(|| PtxError::Tool {
            what: "reading the crate's Cargo.toml".into(),
            detail: format!("no `name = \"...\"` under [package] in {}", dir.join("Cargo.toml").display()),
        })?;
        Ok(DeviceCrate { dir: dir.to_path_buf(), lib: name.replace('-', "_"), shipped: name == "kernels-gpu" })
    }
}

/// The `name` of a manifest's `[package]` table.
fn package_name(manifest: &str) -> Option<&str> {
    let package = manifest.split("\n[").find_map(|t| t.trim_start_matches('[').strip_prefix("package]"))?;
    let line = package.lines().find(|l| l.trim_start().starts_with("name") && l.contains('='))?;
    Some(line.split_once('=')?.1.trim().trim_matches('"'))
}

/// Where the built modules go.
pub struct Build {
    /// Workspace root (holds `kernels-gpu/`).
    pub root: PathBuf,
    /// Folder the PTX modules are written to (`<arch>.ptx`; a custom crate's under
    /// `<lib>/`).
    pub out_dir: PathBuf,
}

impl Build {
    /// Defaults for a workspace root: PTX under `target/ptx`.
    pub fn new(root: &Path) -> Self {
        Build { root: root.to_path_buf(), out_dir: root.join("target/ptx") }
    }

    /// `rustc -V` of the toolchain the device crate builds with (the one `rust-toolchain.toml`
    /// pins).
    pub fn toolchain(&self) -> Result<String, PtxError> {
        let mut cmd = pinned(Command::new("rustc"));
        cmd.current_dir(self.root.join("kernels-gpu")).arg("-V");
        Ok(run(&mut cmd, "rustc -V")?.trim().to_string())
    }

    /// `kernels-gpu`, the crate whose modules the library ships.
    pub fn shipped(&self) -> DeviceCrate {
        DeviceCrate { dir: self.root.join("kernels-gpu"), lib: "kernels_gpu".into(), shipped: true }
    }

    /// Path of `krate`'s module for `arch`.
    pub fn ptx_path(&self, krate: &DeviceCrate, arch: Arch) -> PathBuf {
        let dir = if krate.shipped { self.out_dir.clone() } else { self.out_dir.join(&krate.lib) };
        dir.join(format!("{}.ptx", arch.name))
    }

    /// Compiles `krate` for `arch`, writes [`Build::ptx_path`], rejects unresolved calls,
    /// divergent shuffles and entries that do not match their markers.
    pub fn build(&self, krate: &DeviceCrate, arch: Arch) -> Result<PathBuf, PtxError> {
        let target_dir = self.root.join("target/ptx-build").join(if krate.shipped { arch.name.to_string() } else { format!("{}/{}", krate.lib, arch.name) });
        // The target CPU and features go to every crate of the build (RUSTFLAGS), not only the
        // last: a crate built on kernels-gpu instantiates its Hopper bodies, which exist only
        // where kernels-gpu itself is compiled for sm_90a.
        let mut flags = format!("-C target-cpu={}", arch.name);
        if !arch.features.is_empty() {
            flags += &format!(" -C target-feature={}", arch.features);
        }
        let mut cmd = pinned(Command::new("cargo"));
        cmd.current_dir(&krate.dir)
            .env("RUSTFLAGS", flags)
            .args(["rustc", "--release", "--target", "nvptx64-nvidia-cuda", "-Zbuild-std=core"])
            .arg("--target-dir")
            .arg(&target_dir)
            .args(["--", "--emit=asm"])
            // Register tiles are arrays indexed by loop counters: they stay in registers only if
            // every such loop is fully unrolled, which LLVM's default threshold refuses for
            // bodies of hundreds of MMAs. Rust has no `#pragma unroll`, so raise the threshold.
            .args(["-C", "llvm-args=-unroll-threshold=100000"]);
        run(&mut cmd, &format!("cargo rustc ({}, {})", krate.lib, arch.name))?;

        let deps = target_dir.join("nvptx64-nvidia-cuda/release/deps");
        let asm = newest_with(&deps, &format!("{}-", krate.lib), ".s").ok_or_else(|| PtxError::Tool {
            what: "locating the PTX".into(),
            detail: format!("no {}-*.s in {}", krate.lib, deps.display()),
        })?;
        let ptx = std::fs::read_to_string(&asm).map_err(|e| io_err("reading PTX", e))?;
        let ptx = inject_entry_directives(&ptx).map_err(|detail| PtxError::Tool { what: "adding entry directives".into(), detail })?;
        let symbols = unresolved_calls(&ptx);
        if !symbols.is_empty() {
            return Err(PtxError::UnresolvedCall { arch: arch.name, symbols });
        }
        if krate.shipped { check_kernels(arch, &ptx)? } else { check_custom_kernels(arch, &ptx)? }
        let sites = divergence::divergent_shuffles(&ptx);
        if !sites.is_empty() {
            return Err(PtxError::DivergentShuffle { arch: arch.name, sites });
        }
        let out = self.ptx_path(krate, arch);
        std::fs::create_dir_all(out.parent().unwrap_or(&self.out_dir)).map_err(|e| io_err("creating PTX folder", e))?;
        // Rewrite only on change so that the host's build script does not rerun needlessly.
        if std::fs::read_to_string(&out).ok().as_deref() != Some(ptx.as_str()) {
            std::fs::write(&out, &ptx).map_err(|e| io_err("writing PTX", e))?;
        }
        Ok(out)
    }
}

/// `cmd` run by rustup's proxy under the toolchain `rust-toolchain.toml` pins, whatever
/// toolchain runs the xtask: the outer cargo's variables (toolchain, target, profile, flags)
/// would leak into the nested build and change what it compiles, so it starts clean.
fn pinned(mut cmd: Command) -> Command {
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        let leaks = (key.starts_with("CARGO_") && key != "CARGO_HOME")
            || matches!(
                key.as_str(),
                "RUSTC" | "RUSTDOC" | "RUSTFLAGS" | "RUSTC_WRAPPER" | "RUSTC_WORKSPACE_WRAPPER" | "RUSTUP_TOOLCHAIN" | "TARGET" | "HOST"
                    | "OUT_DIR" | "PROFILE" | "OPT_LEVEL" | "DEBUG" | "NUM_JOBS" | "RUSTC_LINKER" | "CARGO"
            );
        if leaks {
            cmd.env_remove(&key);
        }
    }
    cmd
}

fn io_err(what: &str, e: std::io::Error) -> PtxError {
    PtxError::Tool { what: what.into(), detail: e.to_string() }
}

fn run(cmd: &mut Command, what: &str) -> Result<String, PtxError> {
    let out = cmd.output().map_err(|e| io_err(what, e))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(PtxError::Tool { what: what.into(), detail: text })
    }
}

fn newest_with(dir: &Path, prefix: &str, suffix: &str) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with(prefix) && n.ends_with(suffix)
        })
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
        .map(|e| e.path())
}

/// Marker of a kernel that needs PTX performance-tuning directives on its `.entry` header
/// (`.maxntid`, `.minnctapersm`, `.maxnreg`), which rustc cannot emit: the kernel body carries
/// an inline-asm comment `// flashrs-entry-directives: <directives>` (e.g. `.maxntid 384, 1, 1
/// .minnctapersm 1`), and [`inject_entry_directives`] copies `<directives>` onto the header.
/// ptxas needs them for `setmaxnreg` (without a register budget known at entry it ignores the
/// instruction, C7508) and to keep register allocation within what the block size allows.
pub const ENTRY_DIRECTIVES_MARKER: &str = "// flashrs-entry-directives:";

/// Puts each kernel's [`ENTRY_DIRECTIVES_MARKER`] directives between its parameter list and
/// its body (`.entry name(...) <directives> {`). A kernel whose body holds the marker more than
/// once (inlined twice) must give the same directives each time. PTX without markers comes
/// back unchanged.
pub fn inject_entry_directives(ptx: &str) -> Result<String, String> {
    let lines: Vec<&str> = ptx.lines().collect();
    let mut out: Vec<String> = Vec::with_capacity(lines.len() + 8);
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let is_entry = line.trim_start().starts_with(".entry") || line.contains(" .entry ");
        if !is_entry {
            out.push(line.to_string());
            i += 1;
            continue;
        }
        // Header: from the `.entry` line to the line that opens the body.
        let Some(open) = (i..lines.len()).find(|&j| lines[j].trim() == "{") else {
            return Err(format!("no body after `{}`", line.trim()));
        };
        let Some(close) = (open..lines.len()).find(|&j| lines[j] == "}") else {
            return Err(format!("unterminated body of `{}`", line.trim()));
        };
        let mut found: Vec<&str> = lines[open..close]
            .iter()
            .filter_map(|l| l.trim().strip_prefix(ENTRY_DIRECTIVES_MARKER))
            .map(str::trim)
            .collect();
        found.dedup();
        if found.len() > 1 {
            return Err(format!("`{}` asks for different entry directives: {found:?}", line.trim()));
        }
        out.extend(lines[i..open].iter().map(|l| l.to_string()));
        if let Some(directives) = found.first() {
            out.push(directives.to_string());
        }
        i = open;
    }
    let mut text = out.join("\n");
    if ptx.ends_with('\n') {
        text.push('\n');
    }
    Ok(text)
}

/// Ties every kernel entry (`flash_*`) of the module built for `arch` to the configuration it
/// instantiates: its marker must name an instantiated [`Kernel`] whose derived name is the
/// entry's, and the module must hold every kernel of [`Kernel::all`] it should (the Hopper ones
/// in the sm_90a module only) and no other.
pub fn check_kernels(arch: Arch, ptx: &str) -> Result<(), PtxError> {
    let mut problems = Vec::new();
    let mut found = std::collections::HashSet::new();
    for (name, kernel) in marked_entries(ptx) {
        if !name.starts_with(HOT_PREFIX) {
            continue;
        }
        match kernel {
            None => problems.push(format!("{name}: no single kernel marker")),
            Some(k) if k.to_string() != name => problems.push(format!("{name}: instantiates {k:?}, which is named {k}")),
            Some(k) if !k.is_instantiated() => problems.push(format!("{name}: {k:?} is not in the ABI's tables")),
            Some(k) => {
                found.insert(k);
            }
        }
    }
    let hopper = arch.name == "sm_90a";
    for k in Kernel::all().filter(|k| hopper || !k.needs_sm90a()) {
        if !found.remove(&k) {
            problems.push(format!("{k}: listed by the ABI, missing from the module"));
        }
    }
    problems.extend(found.iter().map(|k| format!("{k}: in the module, not for this architecture")));
    if problems.is_empty() { Ok(()) } else { Err(PtxError::KernelIdentity { arch: arch.name, problems }) }
}

/// Ties every marked entry of a custom crate's module built for `arch` to a forward or
/// backward main kernel of the ABI's tables ([`Kernel::replaceable`]), whose launch geometry
/// and parameters the host plans; the Hopper ones in the sm_90a module only. Names are the crate's own; entries
/// without a single marker are not kernels the host launches (it skips them too), and pass.
pub fn check_custom_kernels(arch: Arch, ptx: &str) -> Result<(), PtxError> {
    let mut problems = Vec::new();
    let mut marked = 0;
    for (name, kernel) in marked_entries(ptx) {
        match kernel {
            Some(k) if k.replaceable() && (arch.name == "sm_90a" || !k.needs_sm90a()) => marked += 1,
            Some(k) => problems.push(format!("{name}: {k:?} is not a forward or backward main kernel of the ABI's tables for {}", arch.name)),
            None => {}
        }
    }
    if marked == 0 {
        problems.push("no entry declared with mma_forward_kernel!, sm90_forward_kernel! or mma_backward_kernel!".into());
    }
    if problems.is_empty() { Ok(()) } else { Err(PtxError::KernelIdentity { arch: arch.name, problems }) }
}

/// Names of functions the PTX declares `.extern` but never defines.
pub fn unresolved_calls(ptx: &str) -> Vec<String> {
    ptx.lines()
        .filter_map(|l| l.trim_start().strip_prefix(".extern .func"))
        .map(|rest| {
            // `.extern .func (.param ...) name(` or `.extern .func name(`
            let rest = rest.trim();
            let rest = if rest.starts_with('(') {
                rest.split_once(')').map(|(_, r)| r.trim()).unwrap_or(rest)
            } else {
                rest
            };
            rest.split(|c: char| c == '(' || c.is_whitespace()).next().unwrap_or("").to_string()
        })
        .collect()
}

/// The ptxas to use: `$PTXAS`, the project-local copy from `scripts/setup.sh`, or `ptxas` on PATH.
pub fn find_ptxas(root: &Path) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PTXAS") {
        return Some(PathBuf::from(p));
    }
    let local = root.join(".deps/bin/ptxas");
    if local.exists() {
        return Some(local);
    }
    Command::new("ptxas").arg("--version").output().ok().filter(|o| o.status.success())?;
    Some(PathBuf::from("ptxas"))
}

/// The version ptxas reports (`12.9.86` of `Cuda compilation tools, release 12.9, V12.9.86`).
pub fn ptxas_version(ptxas: &Path) -> Result<String, PtxError> {
    let text = run(Command::new(ptxas).arg("--version"), "ptxas --version")?;
    let version = text.lines().filter_map(|l| l.rsplit_once(", V")).map(|(_, v)| v.trim().to_string()).next();
    version.ok_or_else(|| PtxError::Tool { what: "reading the ptxas version".into(), detail: text })
}

/// What [`assemble`] did.
pub struct Assembled {
    /// Each kernel's resource usage.
    pub reports: Vec<KernelReport>,
    /// The cubin.
    pub cubin: PathBuf,
    /// False when the PTX and ptxas were those of the previous run, whose cubin and report
    /// were reused.
    pub ran: bool,
}

/// Assembles `ptx` for the GPU architecture `gpu` (one of an [`Arch`]'s `assembled_for`) with
/// `ptxas -v` into `<ptx>.<gpu>.cubin`, keeping ptxas's report next to it; when the PTX and
/// the ptxas version are those of the kept report, reuses the cubin and report instead.
pub fn assemble(ptxas: &Path, ptxas_version: &str, ptx: &Path, gpu: &str) -> Result<Assembled, PtxError> {
    let cubin = cubin_path(ptx, gpu);
    let kept = ptx.with_extension(format!("{gpu}.ptxas"));
    let text = std::fs::read(ptx).map_err(|e| io_err("reading PTX", e))?;
    let key = format!("ptx {} ptxas {ptxas_version}", ship::sha256_hex(&text));
    if let Ok(report) = std::fs::read_to_string(&kept)
        && report.lines().next() == Some(key.as_str())
        && cubin.exists()
    {
        return Ok(Assembled { reports: parse_ptxas(&report), cubin, ran: false });
    }
    let mut cmd = Command::new(ptxas);
    cmd.arg(format!("-arch={gpu}")).arg("-v").arg(ptx).arg("-o").arg(&cubin);
    let report = run(&mut cmd, &format!("ptxas ({gpu})"))?;
    std::fs::write(&kept, format!("{key}\n{report}")).map_err(|e| io_err("keeping the ptxas report", e))?;
    Ok(Assembled { reports: parse_ptxas(&report), cubin, ran: true })
}

/// Where [`assemble`] writes the cubin of `ptx` for `gpu`.
pub fn cubin_path(ptx: &Path, gpu: &str) -> PathBuf {
    ptx.with_extension(format!("{gpu}.cubin"))
}

/// Parses `ptxas -v` output into per-kernel reports.
pub fn parse_ptxas(text: &str) -> Vec<KernelReport> {
    let mut reports: Vec<KernelReport> = Vec::new();
    // Whether the properties being read are the last entry's own (not a callee's).
    let mut own = false;
    for line in text.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let name = rest.split('\'').next().unwrap_or("").to_string();
            reports.push(KernelReport { name, ..Default::default() });
            continue;
        }
        let Some(r) = reports.last_mut() else { continue };
        if let Some(f) = line.split("Function properties for ").nth(1) {
            let f = f.trim();
            own = f == r.name;
            if !own {
                r.callees.push(f.to_string());
            }
        } else if line.contains("bytes stack frame") {
            if own {
                r.stack_frame = number_before(line, "bytes stack frame");
                r.spill_stores = number_before(line, "bytes spill stores");
                r.spill_loads = number_before(line, "bytes spill loads");
            }
        } else if line.contains("Used") && line.contains("registers") {
            r.registers = number_before(line, "registers");
            r.smem = number_before(line, "bytes smem");
        }
    }
    // The notes name their function, and may come before its entry's report.
    for (function, code) in text.lines().filter_map(wgmma_note) {
        if let Some(r) = reports.iter_mut().find(|r| r.name == function) {
            r.wgmma_notes.push(code.to_string());
        }
    }
    reports
}

/// A ptxas note on a function's wgmma (`ptxas info : (C7517) warpgroup.wait is injected in
/// around line N by compiler to allow use of registers defined by GMMA in function 'f'`, the
/// same for `warpgroup.arrive`, or `... wgmma.mma_async instructions are serialized ...`): the
/// function and the note's code.
fn wgmma_note(line: &str) -> Option<(&str, &str)> {
    let about_wgmma = (line.contains("warpgroup.") && line.contains("injected")) || (line.contains("wgmma") && line.contains("serialized"));
    if !about_wgmma {
        return None;
    }
    let start = line.find("(C")? + 1;
    let code = &line[start..start + line[start..].find(')')?];
    let function = line.rsplit_once("function '")?.1.split('\'').next()?;
    Some((function, code))
}

fn number_before(line: &str, label: &str) -> u32 {
    line.split(label)
        .next()
        .and_then(|head| head.split([',', ':']).next_back())
        .and_then(|n| n.split_whitespace().last())
        .and_then(|n| n.parse().ok())
        .filter(|_| line.contains(label))
        .unwrap_or(0)
}

/// Fails when a hot kernel (with `every`, any kernel) spills, keeps a stack or calls a
/// function on `gpu`.
pub fn check_spills(gpu: &'static str, reports: &[KernelReport], every: bool) -> Result<(), PtxError> {
    let kernels: Vec<String> = reports
        .iter()
        // A stack frame in a hot kernel is a register array that went to local memory: as
        // slow as a spill even when ptxas does not call it one.
        .filter(|r| (every || r.is_hot()) && (r.spill_stores > 0 || r.spill_loads > 0 || r.stack_frame > 0 || !r.callees.is_empty()))
        .map(|r| {
            let calls = if r.callees.is_empty() { String::new() } else { format!(", calls {}", r.callees.join(", ")) };
            format!("{} ({} B spill stores, {} B spill loads, {} B stack{calls})", r.name, r.spill_stores, r.spill_loads, r.stack_frame)
        })
        .collect();
    if kernels.is_empty() { Ok(()) } else { Err(PtxError::Spills { arch: gpu, kernels }) }
}

/// Fails when ptxas reports a wgmma note ([`KernelReport::wgmma_notes`]) for a hot kernel on
/// `gpu`: an injected `warpgroup.wait` makes the warpgroup wait for every wgmma in flight (a
/// pipelined GEMM becomes a serial one), and no instruction count shows it.
pub fn check_wgmma(gpu: &'static str, reports: &[KernelReport]) -> Result<(), PtxError> {
    let kernels: Vec<String> = reports
        .iter()
        .filter(|r| r.is_hot() && !r.wgmma_notes.is_empty())
        .map(|r| format!("{} ({})", r.name, r.wgmma_notes.join(", ")))
        .collect();
    if kernels.is_empty() { Ok(()) } else { Err(PtxError::WgmmaWaits { arch: gpu, kernels }) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wgmma_notes_fail_hot_kernels_only() {
        let text = "ptxas info    : (C7517) warpgroup.wait is injected in around line 212516 by compiler to allow use of registers defined by GMMA in function 'flash_bwd_x'\n\
            ptxas info    : (C7519) warpgroup.arrive is injected in around line 9 by compiler to allow use of registers in GMMA in function 'probe_wgmma'\n\
            ptxas info    : Compiling entry function 'probe_wgmma' for 'sm_90a'\n\
            ptxas info    : Used 58 registers\n\
            ptxas info    : Compiling entry function 'flash_bwd_x' for 'sm_90a'\n\
            ptxas info    : Used 168 registers\n\
            ptxas info    : Compiling entry function 'flash_fwd_y' for 'sm_90a'\n\
            ptxas info    : Used 168 registers\n";
        let r = parse_ptxas(text);
        let notes: Vec<(&str, Vec<String>)> = r.iter().map(|r| (r.name.as_str(), r.wgmma_notes.clone())).collect();
        assert_eq!(notes, vec![("probe_wgmma", vec!["C7519".to_string()]), ("flash_bwd_x", vec!["C7517".to_string()]), ("flash_fwd_y", vec![])]);
        match check_wgmma("sm_90a", &r) {
            Err(PtxError::WgmmaWaits { kernels, .. }) => assert_eq!(kernels, vec!["flash_bwd_x (C7517)"]),
            other => panic!("{other:?}"),
        }
        assert!(check_wgmma("sm_90a", &r[..1]).is_ok());
    }

    #[test]
    fn finds_unresolved_calls() {
        let ptx = ".version 8.0\n.extern .func (.param .b32 r) memcpy(\n.param .b64 a\n);\n\
                   .extern .func _ZN4core9panicking5panic(\n.visible .entry k()\n";
        assert_eq!(unresolved_calls(ptx), vec!["memcpy", "_ZN4core9panicking5panic"]);
        assert!(unresolved_calls(".visible .func f()\n.visible .entry k()\n").is_empty());
    }

    #[test]
    fn injects_entry_directives_from_markers() {
        let ptx = ".version 8.0\n.visible .entry hot(\n\t.param .u32 hot_param_0\n)\n{\n\t.reg .b32 %r<2>;\n\
                   \t// begin inline asm\n\t// flashrs-entry-directives: .maxntid 384, 1, 1 .minnctapersm 1\n\
                   \t// end inline asm\n\tret;\n}\n\n.visible .entry cold()\n{\n\tret;\n}\n";
        let out = inject_entry_directives(ptx).unwrap();
        assert!(out.contains("\t.param .u32 hot_param_0\n)\n.maxntid 384, 1, 1 .minnctapersm 1\n{\n"), "{out}");
        // The unmarked kernel and everything else are untouched.
        assert_eq!(out.replacen(")\n.maxntid 384, 1, 1 .minnctapersm 1\n{", ")\n{", 1), ptx);
        assert_eq!(inject_entry_directives(".visible .entry k()\n{\n\tret;\n}\n").unwrap(), ".visible .entry k()\n{\n\tret;\n}\n");
        // The same marker twice (code inlined in two places) is one directive; two different ones are an error.
        let twice = ".entry k()\n{\n// flashrs-entry-directives: .maxnreg 128\n// flashrs-entry-directives: .maxnreg 128\n}\n";
        assert_eq!(inject_entry_directives(twice).unwrap().matches(".maxnreg 128\n{").count(), 1);
        let clash = ".entry k()\n{\n// flashrs-entry-directives: .maxnreg 128\n// flashrs-entry-directives: .maxnreg 64\n}\n";
        assert!(inject_entry_directives(clash).is_err());
    }

    /// A module whose entries carry the markers of `kernels`, named `names`.
    #[test]
    fn custom_crates_need_replaceable_kernels_of_the_tables_under_any_name() {
        let sm80 = ARCHES[0];
        let sm90 = ARCHES[1];
        let mut all = Kernel::all();
        let mma = all.find(|k| matches!(k, Kernel::Mma { .. } if k.mods())).unwrap();
        let hopper = Kernel::all().find(|k| matches!(k, Kernel::Sm90 { .. })).unwrap();
        let merge = Kernel::all().find(|k| matches!(k, Kernel::Merge { .. })).unwrap();
        let main = Kernel::all().find(|k| matches!(k, Kernel::Bwd { step: flashrs_abi::BwdStep::Main { accum: flashrs_abi::AccumLayout::Rows, .. }, .. }) && k.mods()).unwrap();
        let prep = Kernel::all().find(|k| matches!(k, Kernel::Bwd { step: flashrs_abi::BwdStep::Prep(_), .. })).unwrap();
        assert!(check_custom_kernels(sm80, &module(&[("my_bias_bwd".into(), Some(main))])).is_ok());
        assert!(matches!(check_custom_kernels(sm80, &module(&[("p".into(), Some(prep))])), Err(PtxError::KernelIdentity { .. })));
        let ok = module(&[("my_bias".into(), Some(mma)), ("helper".into(), None)]);
        assert!(check_custom_kernels(sm80, &ok).is_ok());
        let with_hopper = module(&[("my_bias".into(), Some(mma)), ("my_bias_h".into(), Some(hopper))]);
        assert!(check_custom_kernels(sm90, &with_hopper).is_ok());
        assert!(matches!(check_custom_kernels(sm80, &with_hopper), Err(PtxError::KernelIdentity { .. })), "Hopper entries in the sm_80 module");
        assert!(matches!(check_custom_kernels(sm80, &module(&[("m".into(), Some(merge))])), Err(PtxError::KernelIdentity { .. })));
        assert!(matches!(check_custom_kernels(sm80, &module(&[("helper".into(), None)])), Err(PtxError::KernelIdentity { .. })));
        let Kernel::Mma { dtype, kv: None, variant, config, flavor } = mma else { unreachable!() };
        let untabled = Kernel::Mma { dtype, kv: None, variant, config: flashrs_abi::TileConfig { block_n: 48, ..config }, flavor };
        assert!(matches!(check_custom_kernels(sm80, &module(&[("odd".into(), Some(untabled))])), Err(PtxError::KernelIdentity { .. })));
    }

    #[test]
    fn reads_the_package_name() {
        let manifest = "[workspace]\n\n[package]\nversion = \"0.1.0\"\nname = \"relative-bias-kernels\"\n\n[dependencies]\nname = \"no\"\n";
        assert_eq!(package_name(manifest), Some("relative-bias-kernels"));
        assert_eq!(package_name("[dependencies]\nname = \"x\"\n"), None);
    }

    fn module(entries: &[(String, Option<Kernel>)]) -> String {
        let mut ptx = String::from(".version 8.0\n");
        for (name, k) in entries {
            ptx += &format!(".visible .entry {name}(\n\t.param .align 8 .b8 {name}_param_0[256]\n)\n{{\n");
            if let Some(Kernel::Mma { dtype, kv, variant, config: c, flavor }) = k {
                ptx += &format!("\t// begin inline asm\n\t// flashrs-kernel: mma {} {} {} {} {} {} {} {} {}\n\t// end inline asm\n",
                    variant.code(), dtype.code(), c.head_dim, c.block_m, c.block_n, c.warps, c.stages, flavor.code(), flashrs_abi::Fp8::code(*kv));
            }
            if let Some(Kernel::Sm90 { dtype, inputs, varlen, paged, config: c, flavor }) = k {
                ptx += &format!("\t// flashrs-kernel: sm90 {} {} {} {} {} {} {} {} {} {}\n",
                    *varlen as u32 + 2 * *paged as u32, dtype.code(), c.head_dim, c.head_dim_v, c.block_n, c.stages, c.consumers, c.pipelined as u32, flavor.code(),
                    flashrs_abi::Fp8::code(*inputs));
            }
            if let Some(Kernel::Bwd { dtype, step }) = k {
                let c = match step {
                    flashrs_abi::BwdStep::Main { config: c, accum, .. } => [c.head_dim, c.block_m, c.block_n, c.stages, (*accum == flashrs_abi::AccumLayout::Fragments) as usize],
                    flashrs_abi::BwdStep::MainSm90 { config: c, varlen, .. } => [c.head_dim, c.block_m, c.block_n(), c.stages, *varlen as usize],
                    _ => [0; 5],
                };
                ptx += &format!("\t// flashrs-kernel: bwd {} {} {} {} {} {} {}\n", step.code(), dtype.code(), c[0], c[1], c[2], c[3], c[4]);
            }
            if let Some(Kernel::Merge { dtype }) = k {
                ptx += &format!("\t// flashrs-kernel: merge {}\n", dtype.code());
            }
            ptx += "\tret;\n}\n";
        }
        ptx
    }

    #[test]
    fn kernel_entries_must_match_their_markers_and_the_abi() {
        let sm80 = ARCHES[0];
        let mma: Vec<(String, Option<Kernel>)> = Kernel::all().filter(|k| !k.needs_sm90a()).map(|k| (k.to_string(), Some(k))).collect();
        assert!(check_kernels(sm80, &module(&mma)).is_ok());
        let all: Vec<(String, Option<Kernel>)> = Kernel::all().map(|k| (k.to_string(), Some(k))).collect();
        assert!(check_kernels(ARCHES[1], &module(&all)).is_ok());
        let problems = |entries: &[(String, Option<Kernel>)]| match check_kernels(sm80, &module(entries)) {
            Err(PtxError::KernelIdentity { problems, .. }) => problems,
            other => panic!("expected a mismatch, got {other:?}"),
        };
        // Hopper kernels do not belong in the sm_80 module.
        assert!(problems(&all).iter().any(|p| p.contains("not for this architecture")));
        // An entry named for one configuration that instantiates another.
        let mut swapped = mma.clone();
        let (a, b) = (swapped[0].1, swapped[1].1);
        (swapped[0].1, swapped[1].1) = (b, a);
        let p = problems(&swapped);
        assert_eq!(p.iter().filter(|p| p.contains("which is named")).count(), 2, "{p:?}");
        assert_eq!(p.iter().filter(|p| p.contains("missing from the module")).count(), 2, "{p:?}");
        // A missing entry, and an entry without its marker.
        assert!(problems(&mma[1..]).iter().any(|p| p.contains("missing from the module")));
        let mut unmarked = mma.clone();
        unmarked[3].1 = None;
        assert!(problems(&unmarked).iter().any(|p| p.contains("no single kernel marker")));
        // Entries that are not kernels (probes, upload) need no marker.
        let mut extra = mma.clone();
        extra.push(("probe_mma_m16n8k16".into(), None));
        assert!(check_kernels(sm80, &module(&extra)).is_ok());
    }

    #[test]
    fn parses_ptxas_verbose_output() {
        let text = "ptxas info    : 0 bytes gmem\n\
            ptxas info    : Compiling entry function 'flash_fwd_f16_d128' for 'sm_90a'\n\
            ptxas info    : Function properties for flash_fwd_f16_d128\n\
            \x20   8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n\
            ptxas info    : Used 255 registers, used 1 barriers, 16 bytes smem, 400 bytes cmem[0]\n\
            ptxas info    : Compiling entry function 'probe_mma' for 'sm_90a'\n\
            ptxas info    : Function properties for probe_mma\n\
            \x20   0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n\
            ptxas info    : Used 40 registers, used 0 barriers, 368 bytes cmem[0]\n";
        let r = parse_ptxas(text);
        assert_eq!(r.len(), 2);
        assert_eq!(
            r[0],
            KernelReport {
                name: "flash_fwd_f16_d128".into(),
                registers: 255,
                spill_stores: 4,
                spill_loads: 12,
                stack_frame: 8,
                smem: 16,
                callees: vec![],
                wgmma_notes: vec![]
            }
        );
        assert_eq!((r[1].registers, r[1].spill_stores, r[1].smem), (40, 0, 0));
        assert!(matches!(check_spills("sm_90a", &r, false), Err(PtxError::Spills { .. })));
        assert!(check_spills("sm_90a", &r[1..], false).is_ok());
    }

    #[test]
    fn a_callee_neither_hides_the_kernels_stack_nor_passes_the_gate() {
        // ptxas lists a function the kernel calls after the kernel, with its own (empty) frame.
        let text = "ptxas info    : Compiling entry function 'flash_bwd' for 'sm_90a'\n\
            ptxas info    : Function properties for flash_bwd\n\
            \x20   488 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n\
            ptxas info    : Used 168 registers, used 16 barriers, 488 bytes cumulative stack size\n\
            ptxas info    : Function properties for _RNCNvflash_bwd0B7_\n\
            \x20   0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n";
        let r = parse_ptxas(text);
        assert_eq!((r[0].stack_frame, r[0].callees.clone()), (488, vec!["_RNCNvflash_bwd0B7_".to_string()]));
        let mut called = r[0].clone();
        called.stack_frame = 0;
        assert!(matches!(check_spills("sm_90a", &[called], false), Err(PtxError::Spills { .. })));
    }
}
