#include "tools/dtensor-conv/check.h"

#include <limits>

#include "tools/dtensor-conv/tolerance.h"
#include "tools/reference/reference_conv.h"

namespace dtensor::conv_cli {
namespace {

std::int64_t prod_from(const Shape& s, std::size_t first) {
  std::int64_t p = 1;
  for (std::size_t i = first; i < s.size(); ++i)
    p *= s[i];
  return p;
}

TensorCheck compare(const std::string& name, const Tensor& got, const Tensor& ref,
                    std::int64_t terms, DType dtype, int ranks) {
  TensorCheck c;
  c.name = name;
  c.ref_max = max_abs(ref);
  c.tolerance = tolerance(dtype, terms, ranks, c.ref_max);
  if (!got.defined() || got.shape() != ref.shape()) {
    // A missing result or a wrong shape is a failure, reported as an infinite error.
    c.max_abs_err = std::numeric_limits<double>::infinity();
    return c;
  }
  c.max_abs_err = max_abs_diff(got.to(DType::F64), ref);
  c.ok = c.max_abs_err <= c.tolerance;  // false for NaN
  return c;
}

}  // namespace

std::vector<TensorCheck> check_against_reference(const Options& o, const GlobalTensors& g,
                                                 int ranks) {
  using namespace dtensor::reference;
  const ConvParams p = o.conv_params();
  const Shape& w = g.weight.shape();
  const std::int64_t groups = p.groups;
  const std::int64_t ksize = prod_from(w, 2);
  std::vector<TensorCheck> out;

  const Tensor y_ref = ref_conv_forward(g.input, g.weight, g.bias, p);
  out.push_back(
      compare("output", g.output, y_ref, w[1] * ksize + (o.bias ? 1 : 0), o.dtype, ranks));

  if (o.backward) {
    const std::int64_t per_output = g.grad_output.shape()[0] * prod_from(g.grad_output.shape(), 2);
    // Every gradient was asked for: a missing one fails (PyTorch's _tp_conv.py
    // loses grad_input, docs/design.md §2).
    out.push_back(compare("grad_input", g.grad_input,
                          ref_conv_grad_input(g.grad_output, g.weight, g.input.shape(), p),
                          (w[0] / groups) * ksize, o.dtype, ranks));
    out.push_back(compare("grad_weight", g.grad_weight,
                          ref_conv_grad_weight(g.grad_output, g.input, w, p), per_output, o.dtype,
                          ranks));
    if (o.bias)
      out.push_back(compare("grad_bias", g.grad_bias, ref_conv_grad_bias(g.grad_output), per_output,
                            o.dtype, ranks));
  }
  return out;
}

}  // namespace dtensor::conv_cli
