// CPU kernel of dropout (dtensor/ops/kernels/dropout.h): f32 and f64 in
// their own type, bf16 and f16 widened to f32 and rounded once.
//
// The part is walked row by row (its last dim): a row's elements have
// consecutive global indices, so each row is one `omp simd` loop of integer
// hashing from the row's first global index; rows run on the rank's threads
// for large parts (the result does not depend on how they are split).
#include <algorithm>

#include "backends/cpu/compute_type.h"
#include "backends/cpu/parallel_region.h"
#include "backends/cpu/simd.h"
#include "dtensor/core/errors.h"
#include "dtensor/ops/kernels/dropout.h"

namespace dtensor::cpu {
namespace {

using Int = std::int64_t;

// Parts below this run on one thread.
constexpr Int kParallelElements = Int{1} << 16;

template <typename T>
[[gnu::always_inline]] inline void mask_row_body(const T* x, T* y, Int n, std::uint64_t key,
                                                 std::uint64_t first, double p, T scale) {
#pragma omp simd
  for (Int j = 0; j < n; ++j) {
    const bool keep = kernels::dropout_uniform(key, first + static_cast<std::uint64_t>(j)) >= p;
    // A dropped element is +0 whatever the input (not x * 0, which is -0 for a
    // negative x): so a Partial input, whose ranks' parts add up, gives the
    // same bits as a whole one.
    y[j] = keep ? x[j] * scale : T(0);
  }
}
DTENSOR_SIMD_CLONES void mask_row(const float* x, float* y, Int n, std::uint64_t key,
                                  std::uint64_t first, double p, float scale) {
  mask_row_body(x, y, n, key, first, p, scale);
}
DTENSOR_SIMD_CLONES void mask_row(const double* x, double* y, Int n, std::uint64_t key,
                                  std::uint64_t first, double p, double scale) {
  mask_row_body(x, y, n, key, first, p, scale);
}

void run_dropout(const kernels::DropoutArgs& a) {
  kernels::check_dropout_part(a);
  const Shape& local = a.input.shape();
  const auto rank = local.size();
  const Tensor x = in_compute(a.input);
  const Int numel = x.numel();
  const Int row = rank == 0 ? 1 : local.back();
  const Int rows = row == 0 ? 0 : numel / row;
  // Global row-major strides.
  Shape stride(rank, 1);
  for (std::size_t d = rank; d-- > 1;)
    stride[d - 1] = stride[d] * a.global_shape[d];
  compute_into(a.output, [&](auto z, Tensor& out) {
    using T = decltype(z);
    const T* px = x.data<T>();
    T* py = out.data<T>();
    const T scale = a.p < 1.0 ? static_cast<T>(1.0 / (1.0 - a.p)) : T(0);
    parallel_region(numel >= kParallelElements, [&] {
#pragma omp for schedule(static)
      for (Int r = 0; r < rows; ++r) {
        // The global index of the row's first element: local row r's
        // multi-index (all dims but the last) plus the offset.
        Int first = 0;
        if (rank > 0) {
          first = a.offset[rank - 1];
          Int rest = r;
          for (std::size_t d = rank - 1; d-- > 0;) {
            first += (a.offset[d] + rest % local[d]) * stride[d];
            rest /= local[d];
          }
        }
        mask_row(px + r * row, py + r * row, row, a.key, static_cast<std::uint64_t>(first), a.p,
                 scale);
      }
    });
  });
}

struct Registrar {
  Registrar() {
    for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16})
      register_kernel(kernels::kDropout, DeviceType::CPU, dt,
                      KernelFunction<kernels::DropoutArgs>(run_dropout));
  }
};
const Registrar registrar;

}  // namespace
}  // namespace dtensor::cpu
