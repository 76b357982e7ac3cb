//! The kernels the library ships: compressed PTX and cubins under `host/kernels/`, and the
//! manifest that ties them to the sources they were built from.
//!
//! The library embeds these files instead of compiling `kernels-gpu` when it is built, so a
//! dependent builds it on stable Rust with no nightly, `rust-src`, CUDA toolkit or nested
//! build. The price is that the files must be regenerated (`cargo xtask build-ptx`) whenever
//! the kernel sources change; [`sources_digest`] tells when they have (a test fails on a stale
//! manifest, and CI rebuilds everything with `cargo xtask build-ptx --check` and compares).
//!
//! Manifest format (`host/kernels/MANIFEST`), one `key value...` per line:
//!
//! ```text
//! sources <sha256 of the kernel sources>
//! toolchain <rustc -V of the pinned toolchain>
//! ptxas <ptxas version>
//! file <name> <uncompressed bytes> <sha256 of the uncompressed bytes>
//! ```
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// What the shipped kernels are built from, relative to the workspace root: everything that
/// changes the PTX (the device crate, the ABI crate, the toolchain, and the entry-directive
/// rewriting in this crate).
pub const SOURCES: &[&str] =
    &["kernels-gpu/Cargo.toml", "kernels-gpu/Cargo.lock", "kernels-gpu/src", "abi/Cargo.toml", "abi/src", "rust-toolchain.toml", "xtask/src/lib.rs"];

/// Folder of the shipped kernels, relative to the workspace root.
pub const SHIP_DIR: &str = "host/kernels";

/// zstd level of the shipped files: the files are written rarely and read at every start, so
/// compress hard (decoding speed barely depends on the level).
const LEVEL: i32 = 19;

/// Hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::with_capacity(2 * bytes.len()), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Digest of [`SOURCES`] under `root`: sha256 over each file's relative path and contents (CRLF
/// read as LF, so a Windows checkout agrees), in path order.
pub fn sources_digest(root: &Path) -> std::io::Result<String> {
    let mut files = Vec::new();
    for s in SOURCES {
        collect(&root.join(s), &mut files)?;
    }
    files.sort();
    let mut h = Sha256::new();
    for f in files {
        let rel = f.strip_prefix(root).unwrap_or(&f).to_string_lossy().replace('\\', "/");
        let text = std::fs::read(&f)?;
        let text: Vec<u8> = text.iter().enumerate().filter(|&(i, &b)| !(b == b'\r' && text.get(i + 1) == Some(&b'\n'))).map(|(_, &b)| b).collect();
        h.update(rel.as_bytes());
        h.update([0]);
        h.update((text.len() as u64).to_le_bytes());
        h.update(&text);
    }
    Ok(hex(&h.finalize()))
}

fn collect(path: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    if path.is_dir() {
        for e in std::fs::read_dir(path)? {
            collect(&e?.path(), out)?;
        }
    } else {
        out.push(path.to_path_buf());
    }
    Ok(())
}

/// One shipped file, uncompressed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// File name without the `.zst` (`sm_80.ptx`, `sm_86.cubin`, ...).
    pub name: String,
    /// Uncompressed size.
    pub bytes: usize,
    /// sha256 of the uncompressed contents.
    pub sha256: String,
}

/// The manifest of the shipped kernels.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Manifest {
    /// [`sources_digest`] of the sources they were built from.
    pub sources: String,
    /// The toolchain that compiled the PTX.
    pub toolchain: String,
    /// The ptxas that assembled the cubins.
    pub ptxas: String,
    /// The files.
    pub files: Vec<Entry>,
}

