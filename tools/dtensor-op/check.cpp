#include "tools/dtensor-op/check.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "tools/dtensor-conv/tolerance.h"
#include "tools/reference/reference_conv.h"
#include "tools/reference/reference_window_ops.h"

namespace dtensor::op_cli {
namespace {

using Int = std::int64_t;

Int prod_from(const Shape& s, std::size_t first) {
  Int p = 1;
  for (std::size_t i = first; i < s.size(); ++i)
    p *= s[i];
  return p;
}

// Largest |got - ref|, where equal values (infinities included: a max pool
// window without any input element yields -inf, as PyTorch's) and NaN
// against NaN count as no error, and NaN against a number as an infinite one.
double max_abs_err(const Tensor& got, const Tensor& ref) {
  const Tensor a = got.to(DType::F64), b = ref.to(DType::F64);
  const double *pa = a.data<double>(), *pb = b.data<double>();
  double err = 0;
  for (Int i = 0; i < a.numel(); ++i) {
    if (pa[i] == pb[i] || (std::isnan(pa[i]) && std::isnan(pb[i]))) continue;
    const double d = std::abs(pa[i] - pb[i]);
    err = std::max(err, std::isnan(d) ? std::numeric_limits<double>::infinity() : d);
  }
  return err;
}

// Largest finite |ref| (the scale of the tolerance).
double max_finite_abs(const Tensor& ref) {
  const Tensor b = ref.to(DType::F64);
  double m = 0;
  for (Int i = 0; i < b.numel(); ++i)
    if (std::isfinite(b.data<double>()[i])) m = std::max(m, std::abs(b.data<double>()[i]));
  return m;
}

// `exact`: the result is a selection or a copy of input values, so it must
// equal the oracle's bit for bit.
TensorCheck compare(const std::string& name, const Tensor& got, const Tensor& ref, Int terms,
                    DType dtype, int ranks, bool exact = false) {
  TensorCheck c;
  c.name = name;
  c.ref_max = max_finite_abs(ref);
  c.tolerance = exact ? 0.0 : conv_cli::tolerance(dtype, terms, ranks, c.ref_max);
  if (!got.defined() || got.shape() != ref.shape()) {
    // A missing result or a wrong shape is a failure, reported as an infinite error.
    c.max_abs_err = std::numeric_limits<double>::infinity();
    return c;
  }
  c.max_abs_err = max_abs_err(got, ref);
  c.ok = c.max_abs_err <= c.tolerance;
  return c;
}

// How many adaptive windows (at most) read one input element, and how many
// elements (at most) one window reads: ceil(L/O) + 1 per dim, a bound for both.
Int adaptive_terms(const Options& o) {
  Int t = 1;
  for (Int i = 0; i < o.spatial_dims(); ++i) {
    const Int L = o.input[2 + static_cast<std::size_t>(i)];
    const Int O = o.output_size[static_cast<std::size_t>(i)];
    t *= (L + O - 1) / O + 1;
  }
  return t;
}

// How many outputs (at most) read one input element of pad.
Int pad_terms(const Options& o) {
  Int t = 1;
  for (Int i = 0; i < o.spatial_dims(); ++i) {
    const Int L = std::max<Int>(o.input[2 + static_cast<std::size_t>(i)], 1);
    const auto [l, r] = o.padding[static_cast<std::size_t>(i)];
    t *= 1 + (std::abs(l) + L - 1) / L + (std::abs(r) + L - 1) / L;
  }
  return t;
}

}  // namespace

std::vector<TensorCheck> check_against_reference(const Options& o, const GlobalTensors& g,
                                                 int ranks) {
  using namespace dtensor::reference;
  std::vector<TensorCheck> out;
  const Shape& x = g.input.shape();
  const Int ksize = prod_from(Shape(o.kernel.begin(), o.kernel.end()), 0);
  const bool bwd = o.backward;
  switch (o.op) {
    case OpKind::Conv: {
      const ConvParams p = o.conv_params();
      const Shape& w = g.weight.shape();
      out.push_back(compare("output", g.output,
                            ref_conv_padding_mode_forward(g.input, g.weight, g.bias, p),
                            w[1] * ksize + (o.bias ? 1 : 0), o.dtype, ranks));
      if (!bwd) break;
      const Int per_output = g.grad_output.shape()[0] * prod_from(g.grad_output.shape(), 2);
      out.push_back(compare("grad_input", g.grad_input,
                            ref_conv_padding_mode_grad_input(g.grad_output, g.weight, x, p),
                            (w[0] / o.groups) * ksize, o.dtype, ranks));
      out.push_back(compare("grad_weight", g.grad_weight,
                            ref_conv_padding_mode_grad_weight(g.grad_output, g.input, w, p),
                            per_output, o.dtype, ranks));
      if (o.bias)
        out.push_back(compare("grad_bias", g.grad_bias, ref_conv_grad_bias(g.grad_output),
                              per_output, o.dtype, ranks));
      break;
    }
    case OpKind::ConvTranspose: {
      const ConvTransposeParams p = o.conv_transpose_params();
      const Shape& w = g.weight.shape();  // [C, K/g, k...]
      out.push_back(compare("output", g.output,
                            ref_conv_transpose_forward(g.input, g.weight, g.bias, p),
                            (w[0] / o.groups) * ksize + (o.bias ? 1 : 0), o.dtype, ranks));
      if (!bwd) break;
      const Int per_output = g.grad_output.shape()[0] * prod_from(g.grad_output.shape(), 2);
      out.push_back(compare("grad_input", g.grad_input,
                            ref_conv_transpose_grad_input(g.grad_output, g.weight, x, p),
                            w[1] * ksize, o.dtype, ranks));
      out.push_back(compare("grad_weight", g.grad_weight,
                            ref_conv_transpose_grad_weight(g.grad_output, g.input, w, p),
                            x[0] * prod_from(x, 2), o.dtype, ranks));
      if (o.bias)
        out.push_back(compare("grad_bias", g.grad_bias, ref_conv_transpose_grad_bias(g.grad_output),
                              per_output, o.dtype, ranks));
      break;
    }
    case OpKind::MaxPool: {
      const PoolParams p = o.pool_params();
      out.push_back(compare("output", g.output, ref_max_pool_forward(g.input, p), 1, o.dtype, ranks,
                            /*exact=*/true));
      if (bwd)
        out.push_back(compare("grad_input", g.grad_input,
                              ref_max_pool_grad_input(g.grad_output, g.input, p), ksize, o.dtype,
                              ranks));
      break;
    }
    case OpKind::AvgPool: {
      const PoolParams p = o.pool_params();
      out.push_back(
          compare("output", g.output, ref_avg_pool_forward(g.input, p), ksize + 1, o.dtype, ranks));
      if (bwd)
        out.push_back(compare("grad_input", g.grad_input,
                              ref_avg_pool_grad_input(g.grad_output, x, p), ksize + 1, o.dtype,
                              ranks));
      break;
    }
    case OpKind::AdaptiveAvgPool:
      out.push_back(compare("output", g.output,
                            ref_adaptive_avg_pool_forward(g.input, o.output_size),
                            adaptive_terms(o) + 1, o.dtype, ranks));
      if (bwd)
        out.push_back(compare("grad_input", g.grad_input,
                              ref_adaptive_avg_pool_grad_input(g.grad_output, x, o.output_size),
                              adaptive_terms(o) + 1, o.dtype, ranks));
      break;
    case OpKind::AdaptiveMaxPool:
      out.push_back(compare("output", g.output,
                            ref_adaptive_max_pool_forward(g.input, o.output_size), 1, o.dtype,
                            ranks, /*exact=*/true));
      if (bwd)
        out.push_back(
            compare("grad_input", g.grad_input,
                    ref_adaptive_max_pool_grad_input(g.grad_output, g.input, o.output_size),
                    adaptive_terms(o), o.dtype, ranks));
      break;
    case OpKind::Pad: {
      // The padding value as the run's dtype stores it.
      const double value = Tensor::full({1}, o.value, o.dtype).item({0});
      out.push_back(compare("output", g.output, ref_pad_forward(g.input, o.padding, o.mode, value),
                            1, o.dtype, ranks));
      if (bwd)
        out.push_back(compare("grad_input", g.grad_input,
                              ref_pad_grad_input(g.grad_output, x, o.padding, o.mode), pad_terms(o),
                              o.dtype, ranks));
      break;
    }
  }
  return out;
}

}  // namespace dtensor::op_cli
