// mse_loss, cross_entropy (class-probability targets) and the pointwise
// losses (l1_loss, smooth_l1_loss, huber_loss,
// binary_cross_entropy_with_logits), forward and backward.
//
// Argument layouts (docs/operators.md):
//   mse_loss | cross_entropy:                   input, target, reduction ("mean"|"sum")
//   mse_loss_backward | cross_entropy_backward: input, target, reduction, grad (double)
//   the pointwise losses:                       input, target, reduction, param (double)
//   their _backward:                            input, target, reduction, param, grad
// (param: smooth_l1's beta, huber's delta, ignored by the other two).
//
// Strategies (per mesh dim; input and target alike): forward Shard(d) ->
// Partial (each rank's sum over its shard is a partial sum of the whole),
// Replicate -> Replicate; backward Shard(d) -> Shard(d), Replicate ->
// Replicate. cross_entropy never shards dim 1 (its log_softmax runs over it).
// No Partial input row: neither loss is linear. The forward front ends reduce
// the Partial scalar to Replicate. The arithmetic on each rank's shard is the
// kernels of dtensor/ops/kernels/loss.h.
#include "dtensor/core/errors.h"
#include "dtensor/ops/deferred_agreement.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/kernels/loss.h"
#include "dtensor/ops/losses.h"
#include "dtensor/ops/pointwise.h"
#include "dtensor/ops/typed_call.h"
#include "ops/autograd/backward_helpers.h"
#include "ops/detail/placed_like_input.h"

namespace dtensor {
namespace {

enum class Loss { Mse, CrossEntropy, L1, SmoothL1, Huber, BceWithLogits };

struct LossName {
  const char* op;
  Loss loss;
};
constexpr LossName kLosses[] = {
    {"mse_loss", Loss::Mse},     {"cross_entropy", Loss::CrossEntropy},
    {"l1_loss", Loss::L1},       {"smooth_l1_loss", Loss::SmoothL1},
    {"huber_loss", Loss::Huber}, {"binary_cross_entropy_with_logits", Loss::BceWithLogits}};

Loss loss_of(const std::string& op) {
  constexpr std::string_view suffix = "_backward";
  const bool bw = op.size() > suffix.size() && op.ends_with(suffix);
  const std::string base = bw ? op.substr(0, op.size() - suffix.size()) : op;
  for (const LossName& l : kLosses)
    if (base == l.op) return l.loss;
  throw InvalidArgument(op, "not a loss");
}

bool is_pointwise(Loss l) {
  return l != Loss::Mse && l != Loss::CrossEntropy;
}

kernels::PointwiseLoss pointwise_kind(Loss l) {
  switch (l) {
    case Loss::SmoothL1:
      return kernels::PointwiseLoss::SmoothL1;
    case Loss::Huber:
      return kernels::PointwiseLoss::Huber;
    case Loss::BceWithLogits:
      return kernels::PointwiseLoss::BceWithLogits;
    default:
      return kernels::PointwiseLoss::L1;
  }
}

struct LossCall {
  Loss loss;
  bool backward;
  const DTensor& input;
  const DTensor& target;
  bool mean = true;
  double grad = 1.0;
  double param = 0.0;  // smooth_l1's beta, huber's delta

  // The arguments after the reduction: the pointwise losses' param, then a
  // backward's grad.
  std::size_t arity() const { return 3 + (is_pointwise(loss) ? 1 : 0) + (backward ? 1 : 0); }

  /// The call `s` holds, decoded once per schema: every stage shares it.
  static const LossCall& of(const OpSchema& s) {
    return decoded<LossCall>(s, [&] { return decode(s); });
  }
  static LossCall decode(const OpSchema& s) {
    const Loss l = loss_of(s.op());
    const bool bw = s.op().find("_backward") != std::string::npos;
    LossCall c{l, bw, s.dtensor(0), s.dtensor(1), true, 1.0, 0.0};
    const std::string& r = s.text(2);
    check_arg(r == "mean" || r == "sum", s.op(),
              "reduction: \"mean\" or \"sum\" expected, got \"{}\"", r);
    c.mean = r == "mean";
    std::size_t next = 3;
    if (is_pointwise(l)) c.param = s.scalar(next++);
    if (bw) c.grad = s.scalar(next);
    return c;
  }

