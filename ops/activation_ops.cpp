// Definitions and sharding strategies of the activation functions (their CPU
// kernels live in backends/eigen/activation_kernels.cpp).
//
// Argument layouts (docs/operators.md):
//   leaky_relu: input, negative_slope      leaky_relu_backward: grad_output, input, negative_slope
//   gelu: input, approximate ("none"|"tanh") gelu_backward: grad_output, input, approximate
//   silu | sigmoid | tanh: input           *_backward: grad_output, input
//
// None is linear in its input, so a Partial input is reduced first; every
// backward is linear in grad_output: (Partial, Replicate) -> Partial.
#include <cmath>

#include "dtensor/core/errors.h"
#include "dtensor/ops/activations.h"
#include "dtensor/ops/dispatch.h"
#include "ops/autograd/backward_helpers.h"

namespace dtensor {
namespace {

std::vector<TensorMeta> same_as_input(const OpSchema& s) {
  return {{s.dtensor(0).shape(), s.dtensor(0).dtype()}};
}

// Shard(d) on every input and the output for every tensor dim, Replicate,
// and (backward) Partial grad_output with a replicated input.
std::function<std::vector<ShardingSignature>(const OpSchema&)> elementwise(std::size_t n_in) {
  return [n_in](const OpSchema& s) {
    std::vector<ShardingSignature> sigs;
    for (std::int64_t d = 0; d < s.dtensor(0).spec().ndim(); ++d)
      sigs.push_back({Placements(n_in, Shard(d)), {Shard(d)}});
    sigs.push_back({Placements(n_in, Replicate()), {Replicate()}});
    if (n_in == 2) sigs.push_back({{Partial(), Replicate()}, {Partial()}});
    return sigs;
  };
}

void check_param(const OpSchema& s, std::size_t at) {
  if (s.op().rfind("leaky_relu", 0) == 0) {
    const double slope = s.scalar(at);
    check_arg(std::isfinite(slope), s.op(), "negative_slope: must be finite, got {}", slope);
  } else if (s.op().rfind("gelu", 0) == 0) {
    const std::string& a = s.text(at);
    check_arg(a == "none" || a == "tanh", s.op(),
              "approximate: \"none\" or \"tanh\" expected, got \"{}\"", a);
  }
}

void check_forward(const OpSchema& s) {
  const bool param = s.op() == "leaky_relu" || s.op() == "gelu";
  DTENSOR_CHECK_ARG(s.size() == (param ? 2u : 1u), s.op(), "{} arguments given, {} expected",
                    s.size(), param ? 2 : 1);
  s.dtensor(0);
  if (param) check_param(s, 1);
}

void check_backward(const OpSchema& s) {
  const bool param = s.op() == "leaky_relu_backward" || s.op() == "gelu_backward";
  DTENSOR_CHECK_ARG(s.size() == (param ? 3u : 2u), s.op(), "{} arguments given, {} expected",
                    s.size(), param ? 3 : 2);
  const DTensor& g = s.dtensor(0);
  const DTensor& x = s.dtensor(1);
  DTENSOR_CHECK_ARG(g.shape() == x.shape(), s.op(),
                    "grad_output: shape {} differs from the input's {}", shape_str(g.shape()),
                    shape_str(x.shape()));
  DTENSOR_CHECK_ARG(g.dtype() == x.dtype(), s.op(),
                    "grad_output: dtype {} differs from the input's {}", dtype_name(g.dtype()),
                    dtype_name(x.dtype()));
  if (param) check_param(s, 2);
}

OpDef make_def(std::string name, bool backward) {
  OpDef d;
  d.name = std::move(name);
  d.validate = backward ? check_backward : check_forward;
  d.output_meta = same_as_input;
  d.signatures = elementwise(backward ? 2 : 1);
  return d;
}

struct Registrar {
  Registrar() {
    for (const char* op : {"leaky_relu", "gelu", "silu", "sigmoid", "tanh"}) {
      OpDef forward = make_def(op, false);
      forward.backward = autograd::detail::via_backward_op(std::string(op) + "_backward");
      register_op(forward);
      register_op(make_def(std::string(op) + "_backward", true));
    }
  }
};
const Registrar registrar;

DTensor one(std::vector<DTensor> v) {
  return std::move(v.at(0));
}

}  // namespace

std::string_view gelu_approximate_name(GeluApproximate a) {
  return a == GeluApproximate::None ? "none" : "tanh";
}

DTensor leaky_relu(const DTensor& input, double negative_slope) {
  return one(dispatch("leaky_relu", {input, negative_slope}));
}
DTensor leaky_relu_backward(const DTensor& grad_output, const DTensor& input,
                            double negative_slope) {
  return one(dispatch("leaky_relu_backward", {grad_output, input, negative_slope}));
}
DTensor gelu(const DTensor& input, GeluApproximate approximate) {
  return one(dispatch("gelu", {input, std::string(gelu_approximate_name(approximate))}));
}
DTensor gelu_backward(const DTensor& grad_output, const DTensor& input,
                      GeluApproximate approximate) {
  return one(dispatch("gelu_backward",
                      {grad_output, input, std::string(gelu_approximate_name(approximate))}));
}
DTensor silu(const DTensor& input) {
  return one(dispatch("silu", {input}));
}
DTensor silu_backward(const DTensor& grad_output, const DTensor& input) {
  return one(dispatch("silu_backward", {grad_output, input}));
}
DTensor sigmoid(const DTensor& input) {
  return one(dispatch("sigmoid", {input}));
}
DTensor sigmoid_backward(const DTensor& grad_output, const DTensor& input) {
  return one(dispatch("sigmoid_backward", {grad_output, input}));
}
DTensor tanh(const DTensor& input) {
  return one(dispatch("tanh", {input}));
}
DTensor tanh_backward(const DTensor& grad_output, const DTensor& input) {
  return one(dispatch("tanh_backward", {grad_output, input}));
}

}  // namespace dtensor
