#!/usr/bin/env bash
# Configures and builds libdtensor in build/ (or $DTENSOR_BUILD_DIR) with Ninja.
# Extra arguments go to cmake, e.g. -DDTENSOR_SANITIZE=address,undefined.
# DTENSOR_TARGETS: the ninja targets to build (default: all of them).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${DTENSOR_BUILD_DIR:-$root/build}
jobs=${DTENSOR_JOBS:-$(nproc)}
# The default RelWithDebInfo build with line tables only (-g1): a quarter
# less compile time than -g, and backtraces, perf and valgrind keep files,
# lines and function names. An argument of the caller's overrides it.
cmake -S "$root" -B "$build" -G Ninja "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" "$@" \
  >/dev/null
# shellcheck disable=SC2086 # a list of target names, split on purpose
ninja -C "$build" -j "$jobs" ${DTENSOR_TARGETS:-}
