#!/usr/bin/env bash
# Installs what building, testing and benchmarking need, all project-local except the Rust toolchains:
#   - the nightly pinned in rust-toolchain.toml, with rust-src (for -Zbuild-std=core on nvptx64);
#   - the stable Rust of Cargo.toml's rust-version (the library's dependents' oldest);
#   - ptxas + nvdisasm from NVIDIA's PyPI wheels, under .deps/tools (links in .deps/bin);
#   - libcuda.so under .deps/cuda/lib64, where .cargo/config.toml points cust_raw's link step.
# Idempotent: a step runs only when its result is missing, so a second run takes a moment.
#
#   bash scripts/setup.sh      installs only.
#   . scripts/setup.sh         installs, then exports PTXAS, NVDISASM and (no driver) LD_LIBRARY_PATH
#                              in the current shell; bench.sh and test.sh do this.

_flashrs_root=$(cd -P "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# True when the machine has a real NVIDIA driver; prints its libcuda.so.1.
_flashrs_driver_libcuda() {
  PATH=$PATH:/sbin:/usr/sbin ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 .*x86-64/ {print $NF; f=1; exit} END {exit !f}'
}

if [[ "${BASH_SOURCE[0]}" != "$0" ]]; then
  # Sourced: do the installing in a child bash, so strict mode and `exit` stay out of the caller's shell.
  bash "${BASH_SOURCE[0]}" || { echo "setup.sh: set-up failed (see above)" >&2; return 1; }
  export PTXAS=$_flashrs_root/.deps/bin/ptxas NVDISASM=$_flashrs_root/.deps/bin/nvdisasm
  # Without a driver, binaries load the Debian libcuda copy at start-up (cust::quick_init() then
  # says NoDevice and GPU tests skip). With a driver it must NOT be on the path: it would shadow the driver's.
  if ! _flashrs_driver_libcuda >/dev/null; then
    case ":${LD_LIBRARY_PATH:-}:" in *":$_flashrs_root/.deps/cuda/lib64:"*) ;;
      *) export LD_LIBRARY_PATH=$_flashrs_root/.deps/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} ;; esac
  fi
  return 0
fi

set -euo pipefail
cd "$_flashrs_root"
die() { echo "setup.sh: ERROR: $*" >&2; exit 1; }
step() { echo "setup.sh: $*"; }
tmp=""
trap '[[ -n $tmp ]] && rm -rf "$tmp"' EXIT
# Runs a noisy command with its output kept aside, shown only if it fails.
quiet() { local log; log=$(mktemp); if ! "$@" >"$log" 2>&1; then cat "$log" >&2; rm -f "$log"; die "failed: $*"; fi; rm -f "$log"; }

# --- Rust: the pinned nightly. RUSTUP_AUTO_INSTALL=0 on these machines, so install it explicitly.
command -v rustup >/dev/null || die "rustup not found on PATH; install rustup (https://rustup.rs), then re-run."
channel=$(sed -n 's/^[[:space:]]*channel[[:space:]]*=[[:space:]]*"\([^"]*\)".*/\1/p' rust-toolchain.toml)
[[ -n $channel ]] || die "no channel found in rust-toolchain.toml"
if ! sysroot=$(rustup run "$channel" rustc --print sysroot 2>/dev/null); then
  step "installing Rust $channel (minimal + rust-src)"
  quiet rustup toolchain install "$channel" --profile minimal -c rust-src
elif [[ ! -d $sysroot/lib/rustlib/src/rust/library ]]; then
  step "adding rust-src to $channel"
  quiet rustup component add rust-src --toolchain "$channel"
fi

# --- Rust: the oldest stable the library supports (rust-version), which the tests build it with
# as a dependent would.
msrv=$(sed -n 's/^rust-version *= *"\(.*\)"/\1/p' Cargo.toml)
[[ -n $msrv ]] || die "no rust-version found in Cargo.toml"
if ! rustup run "$msrv" rustc --version >/dev/null 2>&1; then
  step "installing Rust $msrv (minimal)"
  quiet rustup toolchain install "$msrv" --profile minimal
