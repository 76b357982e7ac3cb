#!/usr/bin/env bash
# compute-sanitizer over the forward and backward kernels: memcheck, racecheck and synccheck, each over the
# prebuilt `sanitize_shapes` test binary (tests/tests/sanitize_shapes.rs: every tile config,
# both dtypes, ragged / causal / GQA / edge shapes). Fails if any tool reports an error, if a
# test fails, or if the binary found no GPU (nothing would have been checked).
#
# Two steps, because the GPU host may have no Rust:
#   bash scripts/sanitize.sh --build DIR [TEST...]
#       (where Rust is) builds the test binaries (default: sanitize_shapes) and copies them to
#       DIR/<test>. Name more tests (invalid_input numerics determinism ...) to add them.
#   bash scripts/sanitize.sh DIR [-- TEST-BINARY-ARGS...]
#       (GPU host, CUDA's compute-sanitizer on PATH or under $CUDA_HOME / /usr/local/cuda)
#       runs each tool over DIR/sanitize_shapes (or DIR/sanitize_shapes-<hash>, cargo's name)
#       with --test-threads=1. Logs go to
#       $SANITIZE_LOG_DIR (default: $OUT/sanitize-logs if $OUT is set, else ./sanitize-logs).
#
# Environment: SANITIZE_TOOLS (default "memcheck racecheck synccheck"; initcheck also works),
# SANITIZE_STRICT=1 to fail on racecheck warnings too (errors always fail).
set -euo pipefail
root=$(cd -P "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
die() { echo "sanitize.sh: ERROR: $*" >&2; exit 1; }

if [[ ${1:-} == --build ]]; then
  [[ $# -ge 2 ]] || die "usage: $0 --build DIR [TEST...]"
  dir=$2; shift 2
  tests=("$@"); [[ ${#tests[@]} -gt 0 ]] || tests=(sanitize_shapes)
  mkdir -p "$dir"
  cd "$root"
  # shellcheck disable=SC1091
  source scripts/setup.sh
  args=(); for t in "${tests[@]}"; do args+=(--test "$t"); done
  if ! cargo test --release -p flashrs-tests "${args[@]}" --no-run --message-format=json >"$dir/.build.json"; then
    python3 -c 'import json, sys
for l in open(sys.argv[1]):
    try: m = json.loads(l)
    except ValueError: continue
    if m.get("reason") == "compiler-message" and m["message"]["level"] == "error": print(m["message"]["rendered"])' "$dir/.build.json" >&2 || true
    die "cargo build failed"
  fi
  python3 - "$dir" "${tests[@]}" <<'EOF' || die "could not find the built test binaries"
import json, shutil, sys
dir, tests = sys.argv[1], sys.argv[2:]
found = {}
for line in open(f"{dir}/.build.json"):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    t = m.get("target", {})
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "test" in t.get("kind", []) and t.get("name") in tests:
        found[t["name"]] = m["executable"]
missing = [t for t in tests if t not in found]
if missing:
    sys.exit(f"not built: {missing}")
for t, exe in found.items():
    shutil.copy2(exe, f"{dir}/{t}")
    print(f"sanitize.sh: {dir}/{t} <- {exe}")
EOF
  rm -f "$dir/.build.json"
  echo "sanitize.sh: on the GPU host run: bash scripts/sanitize.sh $dir"
  exit 0
fi

[[ $# -ge 1 ]] || die "usage: $0 DIR [-- TEST-BINARY-ARGS...]   or   $0 --build DIR [TEST...]"
dir=$1; shift
[[ ${1:-} == -- ]] && shift
extra=("$@")
bin=$dir/sanitize_shapes
# Also take cargo's hashed name (sanitize_shapes-<hash>, as `cargo test --no-run` leaves it), newest first.
[[ -x $bin ]] || bin=$(ls -t "$dir"/sanitize_shapes-* 2>/dev/null | grep -v '\.d$' | head -n 1 || true)
[[ -n $bin && -x $bin ]] || die "no executable $dir/sanitize_shapes[-<hash>] (build it with: bash scripts/sanitize.sh --build $dir)"
echo "sanitize.sh: binary $bin"

cs=$(command -v compute-sanitizer || true)
for c in "${CUDA_HOME:-/nonexistent}/bin/compute-sanitizer" /usr/local/cuda/bin/compute-sanitizer \
         /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
  [[ -z $cs && -x $c ]] && cs=$c
done
[[ -n $cs ]] || die "compute-sanitizer not found (put CUDA's bin on PATH or set CUDA_HOME)"
echo "sanitize.sh: $("$cs" --version | tail -n 1)"

logs=${SANITIZE_LOG_DIR:-${OUT:-.}/sanitize-logs}
mkdir -p "$logs"
read -r -a tools <<<"${SANITIZE_TOOLS:-memcheck racecheck synccheck}"
failed=()
for tool in "${tools[@]}"; do
  log=$logs/$tool.log
  echo "sanitize.sh: ==> $tool ($log)"
  start=$SECONDS
  set +e
  "$cs" --tool "$tool" --error-exitcode 97 "$bin" --test-threads=1 --nocapture "${extra[@]}" >"$log" 2>&1
  rc=$?
  set -e
  secs=$((SECONDS - start))
  grep -E "SUMMARY|test result|SKIPPED|panicked|FAILED" "$log" | sed 's/^/    /' || true
  why=()
  [[ $rc -eq 97 ]] && why+=("$tool reported errors")
  [[ $rc -ne 0 && $rc -ne 97 ]] && why+=("exit status $rc")
  # Summary lines: "ERROR SUMMARY: N errors", "RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)".
  errs=$(sed -n 's/.*ERROR SUMMARY: \([0-9][0-9]*\) error.*/\1/p' "$log" | awk '{s += $1} END {print s + 0}')
  race_errs=$(sed -n 's/.*RACECHECK SUMMARY:.*(\([0-9][0-9]*\) error.*/\1/p' "$log" | awk '{s += $1} END {print s + 0}')
  race_warns=$(sed -n 's/.*RACECHECK SUMMARY:.*, \([0-9][0-9]*\) warning.*/\1/p' "$log" | awk '{s += $1} END {print s + 0}')
  [[ $errs -gt 0 ]] && why+=("$errs errors in the summary")
  [[ $race_errs -gt 0 ]] && why+=("$race_errs racecheck errors")
  if [[ $race_warns -gt 0 ]]; then
    echo "sanitize.sh:     $race_warns racecheck warnings (see $log)"
    [[ ${SANITIZE_STRICT:-0} == 1 ]] && why+=("$race_warns racecheck warnings (SANITIZE_STRICT=1)")
  fi
  grep -q "SKIPPED" "$log" && why+=("a test found no GPU: nothing was checked")
  grep -q "test result: ok" "$log" || why+=("no passing test run in the log")
  if [[ ${#why[@]} -gt 0 ]]; then
    echo "sanitize.sh: $tool FAILED after ${secs}s: $(IFS=';'; echo "${why[*]}")"
    failed+=("$tool")
  else
    echo "sanitize.sh: $tool clean after ${secs}s"
  fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "sanitize.sh: FAILED: ${failed[*]} (logs in $logs)"
  exit 1
fi
echo "sanitize.sh: all clean: ${tools[*]}"
