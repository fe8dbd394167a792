#!/usr/bin/env bash
# Installs dependencies, builds, and runs the whole test suite (ctest).
# Usage: scripts/test.sh [--sanitize|--tsan] [ctest args...]
#   e.g. scripts/test.sh -R redistribute
#   --sanitize  ASan + UBSan build in build-asan/ (DTENSOR_SANITIZE=address,undefined)
#   --tsan      ThreadSanitizer build in build-tsan/; runs the threaded parts
#               (the comm tests: Gloo's transport threads, Work handles); the
#               arguments then go to that Catch2 binary (e.g. a test name)
# Sanitizer reports fail the test that triggers them (halt_on_error); the
# only suppressions are for third-party code, in scripts/sanitizers/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=
case "${1:-}" in
  --sanitize) mode=asan; shift ;;
  --tsan) mode=tsan; shift ;;
esac
"$root/scripts/install-deps.sh"
sup=$root/scripts/sanitizers
case $mode in
  asan)
    export DTENSOR_BUILD_DIR=${DTENSOR_BUILD_DIR:-$root/build-asan}
    # DTENSOR_SANITIZE_TARGETS (e.g. in CI) builds only those targets; the
    # ctest arguments should then select only their tests.
    if [[ -n ${DTENSOR_SANITIZE_TARGETS:-} ]]; then
      cmake -S "$root" -B "$DTENSOR_BUILD_DIR" -G Ninja -DDTENSOR_SANITIZE=address,undefined \
        -DDTENSOR_WITH_CUDA=OFF -DDTENSOR_WITH_MPI=OFF -DDTENSOR_BUILD_BENCH=OFF >/dev/null
      # shellcheck disable=SC2086
      ninja -C "$DTENSOR_BUILD_DIR" -j "${DTENSOR_JOBS:-$(nproc)}" $DTENSOR_SANITIZE_TARGETS
    else
      # No MPI module: OpenMPI's own allocations would be reported as leaks.
      "$root/scripts/build.sh" -DDTENSOR_SANITIZE=address,undefined -DDTENSOR_WITH_CUDA=OFF \
        -DDTENSOR_WITH_MPI=OFF -DDTENSOR_BUILD_BENCH=OFF
    fi
    # detect_leaks: LeakSanitizer on, with third-party suppressions.
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:halt_on_error=1:detect_stack_use_after_return=0}
    export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$sup/lsan.supp:print_suppressions=0}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1:suppressions=$sup/ubsan.supp}
    ;;
  tsan)
    export DTENSOR_BUILD_DIR=${DTENSOR_BUILD_DIR:-$root/build-tsan}
    cmake -S "$root" -B "$DTENSOR_BUILD_DIR" -G Ninja -DDTENSOR_SANITIZE=thread \
      -DDTENSOR_WITH_CUDA=OFF -DDTENSOR_BUILD_BENCH=OFF -DDTENSOR_BUILD_EXAMPLES=OFF >/dev/null
    ninja -C "$DTENSOR_BUILD_DIR" -j "${DTENSOR_JOBS:-$(nproc)}" dtensor_comm_tests
    export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$sup/tsan.supp}
    # Only the comm tests are built here: run their binary (every test case,
    # each re-executing it per rank) rather than ctest, which lists them all.
    cd "$DTENSOR_BUILD_DIR"
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
    exec "$DTENSOR_BUILD_DIR/tests/comm/dtensor_comm_tests" "$@"
    ;;
  *)
    # The suite's build is the -Werror build (CI's GCC warning gate); the
    # option stays OFF for builds made otherwise (cmake's default).
    "$root/scripts/build.sh" -DDTENSOR_WERROR=ON
    ;;
esac
build=${DTENSOR_BUILD_DIR:-$root/build}
cd "$build"
# Ranks pin one OpenMP thread each so that P processes on a few cores don't fight.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# Multi-process tests spend most time waiting on each other: run two at once.
ctest --output-on-failure -j "${DTENSOR_TEST_JOBS:-2}" "$@"
