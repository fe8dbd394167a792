#!/usr/bin/env bash
# The GPU check: on a machine with one CUDA GPU, builds the CUDA
# backends and runs, within ~8 minutes:
#   1. the CUDA test binary with DTENSOR_REQUIRE_GPU=1 (a skipped GPU test fails):
#      cuDNN forward/backward against the CPU oracle (f64/f32/bf16/f16), device
#      copies and kernels, the pointwise ops and the kernel slots (norm, pool,
#      channel, loss, upsample) against the CPU kernels, NCCL with
#      one rank, two ranks sharing the GPU over the Gloo staging path (the
#      two-GPU NCCL test skips with one GPU);
#   2. the convolution suites on CPU as a control (same build);
#   3. dtensor-conv --device cuda --check (forward and backward, f32 and f16)
#      with one rank over NCCL, and two ranks sharing the GPU over the Gloo
#      staging path.
# Usage: scripts/gpu-check.sh   (env: DTENSOR_GPU_BUILD_DIR, default build-gpu)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${DTENSOR_GPU_BUILD_DIR:-$root/build-gpu}
jobs=${DTENSOR_JOBS:-$(nproc)}
start=$(date +%s)
step() { echo "== [$(($(date +%s) - start))s] $*"; }

command -v nvidia-smi >/dev/null && nvidia-smi -L || echo "nvidia-smi not found"
step "configure (DTENSOR_WITH_CUDA=ON: a missing toolkit piece is an error here)"
# Only the running GPU's architecture: quicker to compile than 80;90.
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)
cmake -S "$root" -B "$build" -G Ninja -DDTENSOR_WITH_CUDA=ON -DDTENSOR_BUILD_BENCH=OFF \
  -DDTENSOR_BUILD_EXAMPLES=OFF ${arch:+-DCMAKE_CUDA_ARCHITECTURES=$arch} >/dev/null
step "build"
# dtensor_cuda: the CUDA module, which libdtensor.so loads at run time.
targets=(dtensor_cuda dtensor_cuda_tests dtensor_cuda_backend_tests dtensor_conv_local_tests
  dtensor-conv dtensor-run)
ninja -C "$build" -j "$jobs" "${targets[@]}"

# Programs land in build/bin (older trees: next to their CMakeLists).
prog() { local p; p=$(find "$build/bin" "$build/tests" "$build/tools" -name "$1" -type f -perm -u+x 2>/dev/null | head -1); echo "${p:-$build/bin/$1}"; }
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} DTENSOR_LOG_LEVEL=${DTENSOR_LOG_LEVEL:-warn}
step "GPU tests (skips are failures)"
DTENSOR_REQUIRE_GPU=1 "$(prog dtensor_cuda_tests)" '[gpu]' --durations yes
step "CPU-side CUDA unit tests"
"$(prog dtensor_cuda_tests)" '~[gpu]'
"$(prog dtensor_cuda_backend_tests)"
step "local convolution kernels (CPU control)"
"$(prog dtensor_conv_local_tests)"

cli=$(prog dtensor-conv)
step "dtensor-conv --device cuda --check (one rank, NCCL)"
"$cli" --device cuda --check --backward
"$cli" --device cuda --check --backward --dtype f16 --input 2,4,16,16,8 --kernel 3 --padding 1
step "dtensor-conv --device cuda --check (two ranks sharing the GPU, Gloo staging)"
DTENSOR_BACKEND=cpu:gloo,cuda:gloo "$(prog dtensor-run)" -n 2 -- "$cli" --device cuda --check \
  --backward --placements S3
step "GPU check passed"
