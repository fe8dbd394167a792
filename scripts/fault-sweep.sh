#!/usr/bin/env bash
# The fault-injection sweep: every fault test (library and launcher level,
# tests/reliability) repeated N times (default 10), each repetition killing
# or stalling its victim at a different moment. The default suite runs them
# once; this catches the faults that only show at some timings.
# Usage: scripts/fault-sweep.sh [N]   (expects a build in $DTENSOR_BUILD_DIR or build/)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${DTENSOR_BUILD_DIR:-$root/build}
export DTENSOR_FAULT_REPEAT=${1:-10}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
cd "$build"
start=$(date +%s)
# Two at once, like the suite: the faults must be noticed under load too.
ctest --output-on-failure -j "${DTENSOR_TEST_JOBS:-2}" -R "^(fault|launcher fault): "
echo "fault-sweep: $DTENSOR_FAULT_REPEAT repetitions in $(($(date +%s) - start)) s"
