// linear and linear_backward (dtensor/ops/linear.h).
//
// Argument layouts (docs/operators.md):
//   linear:          input, weight, bias (DTensor or None)
//   linear_backward: grad_output, input, weight -> grad_input, grad_weight, grad_bias
//
// Strategies (per mesh dim): the rows (every dim but the last) may be
// sharded, the features may not: forward (Shard(d), R, R) -> Shard(d) for d
// < last, (R, R, R) -> R; no Partial input row (the bias is added once, on
// the whole sum). Backward (Shard(d), Shard(d), R) -> (Shard(d), Partial,
// Partial): each rank's rows give a partial sum of the weight's and bias's
// gradients; (R, R, R) -> R; and, linear in grad_output, (Partial, R, R) ->
// (Partial, Partial, Partial). The front ends reduce the Partial weight and
// bias gradients to Replicate. The products are the kernels of
// dtensor/ops/kernels/linear.h on [rows, features] views.
#include "dtensor/core/errors.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/kernels/linear.h"
#include "dtensor/ops/linear.h"
#include "ops/autograd/backward_helpers.h"
#include "ops/detail/op_pair.h"
#include "ops/detail/placed_like_input.h"

namespace dtensor {
namespace {

constexpr const char* kOp = "linear";
constexpr const char* kBackward = "linear_backward";

// [..., n] as [rows, n] (rows: the product of the leading dims, so an empty
// feature dim still has its rows).
Tensor as_rows(const Tensor& t) {
  const Shape& s = t.shape();
  const Shape lead(s.begin(), s.end() - 1);
  return t.contiguous().view({shape_numel(lead), s.back()});
}

Shape with_last(Shape s, std::int64_t n) {
  s.back() = n;
  return s;
}

void check_linear(const OpSchema& s) {
  DTENSOR_CHECK_ARG(s.size() == 3, s.op(), "{} arguments given, 3 expected (input, weight, bias)",
                    s.size());
  const DTensor& x = s.dtensor(0);
  const DTensor& w = s.dtensor(1);
  check_arg(x.ndim() >= 1, s.op(), "input: a 0-d tensor has no features (shape [])");
  DTENSOR_CHECK_ARG(w.ndim() == 2, s.op(),
                    "weight: expected [out_features, in_features], got shape {}",
                    shape_str(w.shape()));
  DTENSOR_CHECK_ARG(w.shape()[1] == x.shape().back(), s.op(),
                    "weight: shape {} does not take the input's {} features (input shape {})",
                    shape_str(w.shape()), x.shape().back(), shape_str(x.shape()));
  DTENSOR_CHECK_ARG(w.dtype() == x.dtype(), s.op(), "weight: dtype {} differs from the input's {}",
                    dtype_name(w.dtype()), dtype_name(x.dtype()));
  if (!s.is_none(2)) {
    const DTensor& b = s.dtensor(2);
    DTENSOR_CHECK_ARG(b.shape() == Shape{w.shape()[0]}, s.op(),
                      "bias: expected shape [{}] (out_features), got {}", w.shape()[0],
                      shape_str(b.shape()));
    DTENSOR_CHECK_ARG(b.dtype() == x.dtype(), s.op(), "bias: dtype {} differs from the input's {}",
                      dtype_name(b.dtype()), dtype_name(x.dtype()));
  }
}

void check_linear_backward(const OpSchema& s) {
  DTENSOR_CHECK_ARG(s.size() == 3, s.op(),
                    "{} arguments given, 3 expected (grad_output, input, weight)", s.size());
  const DTensor& g = s.dtensor(0);
  const DTensor& x = s.dtensor(1);
  const DTensor& w = s.dtensor(2);
  DTENSOR_CHECK_ARG(x.ndim() >= 1 && w.ndim() == 2 && w.shape()[1] == x.shape().back(), s.op(),
                    "weight: shape {} does not take the input {}", shape_str(w.shape()),
                    shape_str(x.shape()));
  DTENSOR_CHECK_ARG(g.shape() == with_last(x.shape(), w.shape()[0]), s.op(),
                    "grad_output: shape {} is not the output's {}", shape_str(g.shape()),
                    shape_str(with_last(x.shape(), w.shape()[0])));
  DTENSOR_CHECK_ARG(g.dtype() == x.dtype() && w.dtype() == x.dtype(), s.op(),
                    "grad_output, weight: dtypes {} and {} differ from the input's {}",
                    dtype_name(g.dtype()), dtype_name(w.dtype()), dtype_name(x.dtype()));
}

std::vector<ShardingSignature> linear_signatures(const OpSchema& s) {
  const bool bias = !s.is_none(2);
  const auto with_params = [&](Placement x) {
    return bias ? Placements{x, Replicate(), Replicate()} : Placements{x, Replicate()};
  };
  std::vector<ShardingSignature> sigs;
  for (std::int64_t d = 0; d + 1 < s.dtensor(0).ndim(); ++d)
    sigs.push_back({with_params(Shard(d)), {Shard(d)}});
  sigs.push_back({with_params(Replicate()), {Replicate()}});
  return sigs;
}

std::vector<ShardingSignature> linear_backward_signatures(const OpSchema& s) {
  std::vector<ShardingSignature> sigs;
  for (std::int64_t d = 0; d + 1 < s.dtensor(1).ndim(); ++d)
    sigs.push_back({{Shard(d), Shard(d), Replicate()}, {Shard(d), Partial(), Partial()}});
  sigs.push_back(
      {{Replicate(), Replicate(), Replicate()}, {Replicate(), Replicate(), Replicate()}});
  sigs.push_back({{Partial(), Replicate(), Replicate()}, {Partial(), Partial(), Partial()}});
  return sigs;
}

std::vector<DTensor> linear_handler(OpCall& call) {
  const auto in = call.redistributed_inputs();
  const bool bias = in.size() == 3;
  const DTensorSpec& spec = call.sharding().output_specs[0];
  const Tensor x = in[0].to_local();
  const Tensor w = in[1].to_local().contiguous();
  const std::int64_t K = w.shape()[0];
  const Tensor rows = as_rows(x);
  Tensor out = Tensor::empty({rows.shape()[0], K}, x.dtype(), x.device());
  run_kernel(kernels::kLinear, x.device().type, x.dtype(),
             {rows, w, bias ? in[2].to_local().contiguous() : Tensor(), out});
  return {DTensor(out.view(with_last(x.shape(), K)), spec)};
}

std::vector<DTensor> linear_backward_handler(OpCall& call) {
  const auto in = call.redistributed_inputs();
  const auto& specs = call.sharding().output_specs;
  const Tensor gy = in[0].to_local();
  const Tensor x = in[1].to_local();
  const Tensor w = in[2].to_local().contiguous();
  const Tensor gy_rows = as_rows(gy), x_rows = as_rows(x);
  const DeviceType dev = x.device().type;
  Tensor gx = Tensor::empty(x_rows.shape(), x.dtype(), x.device());
  Tensor gw = Tensor::empty(w.shape(), x.dtype(), x.device());
  Tensor gb = Tensor::empty({w.shape()[0]}, x.dtype(), x.device());
  run_kernel(kernels::kLinearBackward, dev, x.dtype(), {gy_rows, x_rows, w, gx, gw, gb});
  return {DTensor(gx.view(x.shape()), specs[0]), DTensor(gw, specs[1]), DTensor(gb, specs[2])};
}

DTensor replicated_like(const DTensor& grad, const DTensor& param) {
  return grad.placements() == param.placements()
             ? grad
             : grad.redistribute(grad.mesh(), param.placements());
}

// The gradients of (input, weight, bias): linear_backward's, the weight's and
// bias's summed over the ranks' rows (placed like the parameters).
std::vector<std::optional<DTensor>> linear_backward_fn(const BackwardCall& c) {
  const OpSchema& f = c.forward;
  const bool bias = !f.is_none(2);
  std::vector<std::optional<DTensor>> grads(bias ? 3 : 2);
  bool any = false;
  for (bool n : c.needs_input_grad)
    any = any || n;
  if (!any) return grads;
  const auto r =
      dispatch(kBackward, {autograd::detail::grad_of_output(c), f.dtensor(0), f.dtensor(1)});
  if (c.needs_input_grad[0]) grads[0] = detail::placed_like_input(r[0], f.dtensor(0));
  if (c.needs_input_grad[1]) grads[1] = replicated_like(r[1], f.dtensor(1));
  if (bias && c.needs_input_grad[2]) grads[2] = replicated_like(r[2], f.dtensor(2));
  return grads;
}

struct Registrar {
  Registrar() {
    OpDef fwd;
    fwd.name = kOp;
    fwd.validate = check_linear;
    fwd.output_meta = [](const OpSchema& s) -> std::vector<TensorMeta> {
      return {{with_last(s.dtensor(0).shape(), s.dtensor(1).shape()[0]), s.dtensor(0).dtype()}};
    };
    fwd.signatures = linear_signatures;
    fwd.backward = linear_backward_fn;

    OpDef bwd;
    bwd.name = kBackward;
    bwd.validate = check_linear_backward;
    bwd.output_meta = [](const OpSchema& s) -> std::vector<TensorMeta> {
      const DTensor& x = s.dtensor(1);
      const DTensor& w = s.dtensor(2);
      return {{x.shape(), x.dtype()}, {w.shape(), x.dtype()}, {{w.shape()[0]}, x.dtype()}};
    };
    bwd.signatures = linear_backward_signatures;
    detail::register_op_pair(
        {std::move(fwd), std::move(bwd), linear_handler, linear_backward_handler});
  }
};
const Registrar registrar;

OpArg optional_arg(const std::optional<DTensor>& t) {
  return t ? OpArg(*t) : OpArg(None{});
}

}  // namespace

DTensor linear(const DTensor& input, const DTensor& weight, const std::optional<DTensor>& bias) {
  return dispatch(kOp, {input, weight, optional_arg(bias)}).at(0);
}

LinearGrads linear_backward(const DTensor& grad_output, const DTensor& input, const DTensor& weight,
                            bool has_bias) {
  const auto r = dispatch(kBackward, {grad_output, input, weight});
  const Placements all(static_cast<std::size_t>(weight.mesh().ndim()), Replicate());
  const auto reduced = [&](const DTensor& g) {
    return g.placements() == all ? g : g.redistribute(g.mesh(), all);
  };
  LinearGrads g{detail::placed_like_input(r[0], input), reduced(r[1]), std::nullopt};
  if (has_bias) g.grad_bias = reduced(r[2]);
  return g;
}

}  // namespace dtensor
