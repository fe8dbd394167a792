#!/usr/bin/env bash
# Installs the Debian packages libdtensor builds and tests with. Idempotent:
# it installs only what is missing, and does nothing when all is present.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config
  libgloo-dev libhiredis-dev libssl-dev  # the stores: Redis client, HMAC of the job token
  libdnnl-dev ocl-icd-opencl-dev
  libeigen3-dev libspdlog-dev libfmt-dev
  catch2
  libcli11-dev nlohmann-json3-dev  # dtensor-run, dtensor-conv, dtensor-op: options, JSON (header only); checkpoint indexes
  zlib1g-dev  # checkpoints: block checksums (CRC-32)
  redis-server
  libopenmpi-dev openmpi-bin  # the MPI module libdtensor-mpi.so and its tests (mpirun)
  iproute2  # the two-namespace test
  python3-numpy python3-torch  # the PyTorch oracles of the dump checks and the U-Net trainer tests
  clang-14 libclang-rt-14-dev  # the libFuzzer targets (scripts/fuzz.sh, CI)
  clang-tidy-14  # scripts/lint.sh (CI's lint stage)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    SUDO=sudo
  else
    echo "install-deps: not root. Run as root (or with sudo):" >&2
    echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
