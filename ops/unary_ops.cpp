// Definitions and sharding strategies of the element-wise mathematical
// functions of one tensor (the plain ones of DTENSOR_PLAIN_UNARY_FUNCTIONS:
// exp, log, sqrt, rsqrt, neg, abs, square; clamp, pow) and of their backward
// operators. Their CPU kernels live in backends/cpu/unary_kernels.cpp.
//
// Argument layouts (docs/operators.md):
//   exp | log | sqrt | rsqrt | neg | abs | square: input
//   clamp: input, min (double or None), max (double or None)
//   pow: input, exponent
//   <op>_backward: grad_output, input, then the forward's parameters
//
// Only a function the list marks linear (neg) keeps a Partial input
// Partial; every backward is linear in grad_output: (Partial, Replicate) ->
// Partial.
#include <cmath>

#include "dtensor/core/errors.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/unary.h"
#include "ops/autograd/backward_helpers.h"

namespace dtensor {
namespace {

std::size_t parameter_count(const std::string& op) {
  if (op.rfind("clamp", 0) == 0) return 2;
  if (op.rfind("pow", 0) == 0) return 1;
  return 0;
}

std::vector<TensorMeta> same_as_input(const OpSchema& s) {
  return {{s.dtensor(0).shape(), s.dtensor(0).dtype()}};
}

std::function<std::vector<ShardingSignature>(const OpSchema&)> elementwise(std::size_t n_in,
                                                                           bool linear) {
  return [n_in, linear](const OpSchema& s) {
    std::vector<ShardingSignature> sigs;
    for (std::int64_t d = 0; d < s.dtensor(0).spec().ndim(); ++d)
      sigs.push_back({Placements(n_in, Shard(d)), {Shard(d)}});
    sigs.push_back({Placements(n_in, Replicate()), {Replicate()}});
    if (n_in == 2) sigs.push_back({{Partial(), Replicate()}, {Partial()}});
    if (n_in == 1 && linear) sigs.push_back({{Partial()}, {Partial()}});
    return sigs;
  };
}

// The parameters from position `at` on: clamp's bounds (a double or None,
// at least one given, finite, min <= max is not required: torch.clamp sets
// everything to max then), pow's exponent (finite).
void check_parameters(const OpSchema& s, std::size_t at) {
  if (s.op().rfind("clamp", 0) == 0) {
    const bool has_min = !s.is_none(at), has_max = !s.is_none(at + 1);
    check_arg(has_min || has_max, s.op(), "min, max: at least one bound is needed");
    if (has_min) check_arg(!std::isnan(s.scalar(at)), s.op(), "min: NaN is not a bound");
    if (has_max) check_arg(!std::isnan(s.scalar(at + 1)), s.op(), "max: NaN is not a bound");
  } else if (s.op().rfind("pow", 0) == 0) {
    const double e = s.scalar(at);
    check_arg(std::isfinite(e), s.op(), "exponent: must be finite, got {}", e);
  }
}

void check_forward(const OpSchema& s) {
  const std::size_t n = 1 + parameter_count(s.op());
  DTENSOR_CHECK_ARG(s.size() == n, s.op(), "{} arguments given, {} expected", s.size(), n);
  s.dtensor(0);
  check_parameters(s, 1);
}

void check_backward(const OpSchema& s) {
  const std::size_t n = 2 + parameter_count(s.op());
  DTENSOR_CHECK_ARG(s.size() == n, s.op(), "{} arguments given, {} expected", s.size(), n);
  const DTensor& g = s.dtensor(0);
  const DTensor& x = s.dtensor(1);
  DTENSOR_CHECK_ARG(g.shape() == x.shape(), s.op(),
                    "grad_output: shape {} differs from the input's {}", shape_str(g.shape()),
                    shape_str(x.shape()));
  DTENSOR_CHECK_ARG(g.dtype() == x.dtype(), s.op(),
                    "grad_output: dtype {} differs from the input's {}", dtype_name(g.dtype()),
                    dtype_name(x.dtype()));
  check_parameters(s, 2);
}

void register_unary(const std::string& op, bool linear) {
  OpDef forward;
  forward.name = op;
  forward.validate = check_forward;
  forward.output_meta = same_as_input;
  forward.signatures = elementwise(1, linear);
  forward.backward = autograd::detail::via_backward_op(op + "_backward");
  register_op(forward);

  OpDef backward;
  backward.name = op + "_backward";
  backward.validate = check_backward;
  backward.output_meta = same_as_input;
  backward.signatures = elementwise(2, false);
  register_op(backward);
}

struct Registrar {
  Registrar() {
#define DTENSOR_REGISTER_PLAIN(NAME, FUNCTION, OP, POSITIVE, LINEAR) register_unary(#OP, LINEAR);
    DTENSOR_PLAIN_UNARY_FUNCTIONS(DTENSOR_REGISTER_PLAIN)
#undef DTENSOR_REGISTER_PLAIN
    register_unary("clamp", false);
    register_unary("pow", false);
  }
};
const Registrar registrar;

OpArg bound(std::optional<double> v) {
  return v ? OpArg(*v) : OpArg(None{});
}

DTensor one(const char* op, std::vector<OpArg> args) {
  return dispatch(op, std::move(args)).at(0);
}

}  // namespace

#define DTENSOR_DEFINE_PLAIN_UNARY(NAME, FUNCTION, OP, POSITIVE, LINEAR)    \
  DTensor FUNCTION(const DTensor& input) {                                  \
    return one(#OP, {input});                                               \
  }                                                                         \
  DTensor OP##_backward(const DTensor& grad_output, const DTensor& input) { \
    return one(#OP "_backward", {grad_output, input});                      \
  }
DTENSOR_PLAIN_UNARY_FUNCTIONS(DTENSOR_DEFINE_PLAIN_UNARY)
#undef DTENSOR_DEFINE_PLAIN_UNARY

DTensor clamp(const DTensor& input, std::optional<double> min, std::optional<double> max) {
  return one("clamp", {input, bound(min), bound(max)});
}
DTensor pow(const DTensor& input, double exponent) {
  return one("pow", {input, exponent});
}

DTensor clamp_backward(const DTensor& grad_output, const DTensor& input, std::optional<double> min,
                       std::optional<double> max) {
  return one("clamp_backward", {grad_output, input, bound(min), bound(max)});
}
DTensor pow_backward(const DTensor& grad_output, const DTensor& input, double exponent) {
  return one("pow_backward", {grad_output, input, exponent});
}

}  // namespace dtensor
