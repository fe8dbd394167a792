#include "tools/reference/reference_reductions.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace dtensor::reference {
namespace {

using Int = std::int64_t;
using Dims = std::vector<Int>;

bool reduced(const Dims& dims, std::size_t d) {
  return std::find(dims.begin(), dims.end(), static_cast<Int>(d)) != dims.end();
}

// The flat index of x's element i in the result (keepdim or not: the same).
Int result_index(const Shape& x, const Dims& dims, Int i) {
  Int idx = 0, stride = 1;
  for (std::size_t d = x.size(); d-- > 0;) {
    const Int k = i % x[d];
    i /= x[d];
    if (reduced(dims, d)) continue;
    idx += k * stride;
    stride *= x[d];
  }
  return idx;
}

Shape result_shape(const Shape& x, const Dims& dims, bool keepdim) {
  Shape out;
  for (std::size_t d = 0; d < x.size(); ++d) {
    if (!reduced(dims, d))
      out.push_back(x[d]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

// The values of x grouped by the result they reduce into, and each element's
// group.
struct Groups {
  std::vector<std::vector<double>> values;
  std::vector<Int> of;  // per element of x
};

Groups group(const Tensor& x, const Dims& dims) {
  Groups g;
  g.values.resize(static_cast<std::size_t>(shape_numel(result_shape(x.shape(), dims, false))));
  g.of.resize(static_cast<std::size_t>(x.numel()));
  for (Int i = 0; i < x.numel(); ++i) {
    const Int r = result_index(x.shape(), dims, i);
    g.of[static_cast<std::size_t>(i)] = r;
    g.values[static_cast<std::size_t>(r)].push_back(x.item_flat(i));
  }
  return g;
}

double sum_of(const std::vector<double>& v) {
  double s = 0;
  for (double e : v)
    s += e;
  return s;
}
double mean_of(const std::vector<double>& v) {
  return sum_of(v) / static_cast<double>(v.size());
}

double reduce(std::string_view op, const std::vector<double>& v, double correction) {
  if (op == "sum") return sum_of(v);
  if (op == "mean") return mean_of(v);
  if (op == "amax" || op == "amin") {
    double m = op == "amax" ? -std::numeric_limits<double>::infinity()
                            : std::numeric_limits<double>::infinity();
    for (double e : v) {
      if (std::isnan(e)) return e;
      m = op == "amax" ? std::max(m, e) : std::min(m, e);
    }
    return m;
  }
  if (op == "var") {
    const double mu = mean_of(v);
    double m2 = 0;
    for (double e : v)
      m2 += (e - mu) * (e - mu);
    return m2 / std::max(0.0, static_cast<double>(v.size()) - correction);
  }
  throw std::invalid_argument("ref_reduce: unknown op " + std::string(op));
}

}  // namespace

Tensor ref_reduce_forward(std::string_view op, const Tensor& x, const Dims& dims, bool keepdim,
                          double correction) {
  const Groups g = group(x.to(DType::F64), dims);
  Tensor y = Tensor::empty(result_shape(x.shape(), dims, keepdim), DType::F64);
  for (std::size_t r = 0; r < g.values.size(); ++r)
    y.data<double>()[r] = reduce(op, g.values[r], correction);
  return y;
}

Tensor ref_reduce_grad_input(std::string_view op, const Tensor& grad_output, const Tensor& x,
                             const Dims& dims, double correction) {
  const Tensor X = x.to(DType::F64), G = grad_output.to(DType::F64);
  const Groups g = group(X, dims);
  Tensor gx = Tensor::empty(x.shape(), DType::F64);
  for (Int i = 0; i < X.numel(); ++i) {
    const auto r = static_cast<std::size_t>(g.of[static_cast<std::size_t>(i)]);
    const auto& v = g.values[r];
    const double n = static_cast<double>(v.size());
    const double gr = G.item_flat(static_cast<Int>(r)), xi = X.item_flat(i);
    double d = 0;
    if (op == "sum") {
      d = 1;
    } else if (op == "mean") {
      d = 1 / n;
    } else if (op == "amax" || op == "amin") {
      const double m = reduce(op, v, 0);
      double ties = 0;
      for (double e : v)
        ties += e == m ? 1 : 0;
      d = xi == m ? 1 / ties : 0;
    } else if (op == "var") {
      d = 2 * (xi - mean_of(v)) / std::max(0.0, n - correction);
    } else {
      throw std::invalid_argument("ref_reduce: unknown op " + std::string(op));
    }
    gx.data<double>()[i] = gr * d;
  }
  return gx;
}

Tensor ref_softmax_forward(bool logarithm, const Tensor& x, Int dim) {
  const Tensor X = x.to(DType::F64);
  const Groups g = group(X, {dim});
  Tensor y = Tensor::empty(x.shape(), DType::F64);
  for (Int i = 0; i < X.numel(); ++i) {
    const auto& v = g.values[static_cast<std::size_t>(g.of[static_cast<std::size_t>(i)])];
    const double m = *std::max_element(v.begin(), v.end());
    double s = 0;
    for (double e : v)
      s += std::exp(e - m);
    const double z = X.item_flat(i) - m;
    y.data<double>()[i] = logarithm ? z - std::log(s) : std::exp(z) / s;
  }
  return y;
}

Tensor ref_softmax_grad_input(bool logarithm, const Tensor& grad_output, const Tensor& x, Int dim) {
  const Tensor G = grad_output.to(DType::F64);
  const Tensor S = ref_softmax_forward(false, x, dim);
  // Per group: sum(g * softmax) for softmax, sum(g) for log_softmax.
  const Groups g = group(x.to(DType::F64), {dim});
  std::vector<double> acc(g.values.size(), 0.0);
  for (Int i = 0; i < G.numel(); ++i)
    acc[static_cast<std::size_t>(g.of[static_cast<std::size_t>(i)])] +=
        logarithm ? G.item_flat(i) : G.item_flat(i) * S.item_flat(i);
  Tensor gx = Tensor::empty(x.shape(), DType::F64);
  for (Int i = 0; i < G.numel(); ++i) {
    const double a = acc[static_cast<std::size_t>(g.of[static_cast<std::size_t>(i)])];
    gx.data<double>()[i] =
        logarithm ? G.item_flat(i) - S.item_flat(i) * a : S.item_flat(i) * (G.item_flat(i) - a);
  }
  return gx;
}

}  // namespace dtensor::reference
