// The tensor API's rows: the broadcasting binary operators, the unary
// functions, the reductions over dims and softmax / log_softmax. Their
// backward runs through autograd, as a user's program gets it.
#include <algorithm>

#include "dtensor/ops/pointwise.h"
#include "dtensor/ops/reductions.h"
#include "dtensor/ops/unary.h"
#include "tools/dtensor-op/entries/entry_helpers.h"
#include "tools/reference/reference_reductions.h"
#include "tools/reference/reference_tensor_ops.h"

namespace dtensor::op_cli::entries {
namespace {

// ---- the binary operators ----

// One operation per element; the other operand's gradient sums over the
// elements it was broadcast to; maximum and minimum select an operand: exact.
void binary_reference(const Options& o, const GlobalTensors& g, int ranks,
                      std::vector<TensorCheck>& out) {
  using namespace dtensor::reference;
  const std::string op(o.name());
  const bool select = o.op == OpKind::Maximum || o.op == OpKind::Minimum;
  out.push_back(compare("output", g.output, ref_binary_forward(op, g.input, g.other), 2, o.dtype,
                        ranks, select));
  if (!o.backward) return;
  const auto [ga, gb] = ref_binary_grads(op, g.grad_output, g.input, g.other);
  const Int repeats = std::max<Int>(g.input.numel() / std::max<Int>(g.other.numel(), 1), 1);
  out.push_back(compare("grad_input", g.grad_input, ga, 4, o.dtype, ranks));
  out.push_back(compare("grad_other", g.grad_other, gb, repeats + 4, o.dtype, ranks));
}

OpEntry binary_entry(OpKind kind, std::string_view name,
                     Forward (*forward)(const Options&, const Operands&)) {
  OpEntry e{kind, name, Family::Binary};
  e.options = {"--other-shape"};
  e.params_line = [](const Options& o) {
    return fmt::format("other_shape={}", list(o.other_shape));
  };
  e.meta = [](json& meta, const Options& o) { meta["other_shape"] = o.other_shape; };
  e.forward = forward;
  e.backward = autograd_backward;
  e.reference = binary_reference;
  return e;
}

std::vector<OpEntry> binary_entries() {
  return {
      binary_entry(
          OpKind::Add, "add",
          [](const Options&, const Operands& ops) { return Forward(add(ops.input, *ops.other)); }),
      binary_entry(
          OpKind::Sub, "sub",
          [](const Options&, const Operands& ops) { return Forward(sub(ops.input, *ops.other)); }),
      binary_entry(
          OpKind::Mul, "mul",
          [](const Options&, const Operands& ops) { return Forward(mul(ops.input, *ops.other)); }),
      binary_entry(
          OpKind::Div, "div",
          [](const Options&, const Operands& ops) { return Forward(div(ops.input, *ops.other)); }),
      binary_entry(OpKind::Maximum, "maximum",
                   [](const Options&, const Operands& ops) {
                     return Forward(maximum(ops.input, *ops.other));
                   }),
      binary_entry(OpKind::Minimum, "minimum",
                   [](const Options&, const Operands& ops) {
                     return Forward(minimum(ops.input, *ops.other));
                   }),
  };
}

// ---- the unary functions ----

// A few operations per element (the transcendental ones and the gradients).
void unary_reference(const Options& o, const GlobalTensors& g, int ranks,
                     std::vector<TensorCheck>& out) {
  using namespace dtensor::reference;
  const std::string op(o.name());
  RefUnary p;
  p.min = o.min;
  p.max = o.max;
  p.exponent = o.exponent;
  out.push_back(compare("output", g.output, ref_unary_forward(op, g.input, p), 4, o.dtype, ranks));
  if (o.backward)
    out.push_back(compare("grad_input", g.grad_input,
                          ref_unary_grad_input(op, g.grad_output, g.input, p), 8, o.dtype, ranks));
}

OpEntry unary_entry(OpKind kind, std::string_view name,
                    Forward (*forward)(const Options&, const Operands&)) {
  OpEntry e{kind, name, Family::Unary};
  e.params_line = no_parameters;
  e.forward = forward;
  e.backward = autograd_backward;
  e.reference = unary_reference;
  return e;
}

// The plain functions' rows come from their list (elementwise_math.h).
std::vector<OpEntry> unary_entries() {
#define DTENSOR_PLAIN_ROW(NAME, FUNCTION, OP, POSITIVE, LINEAR)            \
  unary_entry(OpKind::NAME, #OP, [](const Options&, const Operands& ops) { \
    return Forward(dtensor::FUNCTION(ops.input));                          \
  }).with_positive_input(POSITIVE),
  std::vector<OpEntry> out{DTENSOR_PLAIN_UNARY_FUNCTIONS(DTENSOR_PLAIN_ROW)};
#undef DTENSOR_PLAIN_ROW
  OpEntry clamp_row =
      unary_entry(OpKind::Clamp, "clamp", [](const Options& o, const Operands& ops) {
        return Forward(clamp(ops.input, o.min, o.max));
      });
  clamp_row.options = {"--min", "--max"};
  clamp_row.params_line = [](const Options& o) {
    return fmt::format("min={} max={}", o.min ? fmt::format("{}", *o.min) : "none",
                       o.max ? fmt::format("{}", *o.max) : "none");
  };
  clamp_row.meta = [](json& meta, const Options& o) {
    meta["min"] = o.min ? json(*o.min) : json(nullptr);
    meta["max"] = o.max ? json(*o.max) : json(nullptr);
  };
  out.push_back(std::move(clamp_row));
  // pow draws its input in [0.5, 1.5), as log, sqrt and rsqrt do.
  OpEntry pow_row = unary_entry(OpKind::Pow, "pow", [](const Options& o, const Operands& ops) {
                      return Forward(dtensor::pow(ops.input, o.exponent));
                    }).with_positive_input(true);
  pow_row.options = {"--exponent"};
  pow_row.params_line = [](const Options& o) { return fmt::format("exponent={}", o.exponent); };
  pow_row.meta = [](json& meta, const Options& o) { meta["exponent"] = o.exponent; };
  out.push_back(std::move(pow_row));
  return out;
}

// ---- the reductions ----

// N terms per result, N the number of elements reduced into it; amax and
// amin select an element: exact.
void reduction_reference(const Options& o, const GlobalTensors& g, int ranks,
                         std::vector<TensorCheck>& out) {
  using namespace dtensor::reference;
  const std::string op(o.name());
  Int n = 1;
  for (Int d : o.dims)
    n *= o.input[static_cast<std::size_t>(d)];
  const bool select = o.op == OpKind::Amax || o.op == OpKind::Amin;
  out.push_back(compare("output", g.output,
                        ref_reduce_forward(op, g.input, o.dims, o.keepdim, o.correction), n + 4,
                        o.dtype, ranks, select));
  if (o.backward)
    out.push_back(compare("grad_input", g.grad_input,
                          ref_reduce_grad_input(op, g.grad_output, g.input, o.dims, o.correction),
                          n + 8, o.dtype, ranks));
}

OpEntry reduction_entry(OpKind kind, std::string_view name,
                        Forward (*forward)(const Options&, const Operands&)) {
  OpEntry e{kind, name, Family::Reduction};
  e.options = {"--dims", "--keepdim"};
  // The reduced dims dropped, or kept as 1 with keepdim.
  e.output_shape = [](const Options& o) {
    Shape out;
    for (std::size_t d = 0; d < o.input.size(); ++d) {
      const bool reduced =
          std::find(o.dims.begin(), o.dims.end(), static_cast<Int>(d)) != o.dims.end();
      if (!reduced)
        out.push_back(o.input[d]);
      else if (o.keepdim)
        out.push_back(1);
    }
    return out;
  };
  e.params_line = [](const Options& o) {
    return fmt::format("dims={} keepdim={}", list(o.dims), o.keepdim);
  };
  e.meta = [](json& meta, const Options& o) {
    meta["dims"] = o.dims;
    meta["keepdim"] = o.keepdim;
  };
  e.forward = forward;
  e.backward = autograd_backward;
  e.reference = reduction_reference;
  return e;
}

std::vector<OpEntry> reduction_entries() {
  std::vector<OpEntry> out{
      reduction_entry(OpKind::Sum, "sum",
                      [](const Options& o, const Operands& ops) {
                        return Forward(sum(ops.input, o.dims, o.keepdim));
                      }),
      reduction_entry(OpKind::Mean, "mean",
                      [](const Options& o, const Operands& ops) {
                        return Forward(mean(ops.input, o.dims, o.keepdim));
                      }),
      reduction_entry(OpKind::Amax, "amax",
                      [](const Options& o, const Operands& ops) {
                        return Forward(amax(ops.input, o.dims, o.keepdim));
                      }),
      reduction_entry(OpKind::Amin, "amin",
                      [](const Options& o, const Operands& ops) {
                        return Forward(amin(ops.input, o.dims, o.keepdim));
                      }),
      reduction_entry(OpKind::Var, "var",
                      [](const Options& o, const Operands& ops) {
                        return Forward(var(ops.input, o.dims, o.correction, o.keepdim));
                      }),
  };
  OpEntry& v = out.back();
  v.options.push_back("--correction");
  v.params_line = [](const Options& o) {
    return fmt::format("dims={} keepdim={} correction={}", list(o.dims), o.keepdim, o.correction);
  };
  v.meta = [](json& meta, const Options& o) {
    meta["dims"] = o.dims;
    meta["keepdim"] = o.keepdim;
    meta["correction"] = o.correction;
  };
  return out;
}

// ---- softmax and log_softmax ----

// A sum along the dim, then a few operations per element.
void softmax_reference(const Options& o, const GlobalTensors& g, int ranks,
                       std::vector<TensorCheck>& out) {
  using namespace dtensor::reference;
  const bool lg = o.op == OpKind::LogSoftmax;
  const Int n = o.input[static_cast<std::size_t>(o.dim)];
  out.push_back(
      compare("output", g.output, ref_softmax_forward(lg, g.input, o.dim), n + 4, o.dtype, ranks));
  if (o.backward)
    out.push_back(compare("grad_input", g.grad_input,
                          ref_softmax_grad_input(lg, g.grad_output, g.input, o.dim), 2 * n + 8,
                          o.dtype, ranks));
}

OpEntry softmax_entry(OpKind kind, std::string_view name,
                      Forward (*forward)(const Options&, const Operands&)) {
  OpEntry e{kind, name, Family::Softmax};
  e.options = {"--dim"};
  e.params_line = [](const Options& o) { return fmt::format("dim={}", o.dim); };
  e.meta = [](json& meta, const Options& o) { meta["dim"] = o.dim; };
  e.forward = forward;
  e.backward = autograd_backward;
  e.reference = softmax_reference;
  return e;
}

}  // namespace
}  // namespace dtensor::op_cli::entries

namespace dtensor::op_cli {

std::vector<OpEntry> tensor_api_entries() {
  using namespace entries;
  std::vector<OpEntry> out;
  for (auto* family : {binary_entries, unary_entries, reduction_entries})
    for (auto& e : family())
      out.push_back(std::move(e));
  out.push_back(softmax_entry(
      OpKind::Softmax, "softmax",
      [](const Options& o, const Operands& ops) { return Forward(softmax(ops.input, o.dim)); }));
  out.push_back(
      softmax_entry(OpKind::LogSoftmax, "log_softmax", [](const Options& o, const Operands& ops) {
        return Forward(log_softmax(ops.input, o.dim));
      }));
  return out;
}

}  // namespace dtensor::op_cli
