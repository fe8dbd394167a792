#include "ops/norm/norm_call.h"

#include "dtensor/core/errors.h"

namespace dtensor::norm {
namespace {

const DTensor* optional_dtensor(const OpSchema& s, std::size_t i) {
  return s.is_none(i) ? nullptr : &s.dtensor(i);
}

NormOutputMask decode_mask(const OpSchema& s, std::size_t i) {
  const IntList& m = s.int_list(i);
  DTENSOR_CHECK_ARG(m.size() == 3, s.op(),
                    "mask: expected {{input, weight, bias}} flags, got {} values", m.size());
  return {m[0] != 0, m[1] != 0, m[2] != 0};
}

IntList encode_mask(const NormOutputMask& m) {
  return {m.input ? 1 : 0, m.weight ? 1 : 0, m.bias ? 1 : 0};
}

OpArg optional_arg(const std::optional<DTensor>& t) {
  if (t) return *t;
  return None{};
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
  std::size_t at = 0;
  const std::size_t expected = [&]() -> std::size_t {
    switch (op.kind) {
      case NormKind::Batch:
        return 8;
      case NormKind::Group:
        return backward ? 6 : 5;
      case NormKind::Instance:
      case NormKind::Layer:
        return backward ? 5 : 4;
    }
    return 0;
  }();
  // The fused activation: an optional last argument of the forwards but
  // batch_norm's (its name), and of their backwards (its output).
  const bool may_fuse = op.kind != NormKind::Batch;
  DTENSOR_CHECK_ARG(s.size() == expected || (may_fuse && s.size() == expected + 1), op.name,
                    "{}: expected {} arguments, got {}", s.op(), expected, s.size());
  if (backward) c.grad_output = &s.dtensor(at++);
  c.input = &s.dtensor(at++);
  if (op.kind == NormKind::Group) c.num_groups = s.int_value(at++);
  c.weight = optional_dtensor(s, at++);
  if (!backward) c.bias = optional_dtensor(s, at++);
  if (op.kind == NormKind::Batch) {
    c.running_mean = optional_dtensor(s, at++);
    c.running_var = optional_dtensor(s, at++);
    c.training = s.flag(at++);
    if (!backward) c.momentum = s.scalar(at++);
  }
  c.eps = s.scalar(at++);
  if (backward) c.mask = decode_mask(s, at++);
  if (at < s.size() && backward) {
    c.relu_output = &s.dtensor(at++);
  } else if (at < s.size()) {
    const std::string& act = s.text(at++);
    check_arg(act == "relu", op.name, "activation: expected \"relu\", got \"{}\"", act);
    c.relu = true;
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
  return {input,
          optional_arg(weight),
          optional_arg(bias),
          optional_arg(running_mean),
          optional_arg(running_var),
          training,
          momentum,
          eps};
}

std::vector<OpArg> encode_batch_norm_backward(const DTensor& grad_output, const DTensor& input,
                                              const std::optional<DTensor>& weight,
                                              const std::optional<DTensor>& running_mean,
                                              const std::optional<DTensor>& running_var,
                                              bool training, double eps,
                                              const NormOutputMask& mask) {
  return {grad_output,
          input,
          optional_arg(weight),
          optional_arg(running_mean),
          optional_arg(running_var),
          training,
          eps,
          encode_mask(mask)};
}

std::vector<OpArg> encode_norm(const DTensor& input, std::optional<std::int64_t> num_groups,
                               const std::optional<DTensor>& weight,
                               const std::optional<DTensor>& bias, double eps,
                               NormActivation activation) {
  std::vector<OpArg> args{input};
  if (num_groups) args.emplace_back(*num_groups);
  args.push_back(optional_arg(weight));
  args.push_back(optional_arg(bias));
  args.emplace_back(eps);
  if (activation == NormActivation::ReLU) args.emplace_back(std::string("relu"));
  return args;
}

std::vector<OpArg> encode_norm_backward(const DTensor& grad_output, const DTensor& input,
                                        std::optional<std::int64_t> num_groups,
                                        const std::optional<DTensor>& weight, double eps,
                                        const NormOutputMask& mask,
                                        const std::optional<DTensor>& relu_output) {
  std::vector<OpArg> args{grad_output, input};
  if (num_groups) args.emplace_back(*num_groups);
  args.push_back(optional_arg(weight));
  args.emplace_back(eps);
  args.emplace_back(encode_mask(mask));
  if (relu_output) args.emplace_back(*relu_output);
  return args;
}

}  // namespace dtensor::norm
