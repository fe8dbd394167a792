// CPU kernels of the element-wise operators on a training step's hot path:
// scale, relu and relu_backward (the binary operators, which broadcast, are
// in broadcast_kernels.cpp), vectorised in the data's own type
// (f32, f64; bf16 and f16 widened to f32 and rounded once), split over the
// rank's OpenMP threads for large tensors.
//
// relu keeps NaN (x < 0 ? 0 : x) and relu_backward passes the gradient where
// x is NaN (x <= 0 ? 0 : g), as PyTorch's clamp_min and threshold_backward do.
#include <omp.h>

#include <algorithm>

#include "backends/cpu/parallel_region.h"
#include "backends/cpu/simd.h"
#include "dtensor/ops/registry.h"

namespace dtensor::cpu {
namespace {

// Tensors smaller than this run on one thread.
constexpr std::int64_t kParallelElements = std::int64_t{1} << 16;

#define DTENSOR_ELEMENTWISE(NAME, EXPR)                                                           \
  DTENSOR_SIMD_CLONES void NAME([[maybe_unused]] const float* a, [[maybe_unused]] const float* b, \
                                [[maybe_unused]] float s, float* y, std::int64_t n) {             \
    _Pragma("omp simd") for (std::int64_t j = 0; j < n; ++j) y[j] = (EXPR);                       \
  }                                                                                               \
  DTENSOR_SIMD_CLONES void NAME([[maybe_unused]] const double* a,                                 \
                                [[maybe_unused]] const double* b, [[maybe_unused]] double s,      \
                                double* y, std::int64_t n) {                                      \
    _Pragma("omp simd") for (std::int64_t j = 0; j < n; ++j) y[j] = (EXPR);                       \
  }

// Every form takes (a, b, s): the second operand and the scalar are unused
// where the operator has none.
DTENSOR_ELEMENTWISE(scale_rows, a[j] * s)
DTENSOR_ELEMENTWISE(relu_rows, a[j] < 0 ? decltype(s)(0) : a[j])
DTENSOR_ELEMENTWISE(relu_backward_rows, b[j] <= 0 ? decltype(s)(0) : a[j])
#undef DTENSOR_ELEMENTWISE

template <typename C>
using RowsFn = void (*)(const C*, const C*, C, C*, std::int64_t);

// Runs rows(a, b, s, y, n) over the whole tensor in the compute type C, in
// parallel blocks when it pays.
template <typename C>
void run_blocks(RowsFn<C> rows, const C* a, const C* b, C s, C* y, std::int64_t n) {
  parallel_blocks(n, kParallelElements, [&](std::int64_t lo, std::int64_t hi) {
    rows(a + lo, b ? b + lo : nullptr, s, y + lo, hi - lo);
  });
}

// A kernel of `arity` tensor operands (the scalar, when any, is argument 1).
LocalKernel kernel(RowsFn<float> f32, RowsFn<double> f64, int arity) {
  return [f32, f64, arity](const KernelCall& c) -> std::vector<Tensor> {
    const Tensor& first = c.local(0);
    const DType dt = first.dtype();
    const DType work = dt == DType::F64 ? DType::F64 : DType::F32;
    const Tensor a = first.dtype() == work ? first.contiguous() : first.to(work);
    Tensor b;
    if (arity == 2) b = c.local(1).dtype() == work ? c.local(1).contiguous() : c.local(1).to(work);
    const double s =
        arity == 1 && c.schema.size() > 1 && !c.schema.is_dtensor(1) ? c.schema.scalar(1) : 0.0;
    Tensor y = Tensor::empty(first.shape(), work);
    if (work == DType::F64)
      run_blocks<double>(f64, a.data<double>(), b.defined() ? b.data<double>() : nullptr, s,
                         y.data<double>(), y.numel());
    else
      run_blocks<float>(f32, a.data<float>(), b.defined() ? b.data<float>() : nullptr,
                        static_cast<float>(s), y.data<float>(), y.numel());
    return {dt == work ? y : y.to(dt)};
  };
}

struct Registrar {
  Registrar() {
    const auto cpu = DeviceType::CPU;
    for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
      register_kernel("scale", cpu, dt, kernel(scale_rows, scale_rows, 1));
      register_kernel("relu", cpu, dt, kernel(relu_rows, relu_rows, 1));
      register_kernel("relu_backward", cpu, dt, kernel(relu_backward_rows, relu_backward_rows, 2));
    }
  }
};
const Registrar registrar;

}  // namespace
}  // namespace dtensor::cpu
