#!/usr/bin/env bash
# One clang pass over the project's own sources: clang-tidy with the checks in
# .clang-tidy plus clang's -Wall -Wextra -Wpedantic (reported as
# clang-diagnostic-*), every finding an error. Uses the compile database of
# the GCC build (build/ or $DTENSOR_BUILD_DIR; scripts/test.sh makes it).
# Usage: scripts/lint.sh [files...]   (default: every library layer and tools/)
# Not linted: tests/, examples/, bench/, fuzz/, testing/ (CI time: tidy costs
# ~4 s of CPU per file) and backends/cuda/ (nvcc sources, no clang database).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${DTENSOR_BUILD_DIR:-$root/build}
jobs=${DTENSOR_LINT_JOBS:-2}
tidy=$(command -v clang-tidy-14 || command -v clang-tidy)
db=$build/compile_commands.json
[[ -f $db ]] || { echo "lint: no $db; run scripts/build.sh first" >&2; exit 1; }
if (($# > 0)); then
  files=("$@")
else
  mapfile -t files < <(grep -o '"file": "[^"]*"' "$db" | sed 's/"file": "//;s/"$//' |
    grep -E "^$root/(core|placement|ops|nn|checkpoint|data|backends|tools)/" |
    grep -v "^$root/backends/cuda/" | grep -E '\.cpp$' | sort -u)
fi
echo "lint: ${#files[@]} files, $jobs at a time"
start=$(date +%s)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# xargs exits non-zero (123) when any clang-tidy run reports an error.
status=0
printf '%s\n' "${files[@]}" |
  xargs -P "$jobs" -n 1 "$tidy" -p "$build" --quiet \
    --extra-arg=-Wall --extra-arg=-Wextra --extra-arg=-Wpedantic >"$log" 2>&1 || status=$?
# Drop clang-tidy's per-file tallies of the (suppressed) third-party warnings.
grep -v -E '^[0-9]+ warnings? (and [0-9]+ errors? )?generated\.$|^Suppressed [0-9]+ warnings|^Use -header-filter' "$log" || true
echo "lint: done in $(($(date +%s) - start)) s"
exit "$status"
