#!/usr/bin/env bash
# Tests: bash scripts/test.sh [cargo test args...]
# Runs the set-up, builds the PTX and checks it with ptxas, checks the library docs (no rustdoc
# warnings), then runs every test of the workspace (this also compiles the no_run doc examples
# and the host/examples programs).
# Without a GPU, GPU tests report themselves skipped (cust::quick_init() gives NoDevice).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh   # sourced: exports PTXAS, NVDISASM and, without a driver, LD_LIBRARY_PATH
echo "==> cargo xtask build-ptx"
cargo xtask build-ptx
echo "==> cargo doc -p flashrs --no-deps (rustdoc warnings denied)"
RUSTDOCFLAGS="${RUSTDOCFLAGS:+$RUSTDOCFLAGS }-Dwarnings" cargo doc -p flashrs --no-deps
echo "==> cargo test --workspace --release $*"
cargo test --workspace --release "$@"
