#!/usr/bin/env bash
# The GPU check: on a machine with one CUDA GPU, builds the CUDA
# backends and runs, within ~8 minutes:
#   1. the CUDA test binary with DTENSOR_REQUIRE_GPU=1 (a skipped GPU test fails):
#      cuDNN forward/backward against the CPU oracle (f64/f32/bf16/f16), device
#      copies and kernels, the pointwise ops and the kernel slots (norm, pool,
#      channel, loss, upsample, optim) against the CPU kernels, NCCL with
#      one rank, two ranks sharing the GPU over the Gloo staging path (the
#      two-GPU NCCL test skips with one GPU);
#   2. the convolution suites on CPU as a control (same build);
#   3. dtensor-conv --device cuda --check (forward and backward, f32 and f16)
#      with one rank over NCCL, and two ranks sharing the GPU over the Gloo
#      staging path;
#   4. the window operators (pools, upsample, pad, conv_transpose, lp_pool)
#      with a halo, on CUDA tensors read and written as tiles, two ranks
#      sharing the GPU (Gloo staging): dtensor-op --check --backward against
#      the f64 oracles;
#   5. dtensor-train-unet --device cuda against the same run on CPU (f64
#      losses to 1e-10): one rank over NCCL, two sharing the GPU (Gloo); then
#      Adam with amsgrad and clipping, and RMSprop with momentum, one rank.
# Usage: scripts/gpu-check.sh   (env: DTENSOR_GPU_BUILD_DIR, default build-gpu)
# DTENSOR_GPU_PREBUILT=DIR: no configure or build; the programs are DIR/bin's,
# as scripts/gpu-bundle.sh packs them for a GPU machine without Debian's
# packages (LD_LIBRARY_PATH must then name DIR/lib and CUDA's libraries).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${DTENSOR_GPU_PREBUILT:-${DTENSOR_GPU_BUILD_DIR:-$root/build-gpu}}
jobs=${DTENSOR_JOBS:-$(nproc)}
start=$(date +%s)
step() { echo "== [$(($(date +%s) - start))s] $*"; }

command -v nvidia-smi >/dev/null && nvidia-smi -L || echo "nvidia-smi not found"
if [[ -z ${DTENSOR_GPU_PREBUILT:-} ]]; then
  step "configure (DTENSOR_WITH_CUDA=ON: a missing toolkit piece is an error here)"
  # Only the running GPU's architecture: quicker to compile than 80;90.
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)
  cmake -S "$root" -B "$build" -G Ninja -DDTENSOR_WITH_CUDA=ON -DDTENSOR_BUILD_BENCH=OFF \
    -DDTENSOR_BUILD_EXAMPLES=OFF ${arch:+-DCMAKE_CUDA_ARCHITECTURES=$arch} >/dev/null
  step "build"
  # dtensor_cuda: the CUDA module, which libdtensor.so loads at run time.
  targets=(dtensor_cuda dtensor_cuda_tests dtensor_cuda_backend_tests dtensor_conv_local_tests
    dtensor-conv dtensor-op dtensor-run dtensor-train-unet)
  ninja -C "$build" -j "$jobs" "${targets[@]}"
fi

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

step "window ops with a halo on CUDA tiles (two ranks sharing the GPU, Gloo staging)"
window_ops=("max_pool --kernel 3 --stride 2 --padding 1" "avg_pool --kernel 3 --stride 1 --padding 1"
  "adaptive_max_pool --output-size 5" "upsample --mode linear --scale 2"
  "pad --padding-lr 2:1 --mode reflect" "pad --padding 2 --value 0.5"
  "conv_transpose --kernel 3 --stride 2 --padding 1" "lp_pool --norm-type 2.5 --kernel 3 --stride 2")
for w in "${window_ops[@]}"; do
  read -r -a a <<<"$w"
  for dt in f32 f16; do
    # Rank 0's check lines; all of its output when the run fails.
    if ! out=$(DTENSOR_BACKEND=cpu:gloo,cuda:gloo "$(prog dtensor-run)" -n 2 -- "$(prog dtensor-op)" \
      "${a[@]}" --device cuda --dtype "$dt" --input 2,3,18,14 --placements S2 --check --backward 2>&1); then
      echo "$out"
      exit 1
    fi
    echo "$w ($dt):" $(grep -E '^\[0\] +check' <<<"$out" | sed 's/^\[0\] *//; s/ *(max.*//' | tr '\n' ';')
  done
done

step "dtensor-train-unet --device cuda against CPU (f64 losses to 1e-10)"
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
# A small batch as .npy files, written with the standard library alone.
python3 - "$data" <<'PY'
import random, struct, sys
def npy(path, shape):
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (%s), }" % "".join(f"{d}, " for d in shape)
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    n = 1
    for d in shape: n *= d
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%dd" % n, *(random.uniform(-1, 1) for _ in range(n))))
random.seed(0)
npy(sys.argv[1] + "/x.npy", (2, 3, 32, 24))
npy(sys.argv[1] + "/y.npy", (2, 1, 32, 24))
PY
train=(--data "$data" --base 4 --groups 2 --steps 3 --optimizer sgd --lr 0.05 --momentum 0.9
  --dtype f64 --json)
cpu_losses=$("$(prog dtensor-train-unet)" "${train[@]}" | tail -1)
gpu_losses=$("$(prog dtensor-train-unet)" "${train[@]}" --device cuda | tail -1)
shared_losses=$(DTENSOR_BACKEND=cpu:gloo,cuda:gloo "$(prog dtensor-run)" -n 2 -- \
  "$(prog dtensor-train-unet)" "${train[@]}" --device cuda | tail -1)
python3 - "$cpu_losses" "$gpu_losses" "$shared_losses" <<'PY'
import json, re, sys
ref = json.loads(sys.argv[1])["losses"]
for name, text in (("1 rank, NCCL", sys.argv[2]), ("2 ranks sharing the GPU", sys.argv[3])):
    # dtensor-run prefixes each line a rank prints with "[rank] ".
    got = json.loads(re.sub(r"^\[\d+\] ", "", text))["losses"]
    err = max(abs(a - b) / max(1.0, abs(b)) for a, b in zip(got, ref))
    print(f"trainer --device cuda ({name}): losses {got} against CPU {ref}: max rel err {err:.2e}")
    assert len(got) == len(ref) and err <= 1e-10, "CUDA losses differ from the CPU run's"
PY
# The other optimisers' and clipping's CUDA kernels, end to end (one rank).
for opt in "--optimizer adam --amsgrad --clip-grad-norm 0.5" "--optimizer rmsprop --momentum 0.9"; do
  read -r -a extra <<<"$opt"
  args=(--data "$data" --base 4 --groups 2 --steps 3 --lr 0.01 --dtype f64 --json "${extra[@]}")
  python3 - "$opt" "$("$(prog dtensor-train-unet)" "${args[@]}" | tail -1)" \
    "$("$(prog dtensor-train-unet)" "${args[@]}" --device cuda | tail -1)" <<'PY'
import json, sys
ref, got = json.loads(sys.argv[2])["losses"], json.loads(sys.argv[3])["losses"]
err = max(abs(a - b) / max(1.0, abs(b)) for a, b in zip(got, ref))
print(f"trainer --device cuda {sys.argv[1]}: max rel err {err:.2e}")
assert len(got) == len(ref) and err <= 1e-10, "CUDA losses differ from the CPU run's"
PY
done
step "GPU check passed"
