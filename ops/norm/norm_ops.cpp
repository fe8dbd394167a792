// batch_norm, group_norm, instance_norm and layer_norm, forward and
// backward: the handlers (redistribute as the strategies say, local moments,
// one collective for the statistics, the local normalisation; the backward's
// one collective carries the two gradient sums beside the statistics), their
// registration and the
// public front ends. Argument layouts: norm_call.h and docs/operators.md.
#include <algorithm>
#include <cmath>

#include "dtensor/core/errors.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/normalization.h"
#include "ops/autograd/backward_helpers.h"
#include "ops/detail/local_result.h"
#include "ops/detail/op_pair.h"
#include "ops/detail/placed_like_input.h"
#include "ops/norm/norm_call.h"
#include "ops/norm/norm_stats.h"
#include "ops/norm/norm_strategies.h"
#include "ops/norm/stat_reduction.h"

namespace dtensor::norm {
namespace {

// The call's DTensors after redistribution, by role.
struct Placed {
  const DTensor* grad_output = nullptr;
  const DTensor* input = nullptr;
  const DTensor* weight = nullptr;
  const DTensor* bias = nullptr;
  const DTensor* running_mean = nullptr;
  const DTensor* running_var = nullptr;
  const DTensor* relu_output = nullptr;

  static Placed of(const NormCall& c, const std::vector<DTensor>& in) {
    Placed p;
    std::size_t at = 0;
    if (c.grad_output) p.grad_output = &in.at(at++);
    p.input = &in.at(at++);
    if (c.weight) p.weight = &in.at(at++);
    if (c.bias) p.bias = &in.at(at++);
    if (c.running_mean) p.running_mean = &in.at(at++);
    if (c.running_var) p.running_var = &in.at(at++);
    if (c.relu_output) p.relu_output = &in.at(at++);
    return p;
  }
};

// The local tensor of an optional argument, contiguous; undefined: none.
Tensor local_of(const DTensor* t) {
  return t ? t->to_local().contiguous() : Tensor();
}

// The local block of a call and what its kernels are chosen by.
struct Block {
  Tensor x;
  kernels::NormLayout layout;
  DeviceType device;
  DType dtype;

