#!/usr/bin/env bash
# Builds flashrs as a dependent crate would: a scratch crate outside the repository, on the
# oldest Rust the library supports (rust-version in Cargo.toml; a stable release), with neither
# the repository's cargo configuration nor its nightly. Two dependents:
#   cudarc: only the `cudarc` feature, built and run with no CUDA library anywhere in reach
#           (its binary must not link libcuda; without a driver it plans a call and says so);
#   cust:   the default features, with CUDA_LIBRARY_PATH as the README tells dependents.
#   bash scripts/dependent.sh            (test.sh runs it)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$root/scripts/setup.sh"   # the Rust it checks, and (no driver) a libcuda for the cust binary to start
msrv=$(sed -n 's/^rust-version *= *"\(.*\)"/\1/p' "$root/Cargo.toml")
work=${FLASHRS_DEPENDENT_DIR:-$root/target/dependent}
mkdir -p "$work"
# A copy outside the workspace, so that nothing of the repository's configuration applies.
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
cp -r "$root/host" "$src/flashrs"
cp -r "$root/abi" "$src/flashrs-abi"
rm -rf "$src/flashrs/cli" "$src/flashrs/target"
# Workspace-inherited fields become plain values; the path to the ABI crate follows the copy.
version=$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$root/Cargo.toml" | head -n1)
for toml in "$src/flashrs/Cargo.toml" "$src/flashrs/reference/Cargo.toml" "$src/flashrs-abi/Cargo.toml"; do
  sed -i -e "s/^version.workspace = true/version = \"$version\"/" -e 's/^edition.workspace = true/edition = "2024"/' \
    -e 's/^license.workspace = true/license = "MIT OR Apache-2.0"/' -e "s/^rust-version.workspace = true/rust-version = \"$msrv\"/" \
    -e 's|path = "../abi"|path = "../flashrs-abi"|' "$toml"
done

shopt -u patsub_replacement 2>/dev/null || true  # `&` in a replacement is a plain `&`
make_crate() {  # <name> <flashrs dependency line> <extra dependency lines> <main.rs>
  mkdir -p "$src/$1/src"
  printf '[package]\nname = "%s"\nversion = "0.1.0"\nedition = "2024"\n\n[dependencies]\n%s\n%s\n' "$1" "$2" "$3" >"$src/$1/Cargo.toml"
  printf '%s\n' "$4" >"$src/$1/src/main.rs"
}

plan_main='fn main() {
    // Planning needs no GPU: the kernel an H100 would run for a GQA decode call.
    let p = flashrs::AttentionParams::builder().batch(8).seqlen_q(1).seqlen_k(32768).heads_q(32).heads_kv(8).head_dim(128).build().unwrap();
    let n = p.contiguous_lens().unwrap();
    let r = |i: u64, len: usize| flashrs::BufferRef::new(i << 40, len);
    let bufs = flashrs::Buffers::new(flashrs::DType::Bf16, r(1, n.q), r(2, n.k), r(3, n.v), r(4, n.out));
    println!("H100 plan: {}", p.plan(&bufs, &flashrs::Target::H100).unwrap().kernel);
    OPEN
}'
cudarc_open='// SAFETY: only probes whether the driver library loads.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return println!("no CUDA driver library here: planning only");
    }
    let ctx = cudarc::driver::CudaContext::new(0);
    println!("GPU: {:?}", ctx.map(|c| flashrs::Gpu::from_cudarc(&c).map(|g| g.image().name)));'
cust_open='println!("GPU: {:?}", flashrs::Gpu::new(0).map(|g| g.image().name));'

make_crate dep-cudarc 'flashrs = { path = "../flashrs", default-features = false, features = ["cudarc", "nccl"] }' \
  'cudarc = { version = "0.19", default-features = false, features = ["std", "driver", "cuda-12080", "dynamic-loading"] }' \
  "${plan_main/OPEN/$cudarc_open}"
make_crate dep-cust 'flashrs = { path = "../flashrs" }' '' "${plan_main/OPEN/$cust_open}"

build() {  # <crate> <env...>
  local crate=$1; shift
  echo "dependent.sh: $crate on Rust $msrv"
  (cd "$src/$crate" && env -u RUSTUP_TOOLCHAIN -u CARGO_TARGET_DIR "$@" cargo "+$msrv" build --quiet --release --target-dir "$work")
}
# No CUDA in reach: no CUDA_LIBRARY_PATH, no library path, no toolkit folders consulted.
build dep-cudarc -u CUDA_LIBRARY_PATH -u LD_LIBRARY_PATH -u LIBRARY_PATH
if ldd "$work/release/dep-cudarc" | grep -q libcuda; then
  echo "dependent.sh: the cudarc-only binary links libcuda" >&2; exit 1
fi
env -u LD_LIBRARY_PATH "$work/release/dep-cudarc"
build dep-cust CUDA_LIBRARY_PATH="$root/.deps/cuda"
"$work/release/dep-cust"
echo "dependent.sh: both dependents build on Rust $msrv"
