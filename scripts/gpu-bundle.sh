#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh runs, from a build made here, for a GPU
# machine that has CUDA, cuDNN and NCCL but none of Debian's packages (oneDNN,
# Gloo, spdlog, fmt...): the check's programs in bin/, libdtensor and its
# CUDA module side by side in lib/ (the module is looked for next to
# libdtensor.so), and every shared library they take from this system except
# the C runtime and CUDA's own, which the GPU machine has in versions that
# are at least as new. Debug information is stripped to keep it small.
# There:  tar xf BUNDLE -C DIR && . DIR/env.sh && DTENSOR_GPU_PREBUILT=DIR scripts/gpu-check.sh
# (env.sh puts DIR/lib and the folders of CUDA's libraries on LD_LIBRARY_PATH).
# Usage: scripts/gpu-bundle.sh BUNDLE.tar.xz   (env: DTENSOR_BUILD_DIR, default build)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${DTENSOR_BUILD_DIR:-$root/build}
out=${1:?usage: scripts/gpu-bundle.sh BUNDLE.tar.xz}
programs=(dtensor_cuda_tests dtensor_cuda_backend_tests dtensor_conv_local_tests dtensor-conv
  dtensor-op dtensor-run dtensor-train-unet)
# Quiet when it builds; the build's own output when it does not.
if ! log=$(ninja -C "$build" dtensor_cuda "${programs[@]}" 2>&1); then
  echo "$log" >&2
  exit 1
fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for p in "${programs[@]}"; do strip --strip-debug -o "$stage/bin/$p" "$build/bin/$p"; done
soname=$(objdump -p "$build/libdtensor.so" | awk '/SONAME/ {print $2}')
strip --strip-debug -o "$stage/lib/$soname" "$(readlink -f "$build/libdtensor.so")"
ln -s "$soname" "$stage/lib/libdtensor.so"
module=$(basename "$(find "$build" -maxdepth 1 -name 'libdtensor-cuda.so*' | head -1)")
strip --strip-debug -o "$stage/lib/$module" "$build/$module"

# The C runtime, the compiler's runtime and CUDA's libraries stay behind.
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libstdc\+\+|libgcc_s|libz\.|libcu|libnccl|libnvrtc|libnvJitLink|libdtensor)'
for f in "$stage/bin/"* "$stage/lib/"*; do
  ldd "$f" | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ $name =~ $skip ]] || cp -L "$path" "$stage/lib/$name"
done
# Where CUDA's libraries are differs between machines: the system's, a CUDA
# toolkit's, or the nvidia-* wheels of a Python environment (PyTorch's).
cat >"$stage/env.sh" <<'ENV'
# Sourced on the GPU machine: this bundle's lib/ and CUDA's libraries.
_dtensor_bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
_dtensor_path=$_dtensor_bundle/lib
for _n in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2; do
  ldconfig -p 2>/dev/null | grep -q "$_n " && continue
  _f=$(find /usr/local/cuda*/ /opt /usr/lib /usr/local/lib -name "$_n" 2>/dev/null | head -1)
  if [[ -n $_f ]]; then _dtensor_path=$_dtensor_path:$(dirname "$_f"); else echo "env.sh: no $_n found" >&2; fi
done
export LD_LIBRARY_PATH=$_dtensor_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
unset _dtensor_bundle _dtensor_path _n _f
ENV
tar -C "$stage" -cJf "$out" bin lib env.sh
echo "$out: $(du -h "$out" | cut -f1); lib/: $(find "$stage/lib" -mindepth 1 -printf '%f ')"
