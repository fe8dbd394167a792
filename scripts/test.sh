#!/usr/bin/env bash
# Installs dependencies, builds, and runs the whole test suite (ctest).
# Usage: scripts/test.sh [ctest args...]   e.g. scripts/test.sh -R redistribute
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
build=${DTENSOR_BUILD_DIR:-$root/build}
cd "$build"
# Ranks pin one OpenMP thread each so that P processes on 2 cores don't fight.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# Multi-process tests spend most time waiting on each other: run two at once.
ctest --output-on-failure -j "${DTENSOR_TEST_JOBS:-2}" "$@"
