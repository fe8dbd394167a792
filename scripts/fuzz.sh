#!/usr/bin/env bash
# Builds the libFuzzer targets (clang++, ASan+UBSan, in build-fuzz/) and runs
# each for N seconds from its committed seed corpus (fuzz/corpus/<name>).
# New inputs found go to a scratch corpus, not into the repository; a crash
# leaves its reproducer in build-fuzz/artifacts/ and fails the script.
# Usage: scripts/fuzz.sh [SECONDS]   (default 60 per target; CI uses 60)
# DTENSOR_FUZZ_SEED=N fixes libFuzzer's seed (CI sets 1): the same inputs are
# then tried in the same order on every run, so a CI run explores what a
# developer already explored with that seed, and new findings come from
# deliberate longer runs (any other seed, or none) rather than by chance at landing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
build=${DTENSOR_FUZZ_BUILD_DIR:-$root/build-fuzz}
cxx=${DTENSOR_FUZZ_CXX:-$(command -v clang++ || command -v clang++-14 || true)}
if [[ -z $cxx ]]; then
  echo "fuzz.sh: clang++ is needed for libFuzzer (apt-get install clang)" >&2
  exit 1
fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDTENSOR_BUILD_FUZZERS=ON -DDTENSOR_BUILD_TESTS=OFF -DDTENSOR_BUILD_TOOLS=OFF \
  -DDTENSOR_BUILD_EXAMPLES=OFF -DDTENSOR_BUILD_BENCH=OFF -DDTENSOR_WITH_CUDA=OFF >/dev/null
ninja -C "$build" dtensor_fuzz_halo_plan dtensor_fuzz_halo_chain_plan dtensor_fuzz_parsers \
  dtensor_fuzz_tensor_api
mkdir -p "$build/artifacts"
status=0
for name in halo_plan halo_chain_plan parsers tensor_api; do
  scratch="$build/corpus-$name"
  mkdir -p "$scratch"
  echo "== fuzzing $name for $seconds s"
  # -max_len: the parsers' inputs are command lines and URLs; the planner reads
  # 35 bytes, the chain planner at most 24; the tensor API fuzzer reads a few bytes per call, at most 64 calls.
  if ! "$build/bin/dtensor_fuzz_$name" "$scratch" "$root/fuzz/corpus/$name" \
      -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$build/artifacts/$name-" -print_final_stats=1 \
      ${DTENSOR_FUZZ_SEED:+-seed="$DTENSOR_FUZZ_SEED"} 2>"$build/$name.log"; then
    status=1
    echo "fuzz.sh: $name FAILED; see $build/$name.log and $build/artifacts/" >&2
  fi
  grep -E "^Done [0-9]+ runs|^stat::(new_units_added|peak_rss_mb)|^INFO: Loaded|ERROR|SUMMARY" \
    "$build/$name.log" | sort -u || true
done
exit $status
