// CPU kernels of the broadcasting binary operators (add, sub, mul, div,
// maximum, minimum, maximum_share) and of sum_to_size, vectorised in the
// data's own type (f32, f64; bf16 and f16 widened to f32 and rounded once).
//
// Broadcasting is done with strides: a broadcast dim has stride 0 in its
// operand, and dims that are contiguous in the output and in both operands
// are merged, so the innermost loop runs over a stretch where each operand
// either advances by one (v) or stays on one element (s). Those three loop
// forms (vv, vs, sv) are the vectorised ones; the outer dims are walked by
// index, in parallel for large tensors.
//
// maximum/minimum propagate NaN from either side (torch.maximum).
#include <algorithm>
#include <type_traits>

#include "backends/cpu/parallel_region.h"
#include "backends/cpu/simd.h"
#include "dtensor/ops/kernels/elementwise_math.h"
#include "dtensor/ops/kernels/reduce.h"
#include "dtensor/ops/registry.h"

namespace dtensor::cpu {
namespace {

using Int = std::int64_t;

// Tensors smaller than this run on one thread.
constexpr Int kParallelElements = Int{1} << 16;

#define DTENSOR_BINARY_FORM(NAME, TYPE, XA, ZB, FN)                                                \
  DTENSOR_SIMD_CLONES void NAME(const TYPE* a, const TYPE* b, std::add_pointer_t<TYPE> y, Int n) { \
    using T = TYPE;                                                                                \
    using Fn = FN;                                                                                 \
    _Pragma("omp simd") for (Int j = 0; j < n; ++j) {                                              \
      const T x = (XA), z = (ZB);                                                                  \
      y[j] = Fn{}(x, z);                                                                           \
    }                                                                                              \
  }
#define DTENSOR_BINARY_TYPE(NAME, T, FN)            \
  DTENSOR_BINARY_FORM(NAME##_vv, T, a[j], b[j], FN) \
  DTENSOR_BINARY_FORM(NAME##_vs, T, a[j], b[0], FN) \
  DTENSOR_BINARY_FORM(NAME##_sv, T, a[0], b[j], FN)
#define DTENSOR_BINARY(NAME, FN)       \
  DTENSOR_BINARY_TYPE(NAME, float, FN) \
  DTENSOR_BINARY_TYPE(NAME, double, FN)

// The formulas every backend shares (dtensor/ops/kernels/elementwise_math.h).
namespace ew = kernels::elementwise;
DTENSOR_BINARY(add, ew::Add)
DTENSOR_BINARY(sub, ew::Sub)
DTENSOR_BINARY(mul, ew::Mul)
DTENSOR_BINARY(div, ew::Div)
DTENSOR_BINARY(maximum, ew::Maximum)
DTENSOR_BINARY(minimum, ew::Minimum)
DTENSOR_BINARY(maximum_share, ew::MaximumShare)
#undef DTENSOR_BINARY
#undef DTENSOR_BINARY_TYPE
#undef DTENSOR_BINARY_FORM

template <typename T>
using Form = void (*)(const T*, const T*, T*, Int);
template <typename T>
struct Forms {
  Form<T> vv, vs, sv;
};

// An iteration over the output's elements: sizes of the merged dims, and
// per operand its stride along each (0 where broadcast).
struct Walk {
  Shape sizes;
  std::vector<Shape> strides;  // one list per operand
};

// `operands` are contiguous tensors of shapes broadcastable to `out`.
Walk make_walk(const Shape& out, const std::vector<Shape>& operands) {
  const Int nd = static_cast<Int>(out.size());
  std::vector<Shape> full(operands.size(), Shape(out.size(), 0));
  for (std::size_t o = 0; o < operands.size(); ++o) {
    const Shape& s = operands[o];
    const Shape cs = contiguous_strides(s);
    const Int off = nd - static_cast<Int>(s.size());
    for (Int d = off; d < nd; ++d) {
      const auto k = static_cast<std::size_t>(d - off);
      full[o][static_cast<std::size_t>(d)] = s[k] == 1 ? 0 : cs[k];
    }
  }
  Walk w;
  w.strides.assign(operands.size(), {});
  for (Int d = 0; d < nd; ++d) {
    const Int n = out[static_cast<std::size_t>(d)];
    if (n == 1) continue;  // a dim of one element moves nothing
    bool merge = !w.sizes.empty();
    for (std::size_t o = 0; merge && o < operands.size(); ++o)
      merge = w.strides[o].back() == full[o][static_cast<std::size_t>(d)] * n;
    if (merge) {
      w.sizes.back() *= n;
      for (std::size_t o = 0; o < operands.size(); ++o)
        w.strides[o].back() = full[o][static_cast<std::size_t>(d)];
    } else {
      w.sizes.push_back(n);
      for (std::size_t o = 0; o < operands.size(); ++o)
        w.strides[o].push_back(full[o][static_cast<std::size_t>(d)]);
    }
  }
  if (w.sizes.empty()) {  // one element (or a 0-d output)
    w.sizes.push_back(1);
    for (auto& s : w.strides)
      s.push_back(1);
  }
  return w;
}

// The offsets in each operand of the start of outer row `row` (the rows run
// over all merged dims but the last).
void row_offsets(const Walk& w, Int row, Int* offsets) {
  const std::size_t outer = w.sizes.size() - 1;
  for (std::size_t o = 0; o < w.strides.size(); ++o)
    offsets[o] = 0;
  for (std::size_t d = outer; d-- > 0;) {
    const Int i = row % w.sizes[d];
    row /= w.sizes[d];
    for (std::size_t o = 0; o < w.strides.size(); ++o)
      offsets[o] += i * w.strides[o][d];
  }
}

template <typename T>
void run_binary(const Forms<T>& f, const Tensor& a, const Tensor& b, Tensor& y) {
  const Walk w = make_walk(y.shape(), {a.shape(), b.shape()});
  const Int n = w.sizes.back();
  const Int sa = w.strides[0].back(), sb = w.strides[1].back();
  const Form<T> form = sa != 0 && sb != 0 ? f.vv : sa != 0 ? f.vs : sb != 0 ? f.sv : f.vv;
  Int rows = 1;
  for (std::size_t d = 0; d + 1 < w.sizes.size(); ++d)
    rows *= w.sizes[d];
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* py = y.data<T>();
  if (rows == 1) {
    // One stretch (equal shapes, or a scalar operand): split it over the threads.
    parallel_blocks(n, kParallelElements,
                    [&](Int lo, Int hi) { form(pa + lo * sa, pb + lo * sb, py + lo, hi - lo); });
    return;
  }
  parallel_region(y.numel() >= kParallelElements, [&] {
#pragma omp for schedule(static)
    for (Int r = 0; r < rows; ++r) {
      Int off[2];
      row_offsets(w, r, off);
      form(pa + off[0], pb + off[1], py + r * n, n);
    }
  });
}

LocalKernel binary_kernel(Forms<float> f32, Forms<double> f64) {
  return [f32, f64](const KernelCall& c) -> std::vector<Tensor> {
    const DType dt = c.local(0).dtype();
    const DType work = dt == DType::F64 ? DType::F64 : DType::F32;
    const auto in_work = [work](const Tensor& t) {
      return t.dtype() == work ? t.contiguous() : t.to(work);
    };
    const Tensor a = in_work(c.local(0)), b = in_work(c.local(1));
    // The local operands broadcast like the global ones: a sharded dim is
    // sharded alike in both, or the operand is broadcast (size 1) there.
    const Shape& sa = a.shape();
    const Shape& sb = b.shape();
    const std::size_t nd = std::max(sa.size(), sb.size());
    Shape out(nd);
    for (std::size_t k = 0; k < nd; ++k) {
      const Int x = k + sa.size() >= nd ? sa[k + sa.size() - nd] : 1;
      const Int z = k + sb.size() >= nd ? sb[k + sb.size() - nd] : 1;
      out[k] = x == 1 ? z : x;
    }
    Tensor y = Tensor::empty(out, work);
    if (y.numel() > 0) {
      if (work == DType::F64)
        run_binary<double>(f64, a, b, y);
      else
        run_binary<float>(f32, a, b, y);
    }
    return {dt == work ? y : y.to(dt)};
  };
}

// ---- sum_to_size ----

DTENSOR_SIMD_CLONES void accumulate_rows(const double* g, double* y, Int n) {
#pragma omp simd
  for (Int j = 0; j < n; ++j)
    y[j] += g[j];
}
DTENSOR_SIMD_CLONES double sum_row(const double* g, Int n) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (Int j = 0; j < n; ++j)
    s += g[j];
  return s;
}

// Sums the local gradient over the dims the target is broadcast along, in f64
// (a shard's partial sums then add up across ranks like one process's sum).
Tensor sum_to(const Tensor& g_local, const Shape& local_target, DType dt) {
  const Tensor g = g_local.to(DType::F64).contiguous();
  Tensor y = Tensor::zeros(local_target, DType::F64);
  if (g.numel() > 0) {
    // Walk g's elements; the target's strides are 0 along the summed dims.
    Walk w = make_walk(g.shape(), {g.shape(), local_target});
    const Int n = w.sizes.back();
    Int rows = 1;
    for (std::size_t d = 0; d + 1 < w.sizes.size(); ++d)
      rows *= w.sizes[d];
    const double* pg = g.data<double>();
    double* py = y.data<double>();
    const bool inner_kept = w.strides[1].back() != 0;
    for (Int r = 0; r < rows; ++r) {
      Int off[2];
      row_offsets(w, r, off);
      if (inner_kept)
        accumulate_rows(pg + off[0], py + off[1], n);
      else
        py[off[1]] += sum_row(pg + off[0], n);
    }
  }
  return dt == DType::F64 ? y : y.to(dt);
}

LocalKernel sum_to_size_kernel() {
  return [](const KernelCall& c) -> std::vector<Tensor> {
    const Tensor& g = c.local(0);
    return {sum_to(g, kernels::sum_to_size_target(c).local, g.dtype())};
  };
}

#define DTENSOR_FORMS(NAME)                                    \
  binary_kernel(Forms<float>{NAME##_vv, NAME##_vs, NAME##_sv}, \
                Forms<double>{NAME##_vv, NAME##_vs, NAME##_sv})

struct Registrar {
  Registrar() {
    const auto cpu = DeviceType::CPU;
    for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
      register_kernel("add", cpu, dt, DTENSOR_FORMS(add));
      register_kernel("sub", cpu, dt, DTENSOR_FORMS(sub));
      register_kernel("mul", cpu, dt, DTENSOR_FORMS(mul));
      register_kernel("div", cpu, dt, DTENSOR_FORMS(div));
      register_kernel("maximum", cpu, dt, DTENSOR_FORMS(maximum));
      register_kernel("minimum", cpu, dt, DTENSOR_FORMS(minimum));
      register_kernel("maximum_share", cpu, dt, DTENSOR_FORMS(maximum_share));
      register_kernel("sum_to_size", cpu, dt, sum_to_size_kernel());
    }
  }
};
#undef DTENSOR_FORMS
const Registrar registrar;

}  // namespace
}  // namespace dtensor::cpu