  Block(const NormCall& c, const DTensor& input)
      : x(input.to_local().contiguous()),
        layout(layout_of(c.op.kind, x.shape(), input.shape()[1], c.num_groups)),
        device(x.device().type),
        dtype(x.dtype()) {}
};

// The statistics the call normalises with: the batch's (one collective when
// a reduced dim is sharded) or batch_norm's running ones (none). `moments`
// gets the merged moments when the batch's are used.
Stats statistics(OpCall& call, const NormCall& c, const Placed& p, const Block& b,
                 Tensor* moments) {
  if (!c.uses_batch_stats())
    return stats_from_running(p.running_mean->to_local(), p.running_var->to_local(), c.eps);
  Tensor m = Tensor::empty({b.layout.stats(), 3}, DType::F64);
  run_kernel(kernels::kNormMoments, b.device, b.dtype, {b.x, b.layout, m});
  const ReductionPlan plan = plan_reduction(c.op.kind, p.input->mesh(), p.input->placements());
  merge_moments(call, plan, m);
  if (moments) *moments = m;
  return stats_from_moments(m, 3, c.eps);
}

std::vector<DTensor> forward(OpCall& call, const NormOp& op) {
  const NormCall& c = NormCall::of(call.schema(), op, false);
  const auto inputs = call.redistributed_inputs();
  const Placed p = Placed::of(c, inputs);
  const auto& out_specs = call.sharding().output_specs;
  const Block b(c, *p.input);
  Tensor moments;
  const Stats st = statistics(call, c, p, b, &moments);
  kernels::NormApplyArgs apply;
  apply.x = b.x;
  apply.layout = b.layout;
  apply.mean = st.mean;
  apply.invstd = st.invstd;
  apply.weight = local_of(p.weight);
  apply.bias = local_of(p.bias);
  apply.relu = c.relu;
  apply.y = Tensor::empty(b.x.shape(), b.dtype, b.x.device());
  run_kernel(kernels::kNormApply, b.device, b.dtype, apply);
  std::vector<DTensor> out;
  out.emplace_back(apply.y, out_specs[0]);
  if (c.updates_running_stats()) {
    const RunningStats r = updated_running_stats(p.running_mean->to_local(),
                                                 p.running_var->to_local(), moments, 3, c.momentum);
    out.push_back(wrap_small(r.mean, out_specs[1]));
    out.push_back(wrap_small(r.var, out_specs[2]));
  }
  return out;
}

std::vector<DTensor> backward(OpCall& call, const NormOp& op) {
  const NormCall& c = NormCall::of(call.schema(), op, true);
  const auto inputs = call.redistributed_inputs();
  const Placed p = Placed::of(c, inputs);
  const auto& out_specs = call.sharding().output_specs;
  const Block b(c, *p.input);
  const Tensor dy = p.grad_output->to_local().contiguous();
  const Tensor w = local_of(p.weight);
  kernels::NormBackwardApplyArgs args;
  args.grad_output = dy;
  args.x = b.x;
  args.layout = b.layout;
  args.weight = w;
  args.relu_output = local_of(p.relu_output);
  // One collective per pass: with batch statistics and an input gradient,
  // the moments and the two gradient sums travel together (the sums taken
  // around each rank's own mean, shifted to the merged one after); otherwise
  // the statistics alone, or none.
  Stats st;
  if (c.mask.input && c.uses_batch_stats()) {
    const std::int64_t k = b.layout.stats();
    Tensor packed = Tensor::empty({k, 5}, DType::F64);
    run_kernel(kernels::kNormBackwardReduce, b.device, b.dtype,
               {dy, b.x, b.layout, w, packed, args.relu_output});
    const ReductionPlan plan = plan_reduction(op.kind, p.input->mesh(), p.input->placements());
    merge_moments_and_grad_sums(call, plan, packed);
    st = stats_from_moments(packed, 5, c.eps);
    GradMeans means = grad_means(packed, st);
    args.mean_g = std::move(means.mean_g);
    args.mean_gxhat = std::move(means.mean_gxhat);
  } else {
    st = statistics(call, c, p, b, nullptr);
  }
  args.mean = st.mean;
  args.invstd = st.invstd;
  if (c.mask.input) args.grad_input = Tensor::empty(b.x.shape(), b.dtype, b.x.device());
  if (c.mask.weight) args.grad_weight = Tensor::empty({b.layout.params()}, b.dtype, b.x.device());
  if (c.mask.bias) args.grad_bias = Tensor::empty({b.layout.params()}, b.dtype, b.x.device());
  run_kernel(kernels::kNormBackwardApply, b.device, b.dtype, args);
  std::vector<DTensor> out;
  std::size_t next = 0;
  if (c.mask.input) out.emplace_back(args.grad_input, out_specs[next++]);
  for (const Tensor* g : {&args.grad_weight, &args.grad_bias})
    if (g->defined()) {
      const DTensorSpec& spec = out_specs[next++];
      out.emplace_back(g->view(spec.local_shape()), spec);
    }
  return out;
}

NormGrads grads_of(std::vector<DTensor> outs, const DTensor& input, const NormOutputMask& mask);

// The gradients of a recorded forward, by the DTensor arguments' positions
// (input, weight, bias; running statistics get none).
std::vector<std::optional<DTensor>> autograd_backward(const ::dtensor::BackwardCall& c,
                                                      const NormOp& op) {
  const NormCall& f = NormCall::of(c.forward, op, false);
  const auto& pos = c.forward.dtensor_positions();
  auto index_of = [&](const DTensor* t) -> std::optional<std::size_t> {
    for (std::size_t i = 0; t && i < pos.size(); ++i)
      if (&c.forward.dtensor(pos[i]) == t) return i;
    return std::nullopt;
  };
  const auto in = index_of(f.input), w = index_of(f.weight), b = index_of(f.bias);
  NormOutputMask mask;
  mask.input = c.needs_input_grad.at(*in);
  mask.weight = w && c.needs_input_grad.at(*w);
  mask.bias = b && c.needs_input_grad.at(*b);
  std::vector<std::optional<DTensor>> out(pos.size());
  if (!mask.input && !mask.weight && !mask.bias) return out;
  const DTensor g = autograd::detail::grad_of_output(c);
  auto opt = [](const DTensor* t) { return t ? std::optional<DTensor>(*t) : std::nullopt; };
  NormGrads grads;
  if (f.relu) {
    // A fused relu: the backward gets its output and gates the gradient in
    // its own passes (relu(y) > 0 exactly where y > 0), no pass of its own.
    const std::optional<std::int64_t> groups =
        op.kind == NormKind::Group ? std::optional<std::int64_t>(f.num_groups) : std::nullopt;
    grads =
        grads_of(dispatch(op.backward_name, encode_norm_backward(g, *f.input, groups, opt(f.weight),
                                                                 f.eps, mask, c.outputs.at(0))),
                 *f.input, mask);
  } else {
    switch (op.kind) {
      case NormKind::Batch:
        grads = batch_norm_backward(g, *f.input, opt(f.weight), opt(f.running_mean),
                                    opt(f.running_var), f.training, f.eps, mask);
        break;
      case NormKind::Group:
        grads = group_norm_backward(g, *f.input, f.num_groups, opt(f.weight), f.eps, mask);
        break;
      case NormKind::Instance:
        grads = instance_norm_backward(g, *f.input, opt(f.weight), f.eps, mask);
        break;
      case NormKind::Layer:
        grads = layer_norm_backward(g, *f.input, opt(f.weight), f.eps, mask);
        break;
    }
  }
  if (mask.input) out[*in] = grads.grad_input;
  if (mask.weight) out[*w] = grads.grad_weight;
  if (mask.bias) out[*b] = grads.grad_bias;
  return out;
}

void register_norm(const NormOp& op) {
  OpDef defs[2];
  for (const bool bwd : {false, true}) {
    OpDef& def = defs[bwd ? 1 : 0];
    def.name = bwd ? op.backward_name : op.name;
    def.validate = [op, bwd](const OpSchema& s) { NormCall::of(s, op, bwd).validate(); };
    def.output_meta = [op, bwd](const OpSchema& s) {
      return NormCall::of(s, op, bwd).output_meta();
    };
    def.strategies = [op, bwd](const OpSchema& s) {
      return norm_strategies(NormCall::of(s, op, bwd));
    };
  }
  defs[0].backward = [op](const ::dtensor::BackwardCall& c) { return autograd_backward(c, op); };
  detail::register_op_pair({std::move(defs[0]), std::move(defs[1]),
                            [op](OpCall& call) { return forward(call, op); },
                            [op](OpCall& call) { return backward(call, op); }});
}

struct Registrar {
  Registrar() {
    for (const NormOp* op : {&kBatchNorm, &kGroupNorm, &kInstanceNorm, &kLayerNorm})
      register_norm(*op);
  }
};
const Registrar registrar;

NormGrads grads_of(std::vector<DTensor> outs, const DTensor& input, const NormOutputMask& mask) {
  NormGrads g;
  std::size_t at = 0;
  if (mask.input) g.grad_input = detail::placed_like_input(outs.at(at++), input);
  if (mask.weight) g.grad_weight = outs.at(at++);
  if (mask.bias) g.grad_bias = outs.at(at++);
  return g;
}

}  // namespace
}  // namespace dtensor::norm

