// CPU kernel of the dimension permutation (dtensor/ops/kernels/permute.h):
// a byte move, so one body per element size serves every dtype.
//
// The permutation is first simplified: size-1 dims dropped and output dims
// that stay adjacent in the input merged, so that a permute that keeps the
// last dim in place copies whole rows (memcpy) and a true transpose gathers
// one strided row at a time. Rows run in parallel on the rank's threads.
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cpu/parallel_region.h"
#include "dtensor/core/errors.h"
#include "dtensor/ops/kernels/permute.h"

namespace dtensor::cpu {
namespace {

// Elements below this run on one thread.
constexpr std::int64_t kParallelElements = std::int64_t{1} << 15;

// The output's dims, outermost first, each with the input stride that walks it.
struct Walk {
  std::vector<std::int64_t> size, in_stride;
};

Walk simplified_walk(const kernels::PermuteArgs& a) {
  const Shape& in = a.input.shape();
  const auto n = in.size();
  std::vector<std::int64_t> strides(n, 1);
  for (std::size_t d = n; d-- > 1;)
    strides[d - 1] = strides[d] * in[d];
  Walk w;
  for (const std::int64_t k : a.order) {
    const auto d = static_cast<std::size_t>(k);
    if (in[d] == 1) continue;
    // Merged into the previous dim when the two are adjacent in the input too.
    if (!w.size.empty() && w.in_stride.back() == strides[d] * in[d]) {
      w.size.back() *= in[d];
      w.in_stride.back() = strides[d];
      continue;
    }
    w.size.push_back(in[d]);
    w.in_stride.push_back(strides[d]);
  }
  if (w.size.empty()) {  // one element
    w.size.push_back(1);
    w.in_stride.push_back(1);
  }
  return w;
}

template <typename T>
void permute_elements(const kernels::PermuteArgs& a) {
  const Walk w = simplified_walk(a);
  const auto outer_dims = w.size.size() - 1;
  const std::int64_t inner = w.size.back(), inner_stride = w.in_stride.back();
  const std::int64_t rows = a.output.numel() / inner;
  const T* x = static_cast<const T*>(a.input.data_ptr());
  T* y = static_cast<T*>(a.output.data_ptr());
  parallel_region(a.output.numel() >= kParallelElements, [&] {
#pragma omp for schedule(static)
    for (std::int64_t row = 0; row < rows; ++row) {
      std::int64_t base = 0, rest = row;
      for (std::size_t k = outer_dims; k-- > 0;) {
        base += (rest % w.size[k]) * w.in_stride[k];
        rest /= w.size[k];
      }
      const T* src = x + base;
      T* dst = y + row * inner;
      if (inner_stride == 1) {
        std::memcpy(dst, src, static_cast<std::size_t>(inner) * sizeof(T));
      } else {
        for (std::int64_t i = 0; i < inner; ++i)
          dst[i] = src[i * inner_stride];
      }
    }
  });
}

void run_permute(const kernels::PermuteArgs& a) {
  check_arg(a.input.is_contiguous() && a.output.is_contiguous(), "permute",
            "internal: the kernel takes contiguous tensors");
  DTENSOR_CHECK_ARG(a.input.dtype() == a.output.dtype() && a.input.numel() == a.output.numel(),
                    "permute", "internal: output {} {} for input {} {}",
                    dtype_name(a.output.dtype()), shape_str(a.output.shape()),
                    dtype_name(a.input.dtype()), shape_str(a.input.shape()));
  if (a.output.numel() == 0) return;
  switch (dtype_size(a.input.dtype())) {
    case 2:
      permute_elements<std::uint16_t>(a);
      break;
    case 4:
      permute_elements<std::uint32_t>(a);
      break;
    case 8:
      permute_elements<std::uint64_t>(a);
      break;
    default:
      throw NotSupported("permute", fmt::format("no CPU kernel for {}-byte elements",
                                                dtype_size(a.input.dtype())));
  }
}

struct Registrar {
  Registrar() {
    for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16})
      register_kernel(kernels::kPermute, DeviceType::CPU, dt,
                      KernelFunction<kernels::PermuteArgs>(run_permute));
  }
};
const Registrar registrar;

}  // namespace
}  // namespace dtensor::cpu
