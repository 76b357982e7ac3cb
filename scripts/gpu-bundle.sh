#!/usr/bin/env bash
# Packs everything that runs on a GPU into one archive, for a GPU host without Rust:
#   bash scripts/gpu-bundle.sh [ARCHIVE]      (default target/gpu-bundle.tar.xz)
# The archive holds the release test binaries (bin/tests/<name>), the examples
# (bin/examples/<name>), the command line (bin/flashrs), all stripped, the relative_bias
# example's own kernels (ptx/relative_bias_kernels/), and run.sh. On the GPU
# host, unpack it and run
#   bash run.sh [LOG]    every GPU test suite with FLASHRS_REQUIRE_GPU=1 (a skip fails), then
#                        every example; a summary line per suite, the full output in LOG.
# The binaries need only the NVIDIA driver: the kernels are inside them.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
archive=$(realpath -m "${1:-$root/target/gpu-bundle.tar.xz}")
cd "$root"
source scripts/setup.sh >/dev/null
stage=$root/target/gpu-bundle
rm -rf "$stage" && mkdir -p "$stage/bin/tests" "$stage/bin/examples" "$stage/ptx"
cargo xtask build-ptx --crate host/examples/relative_bias_kernels >/dev/null
cp -r target/ptx/relative_bias_kernels "$stage/ptx/"
json=$(mktemp)
trap 'rm -f "$json"' EXIT
cargo test --workspace --release --no-run --message-format=json >"$json"
cargo build --release -p flashrs --examples --features cudarc,cudarc/cuda-12080 --message-format=json >>"$json"
cargo build --release -p flashrs-cli --message-format=json >>"$json"
python3 - "$json" "$stage" <<'PY'
import json, shutil, sys
src, stage = sys.argv[1], sys.argv[2]
for line in open(src):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    t, exe = m.get("target", {}), m.get("executable")
    if m.get("reason") != "compiler-artifact" or not exe:
        continue
    kind = t.get("kind", [])
    # Integration tests of the tests crate and the library; the CLI binary; the examples.
    if "test" in kind and m["package_id"].split("#")[0].rstrip("/").split("/")[-1] in ("tests", "host"):
        shutil.copy2(exe, f"{stage}/bin/tests/{t['name']}")
    elif "example" in kind:
        shutil.copy2(exe, f"{stage}/bin/examples/{t['name']}")
    elif "bin" in kind and t["name"] == "flashrs":
        shutil.copy2(exe, f"{stage}/bin/flashrs")
PY
strip "$stage"/bin/flashrs "$stage"/bin/tests/* "$stage"/bin/examples/*
cat >"$stage/run.sh" <<'RUN'
#!/usr/bin/env bash
# Every GPU test suite (a skip fails), then every example. Exit status: the number of failures.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
log=${1:-$here/run.log}; : >"$log"
export FLASHRS_REQUIRE_GPU=1 FLASHRS_CUSTOM_PTX_DIR=$here/ptx/relative_bias_kernels
failed=0
for t in "$here"/bin/tests/*; do
  start=$(date +%s)
  "$t" --nocapture >>"$log" 2>&1; rc=$?
  [[ $rc == 0 ]] || failed=$((failed + 1))
  echo "== $(basename "$t") rc=$rc $(( $(date +%s) - start ))s $(grep -a '^test result' "$log" | tail -n 1)"
done
for e in "$here"/bin/examples/*; do
  "$e" >>"$log" 2>&1; rc=$?
  [[ $rc == 0 ]] || failed=$((failed + 1))
  echo "== example $(basename "$e") rc=$rc"
done
echo "== skipped: $(grep -a -c '^SKIPPED' "$log"), failed: $failed"
exit "$failed"
RUN
tar -C "$stage" -cJf "$archive" bin ptx run.sh
echo "gpu-bundle.sh: $archive ($(du -h "$archive" | cut -f1)): $(ls "$stage/bin/tests" | wc -l) test binaries, $(ls "$stage/bin/examples" | wc -l) examples, bin/flashrs"
