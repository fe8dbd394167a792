#!/usr/bin/env bash
# Installs dependencies, builds what the demo needs (the library, the launcher,
# the demo and the two examples the README runs next; not the tests), and runs
# the demo on 4 ranks under the launcher.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
DTENSOR_TARGETS="dtensor-run dtensor-demo dtensor-example-quickstart dtensor-train-cnn" \
  "$root/scripts/build.sh"
build=${DTENSOR_BUILD_DIR:-$root/build}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
exec "$build/bin/dtensor-run" -n 4 -- "$build/bin/dtensor-demo" "$@"
