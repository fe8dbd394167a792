#include "tools/reference/reference_tensor_ops.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace dtensor::reference {
namespace {

using Int = std::int64_t;

// The flat index in `shape` (broadcast to `out`) of out's flat element i.
Int broadcast_index(const Shape& out, const Shape& shape, Int i) {
  const auto off = static_cast<Int>(out.size() - shape.size());
  Int idx = 0, stride = 1;
  for (auto d = static_cast<Int>(out.size()) - 1; d >= 0; --d) {
    const Int n = out[static_cast<std::size_t>(d)];
    const Int k = i % n;
    i /= n;
    if (d >= off) {
      const Int m = shape[static_cast<std::size_t>(d - off)];
      idx += (m == 1 ? 0 : k) * stride;
      stride *= m;
    }
  }
  return idx;
}

double binary(std::string_view op, double x, double z) {
  if (op == "add") return x + z;
  if (op == "sub") return x - z;
  if (op == "mul") return x * z;
  if (op == "div") return x / z;
  if (op == "maximum") return std::isnan(x) || std::isnan(z) ? std::nan("") : std::max(x, z);
  if (op == "minimum") return std::isnan(x) || std::isnan(z) ? std::nan("") : std::min(x, z);
  throw std::invalid_argument("ref_binary: unknown op " + std::string(op));
}

// a's share of maximum(a, b)'s gradient.
double share(double x, double z) {
  return x > z ? 1.0 : x == z ? 0.5 : 0.0;
}

// d op / d x and d op / d z.
std::pair<double, double> binary_derivatives(std::string_view op, double x, double z) {
  if (op == "add") return {1, 1};
  if (op == "sub") return {1, -1};
  if (op == "mul") return {z, x};
  if (op == "div") return {1 / z, -x / (z * z)};
  if (op == "maximum") return {share(x, z), share(z, x)};
  if (op == "minimum") return {share(z, x), share(x, z)};
  throw std::invalid_argument("ref_binary: unknown op " + std::string(op));
}

double unary(std::string_view op, double x, const RefUnary& p) {
  if (op == "exp") return std::exp(x);
  if (op == "log") return std::log(x);
  if (op == "sqrt") return std::sqrt(x);
  if (op == "rsqrt") return 1 / std::sqrt(x);
  if (op == "neg") return -x;
  if (op == "abs") return std::abs(x);
  if (op == "square") return x * x;
  if (op == "clamp") {
    if (std::isnan(x)) return x;
    if (p.min && x < *p.min) x = *p.min;
    if (p.max && x > *p.max) x = *p.max;
    return x;
  }
  if (op == "pow") return std::pow(x, p.exponent);
  throw std::invalid_argument("ref_unary: unknown op " + std::string(op));
}

double unary_derivative(std::string_view op, double x, const RefUnary& p) {
  if (op == "exp") return std::exp(x);
  if (op == "log") return 1 / x;
  if (op == "sqrt") return 0.5 / std::sqrt(x);
  if (op == "rsqrt") return -0.5 / (x * std::sqrt(x));
  if (op == "neg") return -1;
  if (op == "abs") return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0;
  if (op == "square") return 2 * x;
  if (op == "clamp") {
    const double lo = p.min.value_or(-std::numeric_limits<double>::infinity());
    const double hi = p.max.value_or(std::numeric_limits<double>::infinity());
    return x >= lo && x <= hi ? 1.0 : 0.0;
  }
  if (op == "pow") return p.exponent == 0 ? 0.0 : p.exponent * std::pow(x, p.exponent - 1);
  throw std::invalid_argument("ref_unary: unknown op " + std::string(op));
}

}  // namespace

Tensor ref_binary_forward(std::string_view op, const Tensor& a, const Tensor& b) {
  const Tensor A = a.to(DType::F64), B = b.to(DType::F64);
  Tensor y = Tensor::empty(a.shape(), DType::F64);
  for (Int i = 0; i < A.numel(); ++i)
    y.data<double>()[i] =
        binary(op, A.item_flat(i), B.item_flat(broadcast_index(a.shape(), b.shape(), i)));
  return y;
}

std::pair<Tensor, Tensor> ref_binary_grads(std::string_view op, const Tensor& grad_output,
                                           const Tensor& a, const Tensor& b) {
  const Tensor A = a.to(DType::F64), B = b.to(DType::F64), G = grad_output.to(DType::F64);
  Tensor ga = Tensor::zeros(a.shape(), DType::F64), gb = Tensor::zeros(b.shape(), DType::F64);
  for (Int i = 0; i < A.numel(); ++i) {
    const Int j = broadcast_index(a.shape(), b.shape(), i);
    const auto [da, db] = binary_derivatives(op, A.item_flat(i), B.item_flat(j));
    ga.data<double>()[i] += G.item_flat(i) * da;
    gb.data<double>()[j] += G.item_flat(i) * db;
  }
  return {ga, gb};
}

Tensor ref_unary_forward(std::string_view op, const Tensor& x, const RefUnary& p) {
  const Tensor X = x.to(DType::F64);
  Tensor y = Tensor::empty(x.shape(), DType::F64);
  for (Int i = 0; i < X.numel(); ++i)
    y.data<double>()[i] = unary(op, X.item_flat(i), p);
  return y;
}

Tensor ref_unary_grad_input(std::string_view op, const Tensor& grad_output, const Tensor& x,
                            const RefUnary& p) {
  const Tensor X = x.to(DType::F64), G = grad_output.to(DType::F64);
  Tensor y = Tensor::empty(x.shape(), DType::F64);
  for (Int i = 0; i < X.numel(); ++i)
    y.data<double>()[i] = G.item_flat(i) * unary_derivative(op, X.item_flat(i), p);
  return y;
}

}  // namespace dtensor::reference
