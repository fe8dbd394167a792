// CPU kernels of cross_entropy with class-index targets
// (dtensor/ops/kernels/loss.h): f32 and f64 in their own type, bf16 and f16
// widened to f32 (and the gradient rounded once); the target's count in
// exact integers; the ranks' records merged on the host.
//
// As the class-probability kernels (loss_kernels.cpp), each sample [C, S]
// is one unit of work, positions S the inner contiguous loop, samples on the
// rank's threads each into its own partial sum, added in sample order so the
// result does not depend on the threads. A position whose index is
// ignore_index (a class or not) or out of range (counted apart and refused
// by the operator) is never read through: it contributes 0 and gets
// gradient 0.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/class_log_sum_exp.h"
#include "backends/cpu/compute_type.h"
#include "backends/cpu/row_sum.h"
#include "dtensor/core/errors.h"
#include "dtensor/ops/kernels/loss.h"

namespace dtensor::cpu {
namespace {

// Elements below this run on one thread.
constexpr std::int64_t kParallelElements = std::int64_t{1} << 16;

// [N, C, S]: samples, classes, positions per class.
struct Layout {
  std::int64_t n = 0, c = 0, s = 0;
  explicit Layout(const Shape& shape)
      : n(shape.at(0)),
        c(shape.at(1)),
        s(shape_numel(shape) / std::max<std::int64_t>(shape.at(0) * shape.at(1), 1)) {}
};

// Whether index c of a position contributes (the others are ignored or out of range).
bool contributes(std::int64_t c, std::int64_t classes, std::int64_t ignore_index) {
  return c != ignore_index && c >= 0 && c < classes;
}

template <typename T>
double loss_sum(const Tensor& input, const Tensor& target, std::int64_t ignore_index,
                double smoothing) {
  const Layout k(input.shape());
  const T keep = static_cast<T>(1.0 - smoothing);
  const T spread = static_cast<T>(smoothing / static_cast<double>(k.c));
  std::vector<double> per_sample(static_cast<std::size_t>(k.n), 0.0);
  for_each_sample(input.data<T>(), target.data<std::int64_t>(), k.n, k.c, k.s, k.s,
                  kParallelElements,
                  [&](std::int64_t n, const T* x, const std::int64_t* t, const T* lse, T* loss) {
                    // loss[s] = s/C * sum_c (lse - x_c), then + (1 - s)(lse - x_t).
                    std::fill(loss, loss + k.s, T(0));
                    if (spread != T(0))
                      for (std::int64_t c = 0; c < k.c; ++c) {
                        const T* xc = x + c * k.s;
#pragma omp simd
                        for (std::int64_t s = 0; s < k.s; ++s)
                          loss[s] += lse[s] - xc[s];
                      }
                    for (std::int64_t s = 0; s < k.s; ++s) {
                      const std::int64_t c = t[s];
                      loss[s] = contributes(c, k.c, ignore_index)
                                    ? spread * loss[s] + keep * (lse[s] - x[c * k.s + s])
                                    : T(0);
                    }
                    per_sample[static_cast<std::size_t>(n)] = row_sum(loss, k.s);
                  });
  double total = 0;
  for (double v : per_sample)
    total += v;
  return total;
}

template <typename T>
void loss_backward(const Tensor& input, const Tensor& target, std::int64_t ignore_index,
                   double smoothing, double scale, Tensor& grad_input) {
  const Layout k(input.shape());
  const T keep = static_cast<T>(1.0 - smoothing);
  const T spread = static_cast<T>(smoothing / static_cast<double>(k.c));
  const auto sc = static_cast<T>(scale);
  T* g0 = grad_input.data<T>();
  for_each_sample(
      input.data<T>(), target.data<std::int64_t>(), k.n, k.c, k.s, k.s, kParallelElements,
      [&](std::int64_t n, const T* x, const std::int64_t* t, const T* lse, T*) {
        T* g = g0 + n * k.c * k.s;
        for (std::int64_t c = 0; c < k.c; ++c) {
          const std::int64_t o = c * k.s;
          for (std::int64_t s = 0; s < k.s; ++s) {
            const std::int64_t ts = t[s];
            const bool counted = contributes(ts, k.c, ignore_index);
            const T onehot = ts == c ? keep : T(0);
            g[o + s] = counted ? sc * (std::exp(x[o + s] - lse[s]) - onehot - spread) : T(0);
          }
        }
      });
}

void run_forward(const kernels::CrossEntropyIndicesArgs& a) {
  const char* slot = kernels::kCrossEntropyIndices.name;
  kernels::check_class_index_target(a.input, a.target, slot);
  const Tensor x = in_compute(a.input);
  double sum = 0;
  in_type(x.dtype(), [&](auto z) {
    sum = loss_sum<decltype(z)>(x, a.target, a.ignore_index, a.label_smoothing);
  });
  kernels::put_loss_sum(a.sum, sum, slot);
}

void run_backward(const kernels::CrossEntropyIndicesBackwardArgs& a) {
  kernels::check_class_index_target(a.input, a.target, kernels::kCrossEntropyIndicesBackward.name);
  const Tensor x = in_compute(a.input);
  compute_into(a.grad_input, [&](auto z, Tensor& g) {
    loss_backward<decltype(z)>(x, a.target, a.ignore_index, a.label_smoothing, a.scale, g);
  });
}

void run_count(const kernels::ClassIndexCountArgs& a) {
  kernels::check_class_index_count(a);
  const std::int64_t* t = a.target.data<std::int64_t>();
  std::int64_t valid = 0, bad = 0;
  std::int64_t lo = std::numeric_limits<std::int64_t>::max();
  std::int64_t hi = std::numeric_limits<std::int64_t>::min();
  for (std::int64_t i = 0; i < a.target.numel(); ++i) {
    const std::int64_t c = t[i];
    if (contributes(c, a.classes, a.ignore_index)) {
      ++valid;
    } else if (c != a.ignore_index) {
      ++bad;
      lo = std::min(lo, c);
      hi = std::max(hi, c);
    }
  }
  double* out = Tensor(a.counts).data<double>();
  out[0] = static_cast<double>(valid);
  out[1] = static_cast<double>(bad);
  out[2] = bad ? static_cast<double>(lo) : std::numeric_limits<double>::infinity();
  out[3] = bad ? static_cast<double>(hi) : -std::numeric_limits<double>::infinity();
}

void run_records_merge(const kernels::ClassIndexRecordsMergeArgs& a) {
  using Record = kernels::ClassIndexRecordsMergeArgs;
  constexpr std::int64_t kFields = Record::kFields;
  DTENSOR_CHECK_ARG(
      a.all.dtype() == DType::F64 && a.out.dtype() == DType::F64 && a.all.is_contiguous() &&
          a.out.is_contiguous() && a.out.numel() == kFields && a.all.numel() % kFields == 0,
      kernels::kClassIndexRecordsMerge.name,
      "internal: records {} {} and {} {}, f64 rows of {} expected", dtype_name(a.all.dtype()),
      shape_str(a.all.shape()), dtype_name(a.out.dtype()), shape_str(a.out.shape()), kFields);
  const double* in = a.all.data<double>();
  double* out = Tensor(a.out).data<double>();
  double sum = 0, counted = 0, out_of_range = 0;
  double smallest = std::numeric_limits<double>::infinity();
  double largest = -std::numeric_limits<double>::infinity();
  for (std::int64_t q = 0; q < a.all.numel() / kFields; ++q) {
    const double* r = in + q * kFields;
    sum += r[Record::kSum];
    counted += r[Record::kCounted];
    out_of_range += r[Record::kOutOfRange];
    smallest = std::min(smallest, r[Record::kSmallest]);
    largest = std::max(largest, r[Record::kLargest]);
  }
  out[Record::kSum] = sum;
  out[Record::kCounted] = counted;
  out[Record::kOutOfRange] = out_of_range;
  out[Record::kSmallest] = smallest;
  out[Record::kLargest] = largest;
}

struct Registrar {
  Registrar() {
    const auto cpu = DeviceType::CPU;
    for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
      register_kernel(kernels::kCrossEntropyIndices, cpu, dt,
                      KernelFunction<kernels::CrossEntropyIndicesArgs>(run_forward));
      register_kernel(kernels::kCrossEntropyIndicesBackward, cpu, dt,
                      KernelFunction<kernels::CrossEntropyIndicesBackwardArgs>(run_backward));
    }
    register_kernel(kernels::kClassIndexCount, cpu, DType::I64,
                    KernelFunction<kernels::ClassIndexCountArgs>(run_count));
    register_kernel(kernels::kClassIndexRecordsMerge, cpu, DType::F64,
                    KernelFunction<kernels::ClassIndexRecordsMergeArgs>(run_records_merge));
  }
};
const Registrar registrar;

}  // namespace
}  // namespace dtensor::cpu
