// CPU kernels of the per-channel slots (dtensor/ops/kernels/channel.h):
// f32 and f64 in their own type, bf16 and f16 widened to f32. Each (n, c)
// row is one vector loop; rows run in parallel on the rank's threads, and
// the sums add the rows of a channel in row order, so they do not depend on
// the thread count.
#include <omp.h>

#include <algorithm>
#include <vector>

#include "backends/cpu/compute_type.h"
#include "backends/cpu/parallel_region.h"
#include "backends/cpu/row_sum.h"
#include "backends/cpu/simd.h"
#include "dtensor/ops/kernels/channel.h"

namespace dtensor::cpu {
namespace {

// Rows smaller than this in total run on one thread.
constexpr std::int64_t kParallelElements = std::int64_t{1} << 15;

DTENSOR_SIMD_CLONES void add_scalar_row(float* y, float b, std::int64_t n) {
#pragma omp simd
  for (std::int64_t j = 0; j < n; ++j)
    y[j] += b;
}
DTENSOR_SIMD_CLONES void add_scalar_row(double* y, double b, std::int64_t n) {
#pragma omp simd
  for (std::int64_t j = 0; j < n; ++j)
    y[j] += b;
}
struct Rows {
  std::int64_t n = 0, c = 0, inner = 0;
  explicit Rows(const Tensor& t)
      : n(t.size(0)), c(t.size(1)), inner(t.numel() / std::max<std::int64_t>(n * c, 1)) {}
  bool parallel() const { return n * c > 1 && n * c * inner >= kParallelElements; }
};

void run_add_bias(const kernels::ChannelBiasArgs& a) {
  if (a.y.numel() == 0) return;
  const Rows r(a.y);
  const Tensor b = in_compute(a.bias);
  const Tensor y0 = in_compute(a.y);
  compute_into(a.y, [&](auto t, Tensor& out) {
    using T = decltype(t);
    T* y = out.data<T>();
    if (out.data<T>() != y0.data<T>()) std::copy_n(y0.data<T>(), y0.numel(), y);
    const T* bias = b.data<T>();
    parallel_region(r.parallel(), [&] {
#pragma omp for schedule(static)
      for (std::int64_t row = 0; row < r.n * r.c; ++row)
        add_scalar_row(y + row * r.inner, bias[row % r.c], r.inner);
    });
  });
}

void run_sums(const kernels::ChannelSumsArgs& a) {
  const Rows r(a.x);
  double* sums = a.sums.data<double>();
  std::fill(sums, sums + r.c, 0.0);
  if (a.x.numel() == 0) return;
  const Tensor x = in_compute(a.x);
  std::vector<double> per_row(static_cast<std::size_t>(r.n * r.c));
  in_type(x.dtype(), [&](auto t) {
    using T = decltype(t);
    const T* p = x.data<T>();
    parallel_region(r.parallel(), [&] {
#pragma omp for schedule(static)
      for (std::int64_t row = 0; row < r.n * r.c; ++row)
        per_row[static_cast<std::size_t>(row)] = row_sum(p + row * r.inner, r.inner);
    });
  });
  for (std::int64_t row = 0; row < r.n * r.c; ++row)
    sums[row % r.c] += per_row[static_cast<std::size_t>(row)];
}

struct Registrar {
  Registrar() {
    for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
      register_kernel(kernels::kChannelBias, DeviceType::CPU, dt,
                      KernelFunction<kernels::ChannelBiasArgs>(run_add_bias));
      register_kernel(kernels::kChannelSums, DeviceType::CPU, dt,
                      KernelFunction<kernels::ChannelSumsArgs>(run_sums));
    }
  }
};
const Registrar registrar;

}  // namespace
}  // namespace dtensor::cpu
