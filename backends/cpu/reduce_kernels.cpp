// CPU kernels of the reductions over dims (sum_dims, mean_dims, amax, amin),
// of their backward helpers (reduce_expand, reduce_tie_mask) and of var's
// slots (reduce.moments, reduce.var_from_moments).
//
// Every kernel reads its operands in f64 (f32, bf16 and f16 widened once) and
// rounds its result once to the data's dtype: a sum of many f32 elements is
// accumulated in f64, so a sharded sum and a single-process one agree to the
// rounding of the final value. The input is walked as rows along its last
// dim; a result's offset comes from strides that are 0 along the reduced dims,
// so the inner loop either folds a row into one result (last dim reduced) or
// runs along a row of results (last dim kept), both vectorisable.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/simd.h"
#include "dtensor/ops/kernels/norm.h"
#include "dtensor/ops/kernels/reduce.h"
#include "dtensor/ops/registry.h"

namespace dtensor::cpu {
namespace {

using Int = std::int64_t;

// x's rows (every dim but the last) and where each one's results start.
struct RowWalk {
  Shape sizes;        // x's shape; {1} for a 0-d x
  Shape out_strides;  // the keepdim result's contiguous strides, 0 along reduced dims
  Int rows = 1;
  Int n = 1;                   // elements per row
  bool inner_reduced = false;  // the last dim is reduced: a row folds into one result

  RowWalk(const Shape& x, const std::vector<bool>& reduced)
      : sizes(x.empty() ? Shape{1} : x), out_strides(sizes.size(), 0) {
    Int stride = 1;
    for (std::size_t d = sizes.size(); d-- > 0;) {
      const bool r = !x.empty() && reduced[d];
      out_strides[d] = r ? 0 : stride;
      if (!r) stride *= sizes[d];
    }
    n = sizes.back();
    inner_reduced = out_strides.back() == 0;
    for (std::size_t d = 0; d + 1 < sizes.size(); ++d)
      rows *= sizes[d];
  }

