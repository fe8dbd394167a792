#include "ops/norm/norm_call.h"

#include "dtensor/core/errors.h"

namespace dtensor::norm {
namespace {

const DTensor* ptr(const std::optional<DTensor>& t) {
  return t ? &*t : nullptr;
}

// The fused activation (the forwards' tail): none, or "relu".
bool relu_of(const ArgTail<std::string>& tail, const NormOp& op) {
  DTENSOR_CHECK_ARG(tail.size() <= 1, op.name, "activation: at most one argument, got {}",
                    tail.size());
  if (tail.empty()) return false;
  check_arg(tail[0] == "relu", op.name, "activation: expected \"relu\", got \"{}\"", tail[0]);
  return true;
}

// The fused relu's output (the backwards' tail), or null when absent; None
// is refused, as before the tail was typed.
const DTensor* relu_output_of(const ArgTail<const DTensor*>& tail, const NormOp& op) {
  DTENSOR_CHECK_ARG(tail.size() <= 1, op.name, "relu_output: at most one argument, got {}",
                    tail.size());
  check_arg(tail.empty() || tail[0] != nullptr, op.name, "relu_output: a DTensor, not None");
  return tail.empty() ? nullptr : tail[0];
}

std::vector<std::string> activation_tail(NormActivation activation) {
  if (activation == NormActivation::ReLU) return {"relu"};
  return {};
}

// The shape of the affine parameters: [C], or layer_norm's [C, spatial...].
Shape param_shape(const NormCall& c) {
  const Shape& x = c.input->shape();
  if (c.op.kind == NormKind::Layer) return Shape(x.begin() + 1, x.end());
  return {x[1]};
}

void check_param(const NormCall& c, const DTensor* p, const char* what) {
  if (!p) return;
  const Shape want = param_shape(c);
  DTENSOR_CHECK_ARG(p->shape() == want, c.op.name, "{}: shape {} but expected {}", what,
                    shape_str(p->shape()), shape_str(want));
}

}  // namespace

NormCall NormCall::decode(const OpSchema& s, const NormOp& op, bool backward) {
  NormCall c;
  c.op = op;
  c.backward = backward;
  const auto backward_common = [&](const auto& b) {
    c.grad_output = &b.grad_output;
    c.input = &b.input;
    c.weight = b.weight;
    c.eps = b.eps;
    c.mask = b.mask;
  };
  const auto forward_common = [&](const auto& f) {
    c.input = &f.input;
    c.weight = f.weight;
    c.bias = f.bias;
    c.eps = f.eps;
  };
  switch (op.kind) {
    case NormKind::Batch:
      if (backward) {
        const auto& b = decoded<BatchNormBackwardCall>(s);
        backward_common(b);
        c.running_mean = b.running_mean;
        c.running_var = b.running_var;
        c.training = b.training;
      } else {
        const auto& f = decoded<BatchNormCall>(s);
        forward_common(f);
        c.running_mean = f.running_mean;
        c.running_var = f.running_var;
        c.training = f.training;
        c.momentum = f.momentum;
      }
      return c;
    case NormKind::Group:
      if (backward) {
        const auto& b = decoded<GroupNormBackwardCall>(s);
        backward_common(b);
        c.num_groups = b.num_groups;
        c.relu_output = relu_output_of(b.relu_output, op);
      } else {
        const auto& f = decoded<GroupNormCall>(s);
        forward_common(f);
        c.num_groups = f.num_groups;
        c.relu = relu_of(f.activation, op);
      }
      return c;
    case NormKind::Instance:
    case NormKind::Layer:
      if (backward) {
        const auto& b = decoded<AffineNormBackwardCall>(s);
        backward_common(b);
        c.relu_output = relu_output_of(b.relu_output, op);
      } else {
        const auto& f = decoded<AffineNormCall>(s);
        forward_common(f);
        c.relu = relu_of(f.activation, op);
      }
      return c;
  }
  return c;
}

std::vector<TensorMeta> NormCall::output_meta() const {
  const DType dt = input->dtype();
  std::vector<TensorMeta> out;
  if (!backward) {
    out.push_back({input->shape(), dt});
    if (updates_running_stats()) {
      out.push_back({running_mean->shape(), running_mean->dtype()});
      out.push_back({running_var->shape(), running_var->dtype()});
    }
    return out;
  }
  if (mask.input) out.push_back({input->shape(), dt});
  if (mask.weight) out.push_back({param_shape(*this), dt});
  if (mask.bias) out.push_back({param_shape(*this), dt});
  return out;
}

void NormCall::validate() const {
  const char* name = op.name;
  const Shape& x = input->shape();
  const auto rank = static_cast<std::int64_t>(x.size());
  const std::int64_t min_rank = op.kind == NormKind::Instance ? 3 : 2;
  DTENSOR_CHECK_ARG(rank >= min_rank && rank <= 5, name,
                    "input: expected [N, C, spatial...] with {} to 3 spatial dims, got shape {}",
                    min_rank - 2, shape_str(x));
  std::int64_t spatial = 1;
  for (std::int64_t d = 2; d < rank; ++d)
    spatial *= x[d];
  if (backward) {
    DTENSOR_CHECK_ARG(grad_output->shape() == x, name, "grad_output: shape {} but the input is {}",
                      shape_str(grad_output->shape()), shape_str(x));
    DTENSOR_CHECK_ARG(grad_output->dtype() == input->dtype(), name,
                      "grad_output: dtype {} differs from the input's {}",
                      dtype_name(grad_output->dtype()), dtype_name(input->dtype()));
    check_arg(mask.input || mask.weight || mask.bias, name, "mask: asks for no gradient");
    if (relu_output)
      DTENSOR_CHECK_ARG(relu_output->shape() == x && relu_output->dtype() == input->dtype(), name,
                        "relu_output: {} {} but the input is {} {}",
                        shape_str(relu_output->shape()), dtype_name(relu_output->dtype()),
                        shape_str(x), dtype_name(input->dtype()));
  }
  check_param(*this, weight, "weight");
  check_param(*this, bias, "bias");
  for (const DTensor* p : {weight, bias})
    if (p)
      DTENSOR_CHECK_ARG(p->dtype() == input->dtype(), name,
                        "{}: dtype {} differs from the input's {}", p == weight ? "weight" : "bias",
                        dtype_name(p->dtype()), dtype_name(input->dtype()));
  switch (op.kind) {
    case NormKind::Batch: {
      check_arg((running_mean == nullptr) == (running_var == nullptr), name,
                "running_mean: running_mean and running_var go together (got only {})",
                running_mean ? "running_mean" : "running_var");
      check_arg(training || running_mean != nullptr, name,
                "running_mean: eval mode (training=false) needs running_mean and running_var");
      for (const DTensor* p : {running_mean, running_var})
        if (p)
          DTENSOR_CHECK_ARG(p->shape() == Shape{x[1]}, name, "{}: shape {} but expected [{}]",
                            p == running_mean ? "running_mean" : "running_var",
                            shape_str(p->shape()), x[1]);
      if (training && !backward)
        DTENSOR_CHECK_ARG(
            x[0] * spatial != 1, name,
            "input: expected more than 1 value per channel when training, got input size {}",
            shape_str(x));
      break;
    }
    case NormKind::Group:
      check_arg(num_groups >= 1, name, "num_groups: must be >= 1, got {}", num_groups);
      check_arg(x[1] % num_groups == 0, name,
                "num_groups: expected the number of channels ({}) to be divisible by num_groups "
                "({})",
                x[1], num_groups);
      break;
    case NormKind::Instance:
      if (!backward)
        DTENSOR_CHECK_ARG(
            spatial != 1, name,
            "input: expected more than 1 spatial element when training, got input size {}",
            shape_str(x));
      break;
    case NormKind::Layer:
      break;
  }
}

std::vector<OpArg> encode_batch_norm(const DTensor& input, const std::optional<DTensor>& weight,
                                     const std::optional<DTensor>& bias,
                                     const std::optional<DTensor>& running_mean,
                                     const std::optional<DTensor>& running_var, bool training,
                                     double momentum, double eps) {
  return BatchNormCall::Fields::encode(input, ptr(weight), ptr(bias), ptr(running_mean),
                                       ptr(running_var), training, momentum, eps);
}

std::vector<OpArg> encode_batch_norm_backward(const DTensor& grad_output, const DTensor& input,
                                              const std::optional<DTensor>& weight,
                                              const std::optional<DTensor>& running_mean,
                                              const std::optional<DTensor>& running_var,
                                              bool training, double eps,
                                              const NormOutputMask& mask) {
  return BatchNormBackwardCall::Fields::encode(grad_output, input, ptr(weight), ptr(running_mean),
                                               ptr(running_var), training, eps, mask);
}

std::vector<OpArg> encode_norm(const DTensor& input, std::optional<std::int64_t> num_groups,
                               const std::optional<DTensor>& weight,
                               const std::optional<DTensor>& bias, double eps,
                               NormActivation activation) {
  if (num_groups)
    return GroupNormCall::Fields::encode(input, *num_groups, ptr(weight), ptr(bias), eps,
                                         activation_tail(activation));
  return AffineNormCall::Fields::encode(input, ptr(weight), ptr(bias), eps,
                                        activation_tail(activation));
}

std::vector<OpArg> encode_norm_backward(const DTensor& grad_output, const DTensor& input,
                                        std::optional<std::int64_t> num_groups,
                                        const std::optional<DTensor>& weight, double eps,
                                        const NormOutputMask& mask,
                                        const std::optional<DTensor>& relu_output) {
  std::vector<const DTensor*> tail;
  if (relu_output) tail.push_back(&*relu_output);
  if (num_groups)
    return GroupNormBackwardCall::Fields::encode(grad_output, input, *num_groups, ptr(weight), eps,
                                                 mask, tail);
  return AffineNormBackwardCall::Fields::encode(grad_output, input, ptr(weight), eps, mask, tail);
}

}  // namespace dtensor::norm
