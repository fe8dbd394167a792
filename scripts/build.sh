#!/usr/bin/env bash
# Configures and builds libdtensor in build/ (or $DTENSOR_BUILD_DIR) with Ninja.
# Extra arguments go to cmake, e.g. -DDTENSOR_SANITIZE=address,undefined.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${DTENSOR_BUILD_DIR:-$root/build}
jobs=${DTENSOR_JOBS:-$(nproc)}
cmake -S "$root" -B "$build" -G Ninja "$@" >/dev/null
ninja -C "$build" -j "$jobs"