  // What the mean divides by: every element (mse) or every position but the
  // class dim (cross_entropy).
  double denominator() const {
    const double n = static_cast<double>(shape_numel(input.shape()));
    if (!mean) return 1.0;
    return loss == Loss::CrossEntropy ? n / static_cast<double>(input.shape()[1]) : n;
  }
};

void check_loss(const OpSchema& s) {
  const LossCall& c = LossCall::of(s);
  DTENSOR_CHECK_ARG(s.size() == c.arity(), s.op(), "{} arguments given, {} expected", s.size(),
                    c.arity());
  DTENSOR_CHECK_ARG(c.input.shape() == c.target.shape(), s.op(),
                    "target: shape {} differs from the input's {}", shape_str(c.target.shape()),
                    shape_str(c.input.shape()));
  DTENSOR_CHECK_ARG(c.input.dtype() == c.target.dtype(), s.op(),
                    "target: dtype {} differs from the input's {}", dtype_name(c.target.dtype()),
                    dtype_name(c.input.dtype()));
  if (c.loss == Loss::CrossEntropy) {
    DTENSOR_CHECK_ARG(c.input.ndim() >= 2, s.op(),
                      "input: expected [N, C, d1, ...] (class dim 1), got shape {}",
                      shape_str(c.input.shape()));
    DTENSOR_CHECK_ARG(c.input.shape()[1] >= 1, s.op(), "input: no classes (dim 1 is empty) in {}",
                      shape_str(c.input.shape()));
  }
  // PyTorch's bounds (smooth_l1: "does not support negative values for
  // beta"; huber: "does not support non-positive values for delta").
  if (c.loss == Loss::SmoothL1)
    check_arg(c.param >= 0, s.op(), "beta: must be >= 0, got {}", c.param);
  if (c.loss == Loss::Huber) check_arg(c.param > 0, s.op(), "delta: must be > 0, got {}", c.param);
}

std::vector<TensorMeta> loss_meta(const OpSchema& s) {
  const LossCall& c = LossCall::of(s);
  if (c.backward) return {{c.input.shape(), c.input.dtype()}};
  return {{{}, c.input.dtype()}};
}

std::vector<ShardingSignature> loss_signatures(const OpSchema& s) {
  const LossCall& c = LossCall::of(s);
  std::vector<ShardingSignature> sigs;
  for (std::int64_t d = 0; d < c.input.ndim(); ++d) {
    if (c.loss == Loss::CrossEntropy && d == 1) continue;
    sigs.push_back({{Shard(d), Shard(d)}, {c.backward ? Shard(d) : Partial()}});
  }
  sigs.push_back({{Replicate(), Replicate()}, {Replicate()}});
  return sigs;
}

// The local part: this shard's sum over the mean's denominator (forward)
// or the gradient, by the loss's kernels (dtensor/ops/kernels/loss.h).
Tensor loss_local(const LossCall& c, const Tensor& x, const Tensor& t) {
  const DeviceType device = x.device().type;
  const double denom = c.denominator();
  if (!c.backward) {
    Tensor sum = Tensor::empty({}, DType::F64);
    if (c.loss == Loss::Mse)
      run_kernel(kernels::kMseLoss, device, x.dtype(), {x, t, sum});
    else if (c.loss == Loss::CrossEntropy)
      run_kernel(kernels::kCrossEntropy, device, x.dtype(), {x, t, sum});
    else
      run_kernel(kernels::kPointwiseLoss, device, x.dtype(),
                 {x, t, pointwise_kind(c.loss), c.param, sum});
    return Tensor::full({}, sum.item_flat(0) / denom, x.dtype(), x.device());
  }
  Tensor g = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (c.loss == Loss::Mse)
    run_kernel(kernels::kMseLossBackward, device, x.dtype(), {x, t, 2.0 * c.grad / denom, g});
  else if (c.loss == Loss::CrossEntropy)
    run_kernel(kernels::kCrossEntropyBackward, device, x.dtype(), {x, t, c.grad / denom, g});
  else
    run_kernel(kernels::kPointwiseLossBackward, device, x.dtype(),
               {x, t, pointwise_kind(c.loss), c.param, c.grad / denom, g});
  return g;
}

std::vector<DTensor> loss_handler(OpCall& call) {
  const LossCall& c = LossCall::of(call.schema());
  const auto inputs = call.redistributed_inputs();
  const Tensor out =
      loss_local(c, inputs[0].to_local().contiguous(), inputs[1].to_local().contiguous());
  return {DTensor(out, call.sharding().output_specs[0])};
}

DTensor replicated(const DTensor& x) {
  const Placements all(static_cast<std::size_t>(x.mesh().ndim()), Replicate());
  return x.placements() == all ? x : x.redistribute(x.mesh(), all);
}

double scalar_of(const DTensor& grad_output, const char* op) {
  DTENSOR_CHECK_ARG(grad_output.ndim() == 0, op,
                    "grad_output: the loss's gradient is a scalar, got shape {}",
                    shape_str(grad_output.shape()));
  return replicated(grad_output).to_local().item_flat(0);
}

// The gradient of a loss call: the "<op>_backward" operator with the loss's
// gradient as its scalar factor; the target's is the negated input's for the
// losses of input - target (for cross_entropy and
// binary_cross_entropy_with_logits it is not provided).
std::vector<std::optional<DTensor>> loss_backward(const BackwardCall& c) {
  const std::string& op = c.forward.op();
  const Loss loss = loss_of(op);
  const DTensor& input = c.forward.dtensor(0);
  std::vector<std::optional<DTensor>> grads(2);
  if (!c.needs_input_grad[0] && !c.needs_input_grad[1]) return grads;
  if (c.needs_input_grad[1] && (loss == Loss::CrossEntropy || loss == Loss::BceWithLogits))
    throw NotSupported(op, "the gradient with respect to the target is not provided");
  const double factor = scalar_of(autograd::detail::grad_of_output(c), op.c_str());
  std::vector<OpArg> args{input, c.forward.dtensor(1), c.forward.text(2)};
  if (is_pointwise(loss)) args.emplace_back(c.forward.scalar(3));
  args.emplace_back(factor);
  DTensor gi = detail::placed_like_input(dispatch(op + "_backward", args).at(0), input);
  if (c.needs_input_grad[1]) grads[1] = scale(gi, -1.0);
  if (c.needs_input_grad[0]) grads[0] = std::move(gi);
  return grads;
}

struct Registrar {
  Registrar() {
    std::vector<std::string> ops;
    for (const LossName& l : kLosses) {
      ops.emplace_back(l.op);
      ops.push_back(std::string(l.op) + "_backward");
    }
    for (const std::string& op : ops) {
      OpDef d;
      d.name = op;
      d.validate = check_loss;
      d.output_meta = loss_meta;
      d.signatures = loss_signatures;
      if (op.find("_backward") == std::string::npos) d.backward = loss_backward;
      register_op(d);
      // Local sums (the output is a pending sum): the agreement is confirmed
      // after them, or first where the inputs are redistributed.
      register_op_handler(op, loss_handler, false, {.defers_agreement = true});
    }
  }
};
const Registrar registrar;

// The loss call communicates nothing (its output is a pending sum), so its
// agreement check is queued and confirmed after the reduction that follows,
// whose messages carry a check of their own: one latency for the two instead
// of a round trip each. A disagreement at the loss call is still the error
// every rank raises.
DTensor reduced(const char* op, std::vector<OpArg> args) {
  DeferredAgreementScope checks;
  try {
    DTensor out = replicated(dispatch(op, std::move(args)).at(0));
    checks.confirm();
    return out;
  } catch (...) {
    checks.confirm();  // the loss call's disagreement, if any, is the error
    throw;
  }
}

DTensor forward(const char* op, const DTensor& input, const DTensor& target, LossReduction r) {
  return reduced(op, {input, target, std::string(loss_reduction_name(r))});
}

DTensor backward(const char* op, const DTensor& input, const DTensor& target, LossReduction r,
                 double grad) {
  return detail::placed_like_input(
      dispatch(op, {input, target, std::string(loss_reduction_name(r)), grad}).at(0), input);
}

DTensor pointwise_forward(const char* op, const DTensor& input, const DTensor& target,
                          LossReduction r, double param) {
  return reduced(op, {input, target, std::string(loss_reduction_name(r)), param});
}

DTensor pointwise_backward(const char* op, const DTensor& input, const DTensor& target,
                           LossReduction r, double param, double grad) {
  return detail::placed_like_input(
      dispatch(op, {input, target, std::string(loss_reduction_name(r)), param, grad}).at(0), input);
}

}  // namespace

std::string_view loss_reduction_name(LossReduction r) {
  return r == LossReduction::Mean ? "mean" : "sum";
}

DTensor mse_loss(const DTensor& input, const DTensor& target, LossReduction reduction) {
  return forward("mse_loss", input, target, reduction);
}
DTensor mse_loss_backward(const DTensor& input, const DTensor& target, LossReduction reduction,
                          double grad) {
  return backward("mse_loss_backward", input, target, reduction, grad);
}
DTensor mse_loss_backward(const DTensor& grad_output, const DTensor& input, const DTensor& target,
                          LossReduction reduction) {
  return mse_loss_backward(input, target, reduction, scalar_of(grad_output, "mse_loss_backward"));
}
// An i64 target holds class indices: cross_entropy_indices with PyTorch's
// other defaults (cross_entropy_indices_op.cpp).
DTensor cross_entropy(const DTensor& input, const DTensor& target, LossReduction reduction) {
  if (target.dtype() == DType::I64)
    return cross_entropy(input, target, CrossEntropyOptions{.reduction = reduction});
  return forward("cross_entropy", input, target, reduction);
}
DTensor cross_entropy_backward(const DTensor& input, const DTensor& target, LossReduction reduction,
                               double grad) {
  if (target.dtype() == DType::I64)
    return cross_entropy_backward(input, target, CrossEntropyOptions{.reduction = reduction}, grad);
  return backward("cross_entropy_backward", input, target, reduction, grad);
}
DTensor cross_entropy_backward(const DTensor& grad_output, const DTensor& input,
                               const DTensor& target, LossReduction reduction) {
  return cross_entropy_backward(input, target, reduction,
                                scalar_of(grad_output, "cross_entropy_backward"));
}

DTensor l1_loss(const DTensor& input, const DTensor& target, LossReduction reduction) {
  return pointwise_forward("l1_loss", input, target, reduction, 0.0);
}
DTensor l1_loss_backward(const DTensor& input, const DTensor& target, LossReduction reduction,
                         double grad) {
  return pointwise_backward("l1_loss_backward", input, target, reduction, 0.0, grad);
}
DTensor smooth_l1_loss(const DTensor& input, const DTensor& target, LossReduction reduction,
                       double beta) {
  return pointwise_forward("smooth_l1_loss", input, target, reduction, beta);
}
DTensor smooth_l1_loss_backward(const DTensor& input, const DTensor& target,
                                LossReduction reduction, double beta, double grad) {
  return pointwise_backward("smooth_l1_loss_backward", input, target, reduction, beta, grad);
}
DTensor huber_loss(const DTensor& input, const DTensor& target, LossReduction reduction,
                   double delta) {
  return pointwise_forward("huber_loss", input, target, reduction, delta);
}
DTensor huber_loss_backward(const DTensor& input, const DTensor& target, LossReduction reduction,
                            double delta, double grad) {
  return pointwise_backward("huber_loss_backward", input, target, reduction, delta, grad);
}
DTensor binary_cross_entropy_with_logits(const DTensor& input, const DTensor& target,
                                         LossReduction reduction) {
  return pointwise_forward("binary_cross_entropy_with_logits", input, target, reduction, 0.0);
}
DTensor binary_cross_entropy_with_logits_backward(const DTensor& input, const DTensor& target,
                                                  LossReduction reduction, double grad) {
  return pointwise_backward("binary_cross_entropy_with_logits_backward", input, target, reduction,
                            0.0, grad);
}

}  // namespace dtensor