  // The offset in the result of row `row`'s first element.
  Int out_offset(Int row) const {
    Int off = 0;
    for (std::size_t d = sizes.size() - 1; d-- > 0;) {
      off += (row % sizes[d]) * out_strides[d];
      row /= sizes[d];
    }
    return off;
  }
};

// The keepdim shape of a reduction of x.
Shape keepdim_shape(const Shape& x, const std::vector<bool>& reduced) {
  Shape out(x);
  for (std::size_t d = 0; d < x.size(); ++d)
    if (reduced[d]) out[d] = 1;
  return out;
}

DTENSOR_SIMD_CLONES double row_sum(const double* x, Int n) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (Int j = 0; j < n; ++j)
    s += x[j];
  return s;
}
DTENSOR_SIMD_CLONES void add_row(const double* x, double* y, Int n) {
#pragma omp simd
  for (Int j = 0; j < n; ++j)
    y[j] += x[j];
}

// The larger (smaller) of a and v; NaN wins, as in torch.amax.
template <bool kMax>
double pick(double a, double v) {
  return ((kMax ? v > a : v < a) || std::isnan(v)) ? v : a;
}

enum class Fold { Sum, Max, Min };

// The keepdim result of folding x (f64, contiguous) over the reduced dims.
Tensor fold(const Tensor& x, const std::vector<bool>& reduced, Fold how) {
  const RowWalk w(x.shape(), reduced);
  const double init = how == Fold::Sum   ? 0.0
                      : how == Fold::Max ? -std::numeric_limits<double>::infinity()
                                         : std::numeric_limits<double>::infinity();
  Tensor out = Tensor::full(keepdim_shape(x.shape(), reduced), init, DType::F64);
  if (x.numel() == 0) return out;
  const double* px = x.data<double>();
  double* po = out.data<double>();
  for (Int r = 0; r < w.rows; ++r) {
    const double* row = px + r * w.n;
    double* o = po + w.out_offset(r);
    if (how == Fold::Sum) {
      if (w.inner_reduced)
        *o += row_sum(row, w.n);
      else
        add_row(row, o, w.n);
    } else {
      const bool mx = how == Fold::Max;
      for (Int j = 0; j < w.n; ++j) {
        double& a = w.inner_reduced ? *o : o[j];
        a = mx ? pick<true>(a, row[j]) : pick<false>(a, row[j]);
      }
    }
  }
  return out;
}

LocalKernel reduction_kernel(Fold how, bool mean) {
  return [how, mean](const KernelCall& c) -> std::vector<Tensor> {
    const Tensor& local = c.local(0);
    const Tensor x = local.to(DType::F64).contiguous();
    const IntList& dims = c.schema.int_list(1);
    Tensor out = fold(x, kernels::reduced_mask(dims, x.shape().size()), how);
    if (mean) {
      // Divided by the global count: the partial terms of a sharded input
      // then add up to the mean.
      const double inv = 1.0 / kernels::reduced_count(c);
      double* p = out.data<double>();
      for (Int i = 0; i < out.numel(); ++i)
        p[i] *= inv;
    }
    return {out.view(c.output_specs.at(0).local_shape()).to(local.dtype())};
  };
}

// reduce_expand: (grad, input, dims, keepdim, scale) -> scale * grad repeated
// along the reduced dims, in the input's local shape.
std::vector<Tensor> expand_kernel(const KernelCall& c) {
  const Tensor& g_local = c.local(0);
  const Shape& xs = c.local(1).shape();
  const auto reduced = kernels::reduced_mask(c.schema.int_list(2), xs.size());
  const double scale = c.schema.scalar(4);
  const Tensor g = g_local.to(DType::F64).contiguous();
  const RowWalk w(xs, reduced);
  Tensor out = Tensor::empty(xs, DType::F64);
  const double* pg = g.data<double>();
  double* po = out.data<double>();
  if (out.numel() > 0) {
    for (Int r = 0; r < w.rows; ++r) {
      const double* gi = pg + w.out_offset(r);
      double* row = po + r * w.n;
      if (w.inner_reduced) {
        const double v = gi[0] * scale;
#pragma omp simd
        for (Int j = 0; j < w.n; ++j)
          row[j] = v;
      } else {
#pragma omp simd
        for (Int j = 0; j < w.n; ++j)
          row[j] = gi[j] * scale;
      }
    }
  }
  return {out.to(g_local.dtype())};
}

// reduce_tie_mask: (input, result, dims, keepdim) -> 1 where the input equals
// its result, else 0, in the input's local shape and dtype.
std::vector<Tensor> tie_mask_kernel(const KernelCall& c) {
  const Tensor& x_local = c.local(0);
  const Tensor x = x_local.to(DType::F64).contiguous();
  const Tensor r = c.local(1).to(DType::F64).contiguous();
  const auto reduced = kernels::reduced_mask(c.schema.int_list(2), x.shape().size());
  const RowWalk w(x.shape(), reduced);
  Tensor out = Tensor::empty(x.shape(), DType::F64);
  const double* px = x.data<double>();
  const double* pr = r.data<double>();
  double* po = out.data<double>();
  if (out.numel() > 0) {
    for (Int row = 0; row < w.rows; ++row) {
      const double* ri = pr + w.out_offset(row);
      const double* xi = px + row * w.n;
      double* o = po + row * w.n;
      for (Int j = 0; j < w.n; ++j)
        o[j] = xi[j] == ri[w.inner_reduced ? 0 : j] ? 1.0 : 0.0;
    }
  }
  return {out.to(x_local.dtype())};
}

// (count, mean, M2) of each result: a row that folds into one result is
// taken in two passes (its mean, then the squares around it) and merged
// with Chan's update; a row of results takes Welford's update per element.
void moments_kernel(const kernels::ReduceMomentsArgs& a) {
  const Tensor x = a.x.to(DType::F64).contiguous();
  const RowWalk w(x.shape(), a.reduced);
  double* pm = a.moments.data<double>();
  std::fill(pm, pm + a.moments.numel(), 0.0);
  if (x.numel() == 0) return;
  const double* px = x.data<double>();
  for (Int r = 0; r < w.rows; ++r) {
    const double* row = px + r * w.n;
    double* m = pm + 3 * w.out_offset(r);
    if (w.inner_reduced) {
      const double mu = row_sum(row, w.n) / static_cast<double>(w.n);
      double m2 = 0;
#pragma omp simd reduction(+ : m2)
      for (Int j = 0; j < w.n; ++j)
        m2 += (row[j] - mu) * (row[j] - mu);
      const double rec[3] = {static_cast<double>(w.n), mu, m2};
      kernels::merge_moments_into(m, rec);
    } else {
      for (Int j = 0; j < w.n; ++j) {
        double* mj = m + 3 * j;
        mj[0] += 1;
        const double d = row[j] - mj[1];
        mj[1] += d / mj[0];
        mj[2] += d * (row[j] - mj[1]);
      }
    }
  }
}

void var_kernel(const kernels::VarFromMomentsArgs& a) {
  const Int n = a.out.numel();
  Tensor v = Tensor::empty({n}, DType::F64);
  const double* pm = a.moments.data<double>();
  double* pv = v.data<double>();
  for (Int i = 0; i < n; ++i)
    pv[i] = pm[3 * i + 2] / std::max(0.0, pm[3 * i] - a.correction);
  a.out.view({n}).copy_(v.to(a.out.dtype()));
}

struct Registrar {
  Registrar() {
    const DeviceType cpu = DeviceType::CPU;
    for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
      register_kernel("sum_dims", cpu, dt, reduction_kernel(Fold::Sum, false));
      register_kernel("mean_dims", cpu, dt, reduction_kernel(Fold::Sum, true));
      register_kernel("amax", cpu, dt, reduction_kernel(Fold::Max, false));
      register_kernel("amin", cpu, dt, reduction_kernel(Fold::Min, false));
      register_kernel("reduce_expand", cpu, dt, LocalKernel(expand_kernel));
      register_kernel("reduce_tie_mask", cpu, dt, LocalKernel(tie_mask_kernel));
      register_kernel(kernels::kReduceMoments, cpu, dt,
                      KernelFunction<kernels::ReduceMomentsArgs>(moments_kernel));
      register_kernel(kernels::kVarFromMoments, cpu, dt,
                      KernelFunction<kernels::VarFromMomentsArgs>(var_kernel));
    }
  }
};
const Registrar registrar;

}  // namespace
}  // namespace dtensor::cpu