impl Manifest {
    /// Parses a manifest; `None` when a line is malformed.
    pub fn parse(text: &str) -> Option<Manifest> {
        let mut m = Manifest::default();
        for line in text.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')) {
            let (key, rest) = line.split_once(' ')?;
            match key {
                "sources" => m.sources = rest.to_string(),
                "toolchain" => m.toolchain = rest.to_string(),
                "ptxas" => m.ptxas = rest.to_string(),
                "file" => {
                    let mut w = rest.split(' ');
                    let (name, bytes, sha256) = (w.next()?, w.next()?.parse().ok()?, w.next()?);
                    m.files.push(Entry { name: name.into(), bytes, sha256: sha256.into() });
                }
                _ => return None,
            }
        }
        Some(m)
    }

    /// The manifest's text.
    pub fn render(&self) -> String {
        let mut s = String::from("# The kernels under this folder, written by `cargo xtask build-ptx`: do not edit.\n");
        let _ = writeln!(s, "sources {}\ntoolchain {}\nptxas {}", self.sources, self.toolchain, self.ptxas);
        for f in &self.files {
            let _ = writeln!(s, "file {} {} {}", f.name, f.bytes, f.sha256);
        }
        s
    }

    /// Reads `<root>/host/kernels/MANIFEST`.
    pub fn read(root: &Path) -> Option<Manifest> {
        Manifest::parse(&std::fs::read_to_string(root.join(SHIP_DIR).join("MANIFEST")).ok()?)
    }

    /// How `self` (what a fresh build gives) differs from `shipped`, one line per difference.
    pub fn differences(&self, shipped: &Manifest) -> Vec<String> {
        let mut d = Vec::new();
        for (what, new, old) in [("sources", &self.sources, &shipped.sources), ("toolchain", &self.toolchain, &shipped.toolchain), ("ptxas", &self.ptxas, &shipped.ptxas)] {
            if new != old {
                d.push(format!("{what}: built from {new}, shipped from {old}"));
            }
        }
        for f in &self.files {
            match shipped.files.iter().find(|s| s.name == f.name) {
                Some(s) if s == f => {}
                Some(s) => d.push(format!("{}: built {} bytes sha256 {}, shipped {} bytes sha256 {}", f.name, f.bytes, f.sha256, s.bytes, s.sha256)),
                None => d.push(format!("{}: not shipped", f.name)),
            }
        }
        d.extend(shipped.files.iter().filter(|s| !self.files.iter().any(|f| f.name == s.name)).map(|s| format!("{}: shipped, no longer built", s.name)));
        d
    }
}

/// Writes `files` (name, uncompressed contents) compressed into `<root>/host/kernels/` with
/// their manifest, rewriting only the files whose contents changed (and removing shipped files
/// no longer built). Returns what it rewrote.
pub fn write(root: &Path, manifest: &Manifest, files: &[(String, Vec<u8>)]) -> std::io::Result<Vec<String>> {
    let dir = root.join(SHIP_DIR);
    std::fs::create_dir_all(&dir)?;
    let old = Manifest::read(root).unwrap_or_default();
    let mut written = Vec::new();
    for ((name, bytes), entry) in files.iter().zip(&manifest.files) {
        let path = dir.join(format!("{name}.zst"));
        if path.exists() && old.files.contains(entry) {
            continue;
        }
        std::fs::write(&path, zstd::bulk::compress(bytes, LEVEL)?)?;
        written.push(name.clone());
    }
    for gone in old.files.iter().filter(|o| !manifest.files.iter().any(|f| f.name == o.name)) {
        let _ = std::fs::remove_file(dir.join(format!("{}.zst", gone.name)));
    }
    let text = manifest.render();
    if std::fs::read_to_string(dir.join("MANIFEST")).ok().as_deref() != Some(text.as_str()) {
        std::fs::write(dir.join("MANIFEST"), text)?;
        written.push("MANIFEST".into());
    }
    Ok(written)
}

/// The manifest entry of `name` with contents `bytes`.
pub fn entry(name: &str, bytes: &[u8]) -> Entry {
    Entry { name: name.into(), bytes: bytes.len(), sha256: sha256_hex(bytes) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_round_trips_and_names_differences() {
        let m = Manifest {
            sources: "ab".into(),
            toolchain: "rustc 1.0".into(),
            ptxas: "12.9".into(),
            files: vec![entry("sm_80.ptx", b"x"), entry("sm_86.cubin", b"y")],
        };
        assert_eq!(Manifest::parse(&m.render()), Some(m.clone()));
        assert!(m.differences(&m).is_empty());
        let mut other = m.clone();
        other.files[1] = entry("sm_86.cubin", b"z");
        other.sources = "cd".into();
        let d = m.differences(&other);
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(d[0].starts_with("sources") && d[1].starts_with("sm_86.cubin"));
        assert!(Manifest::parse("file a b c").is_none());
    }

    /// The shipped kernels were built from the sources in this checkout: after a change to the
    /// device code, the ABI or the toolchain, `cargo xtask build-ptx` must run again.
    #[test]
    fn shipped_kernels_match_the_sources() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let shipped = Manifest::read(root).expect("host/kernels/MANIFEST missing or malformed: run `cargo xtask build-ptx`");
        let digest = sources_digest(root).unwrap();
        assert_eq!(
            shipped.sources, digest,
            "the kernels in host/kernels were built from other sources than this checkout's: run `cargo xtask build-ptx`"
        );
        for f in &shipped.files {
            let path = root.join(SHIP_DIR).join(format!("{}.zst", f.name));
            let bytes = zstd::bulk::decompress(&std::fs::read(&path).unwrap(), f.bytes).unwrap();
            assert_eq!(entry(&f.name, &bytes), *f, "{} does not hold what the manifest says", path.display());
        }
    }
}
