#!/usr/bin/env bash
# Tests: bash scripts/test.sh [cargo test args...]
# Runs the set-up; rebuilds the kernels and checks that they are the ones the library ships
# (host/kernels, byte for byte) and that no hot kernel spills; builds the relative_bias example's
# device crate (a crate built on kernels-gpu) with the same checks; builds the library as a dependent
# would, on stable Rust without CUDA (scripts/dependent.sh); checks the library docs (no rustdoc
# warnings); then runs every test of the workspace (this also compiles the doc examples and the
# examples programs). Without a GPU, GPU tests report themselves skipped.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh   # sourced: exports PTXAS, NVDISASM and, without a driver, LD_LIBRARY_PATH
echo "==> cargo xtask build-ptx --check"
cargo xtask build-ptx --check
echo "==> cargo xtask build-ptx --crate host/examples/relative_bias_kernels"
cargo xtask build-ptx --crate host/examples/relative_bias_kernels
echo "==> scripts/dependent.sh"
bash scripts/dependent.sh
echo "==> cargo doc -p flashrs --no-deps --features cudarc,nccl (rustdoc warnings denied)"
RUSTDOCFLAGS="${RUSTDOCFLAGS:+$RUSTDOCFLAGS }-Dwarnings" cargo doc -p flashrs --no-deps --features cudarc,nccl,cudarc/cuda-12080
echo "==> cargo test --workspace --release $*"
cargo test --workspace --release "$@"