fi

# --- ptxas / nvdisasm: single files out of NVIDIA's PyPI wheels (no CUDA install needed).
fetch_wheel_file() {  # <pip requirement> <path inside the wheel>
  [[ -x .deps/tools/$2 ]] && return 0
  command -v python3 >/dev/null || die "python3 (with pip) is needed to fetch $1"
  step "fetching $2 from PyPI ($1)"
  tmp=$(mktemp -d)
  quiet python3 -m pip download --no-deps --disable-pip-version-check -q -d "$tmp" "$1"
  python3 - "$tmp" "$2" <<'EOF' || die "could not extract $2 from the $1 wheel"
import glob, sys, zipfile
tmp, member = sys.argv[1], sys.argv[2]
zipfile.ZipFile(glob.glob(tmp + "/*.whl")[0]).extract(member, ".deps/tools")
EOF
  chmod +x ".deps/tools/$2"
  rm -rf "$tmp"; tmp=""
  step "  -> .deps/tools/$2"
}
fetch_wheel_file nvidia-cuda-nvcc-cu12==12.9.86 nvidia/cuda_nvcc/bin/ptxas
fetch_wheel_file nvidia-cuda-nvdisasm==13.5.37 nvidia/cu13/bin/nvdisasm
# Stable names for the xtask ($PTXAS / $NVDISASM point here); relative links survive moving the repo.
mkdir -p .deps/bin
ln -sfn ../tools/nvidia/cuda_nvcc/bin/ptxas .deps/bin/ptxas
ln -sfn ../tools/nvidia/cu13/bin/nvdisasm .deps/bin/nvdisasm

# --- libcuda.so for cust_raw's link step (CUDA_LIBRARY_PATH=.deps/cuda, set in .cargo/config.toml).
lib=.deps/cuda/lib64
mkdir -p "$lib"
if drv=$(_flashrs_driver_libcuda); then
  # A real driver: link against it, and drop any Debian copy left from a driverless machine.
  if [[ $(readlink "$lib/libcuda.so" || true) != "$drv" ]]; then
    step "linking $lib/libcuda.so to the driver's $drv"
    rm -f "$lib"/libcuda.so*
    ln -s "$drv" "$lib/libcuda.so"
    ln -s "$drv" "$lib/libcuda.so.1"
  fi
elif [[ $(readlink -f "$lib/libcuda.so.1" 2>/dev/null) != "$PWD/$lib/"* || ! -e $lib/libcuda.so ]]; then
  # No driver: take libcuda from Debian non-free's libcuda1, with private apt options so the
  # system's apt configuration and lists stay untouched.
  command -v apt-get >/dev/null || die "no NVIDIA driver and no apt-get: put libcuda.so and libcuda.so.1 in $lib by hand"
  step "fetching libcuda from Debian non-free (libcuda1) into $lib"
  tmp=$(mktemp -d)
  chmod 755 "$tmp"  # apt downloads as user _apt
  mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm non-free" >"$tmp/sources.list"
  o=(-oDir::Etc::SourceList="$tmp/sources.list" -oDir::Etc::SourceParts=/dev/null -oDir::State::Lists="$tmp/lists" -oDir::Cache="$tmp/cache")
  quiet apt-get "${o[@]}" update
  (cd "$tmp" && quiet apt-get "${o[@]}" download libcuda1)
  dpkg -x "$tmp"/libcuda1_*.deb "$tmp/x" || die "dpkg -x of libcuda1 failed"
  so=$(ls "$tmp"/x/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.5* 2>/dev/null | head -n1)
  [[ -n $so ]] || die "libcuda.so.5* not found in the libcuda1 package"
  rm -f "$lib"/libcuda.so*
  cp "$so" "$lib/"
  ln -s "$(basename "$so")" "$lib/libcuda.so.1"
  ln -s "$(basename "$so")" "$lib/libcuda.so"
  rm -rf "$tmp"; tmp=""
  step "  -> $lib/$(basename "$so")"
fi