namespace dtensor {

using namespace norm;

BatchNormResult batch_norm(const DTensor& input, const std::optional<DTensor>& weight,
                           const std::optional<DTensor>& bias,
                           const std::optional<DTensor>& running_mean,
                           const std::optional<DTensor>& running_var, bool training,
                           double momentum, double eps) {
  auto outs = dispatch(kBatchNorm.name, encode_batch_norm(input, weight, bias, running_mean,
                                                          running_var, training, momentum, eps));
  BatchNormResult r{outs.at(0), running_mean, running_var};
  if (outs.size() == 3) {
    r.running_mean = outs[1];
    r.running_var = outs[2];
  }
  return r;
}

NormGrads batch_norm_backward(const DTensor& grad_output, const DTensor& input,
                              const std::optional<DTensor>& weight,
                              const std::optional<DTensor>& running_mean,
                              const std::optional<DTensor>& running_var, bool training, double eps,
                              const NormOutputMask& mask) {
  // Training recomputes the batch statistics: the running ones play no part.
  const std::optional<DTensor> none;
  return grads_of(dispatch(kBatchNorm.backward_name,
                           encode_batch_norm_backward(
                               grad_output, input, weight, training ? none : running_mean,
                               training ? none : running_var, training, eps, mask)),
                  input, mask);
}

DTensor group_norm(const DTensor& input, std::int64_t num_groups,
                   const std::optional<DTensor>& weight, const std::optional<DTensor>& bias,
                   double eps, NormActivation activation) {
  return dispatch(kGroupNorm.name, encode_norm(input, num_groups, weight, bias, eps, activation))
      .at(0);
}

NormGrads group_norm_backward(const DTensor& grad_output, const DTensor& input,
                              std::int64_t num_groups, const std::optional<DTensor>& weight,
                              double eps, const NormOutputMask& mask) {
  return grads_of(dispatch(kGroupNorm.backward_name,
                           encode_norm_backward(grad_output, input, num_groups, weight, eps, mask)),
                  input, mask);
}

DTensor instance_norm(const DTensor& input, const std::optional<DTensor>& weight,
                      const std::optional<DTensor>& bias, double eps, NormActivation activation) {
  return dispatch(kInstanceNorm.name,
                  encode_norm(input, std::nullopt, weight, bias, eps, activation))
      .at(0);
}

NormGrads instance_norm_backward(const DTensor& grad_output, const DTensor& input,
                                 const std::optional<DTensor>& weight, double eps,
                                 const NormOutputMask& mask) {
  return grads_of(
      dispatch(kInstanceNorm.backward_name,
               encode_norm_backward(grad_output, input, std::nullopt, weight, eps, mask)),
      input, mask);
}

DTensor layer_norm(const DTensor& input, const std::optional<DTensor>& weight,
                   const std::optional<DTensor>& bias, double eps, NormActivation activation) {
  return dispatch(kLayerNorm.name, encode_norm(input, std::nullopt, weight, bias, eps, activation))
      .at(0);
}

NormGrads layer_norm_backward(const DTensor& grad_output, const DTensor& input,
                              const std::optional<DTensor>& weight, double eps,
                              const NormOutputMask& mask) {
  return grads_of(
      dispatch(kLayerNorm.backward_name,
               encode_norm_backward(grad_output, input, std::nullopt, weight, eps, mask)),
      input, mask);
}

}  // namespace dtensor
