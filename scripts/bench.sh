#!/usr/bin/env bash
# Benchmarks: bash scripts/bench.sh [benchmark args...]  (e.g. --help)
# Runs the set-up first, so it works on a fresh clone; extra args go to `flashrs benchmark`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh   # sourced: exports PTXAS, NVDISASM and, without a driver, LD_LIBRARY_PATH
exec cargo run --release -- benchmark "$@"
