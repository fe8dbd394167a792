// The parameters of the element-wise functions and activations as their
// kernels take them (dtensor/ops/kernels/elementwise.h): the argument layouts
// of ops/unary_ops.cpp and ops/activation_ops.cpp, decoded for every backend.
#include <limits>
#include <string>

#include "dtensor/ops/kernels/elementwise.h"

namespace dtensor::kernels {

ElementwiseParams elementwise_params(const OpSchema& schema) {
  const std::string& op = schema.op();
  const auto starts = [&](const char* name) { return op.rfind(name, 0) == 0; };
  ElementwiseParams p;
  const std::string suffix = "_backward";
  p.backward = op.size() > suffix.size() &&
               op.compare(op.size() - suffix.size(), suffix.size(), suffix) == 0;
  const std::size_t at = p.backward ? 2 : 1;  // the first argument after the tensors
  if (starts("clamp")) {
    constexpr double inf = std::numeric_limits<double>::infinity();
    p.s = schema.size() > at && !schema.is_none(at) ? schema.scalar(at) : -inf;
    p.t = schema.size() > at + 1 && !schema.is_none(at + 1) ? schema.scalar(at + 1) : inf;
  } else if (starts("pow") || starts("leaky_relu")) {
    p.s = schema.scalar(at);
  } else if (starts("gelu")) {
    p.t = schema.text(at) == "tanh" ? 1.0 : 0.0;
  }
  return p;
}

}  // namespace dtensor::kernels
