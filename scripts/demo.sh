#!/usr/bin/env bash
# Installs dependencies, builds, and runs the demo on 4 ranks under the launcher.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
build=${DTENSOR_BUILD_DIR:-$root/build}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
exec "$build/bin/dtensor-run" -n 4 -- "$build/bin/dtensor-demo" "$@"
