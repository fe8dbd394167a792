// The losses' rows: mse_loss, cross_entropy and the pointwise losses. Each
// has a seeded target placed like the input, a 0-d output and no
// grad_output (the gradient of the loss is 1).
#include <algorithm>

#include "dtensor/ops/losses.h"
#include "tools/dtensor-op/entries/entry_helpers.h"
#include "tools/reference/reference_nn_ops.h"

namespace dtensor::op_cli::entries {
namespace {

std::uint64_t target_seed(const Seeds& seeds) {
  return derived_seed(seeds.grad_output, 201);
}

// The whole target of mse_loss and the pointwise losses: rand, or for
// binary_cross_entropy_with_logits probabilities (1 + rand) / 2 in [0, 1).
Tensor whole_target(const Options& o, const Seeds& seeds) {
  if (o.op != OpKind::BinaryCrossEntropyWithLogits)
    return Tensor::rand(o.input, o.dtype, target_seed(seeds));
  Tensor t = Tensor::rand(o.input, DType::F64, target_seed(seeds));
  for (std::int64_t i = 0; i < t.numel(); ++i)
    t.data<double>()[i] = (1.0 + t.data<double>()[i]) / 2.0;
  return t.to(o.dtype);
}

std::string reduction_line(const Options& o) {
  return fmt::format("reduction={}", loss_reduction_name(o.reduction));
}

void reduction_meta(json& meta, const Options& o) {
  meta["reduction"] = std::string(loss_reduction_name(o.reduction));
}

OpEntry loss_entry(OpKind kind, std::string_view name) {
  OpEntry e{kind, name, Family::Loss};
  e.options = {"--reduction"};
  e.output_shape = [](const Options&) { return Shape{}; };
  e.params_line = reduction_line;
  e.meta = reduction_meta;
  e.whole_target = whole_target;
  return e;
}

// ---- mse_loss ----

OpEntry mse_loss_entry() {
  OpEntry e = loss_entry(OpKind::MseLoss, "mse_loss");
  e.forward = [](const Options& o, const Operands& ops) {
    return Forward(mse_loss(ops.input, *ops.target, o.reduction));
  };
  e.backward = [](const Options& o, const Operands& ops, const std::optional<DTensor>&) {
    return input_grad(mse_loss_backward(ops.input, *ops.target, o.reduction, 1.0));
  };
  e.reference = [](const Options& o, const GlobalTensors& g, int ranks,
                   std::vector<TensorCheck>& out) {
    using namespace dtensor::reference;
    const bool mean = o.reduction == LossReduction::Mean;
    out.push_back(compare("output", g.output, ref_mse_loss(g.input, g.target, mean),
                          g.input.numel() + 1, o.dtype, ranks));
    if (o.backward)
      out.push_back(compare("grad_input", g.grad_input,
                            ref_mse_loss_grad_input(g.input, g.target, mean), 2, o.dtype, ranks));
  };
  return e;
}

// ---- cross_entropy ----

// Class probabilities: softmax over dim 1 of a seeded tensor.
Tensor whole_probabilities(const Options& o, const Seeds& seeds) {
  return reference::ref_softmax_dim1(Tensor::rand(o.input, DType::F64, target_seed(seeds)))
      .to(o.dtype);
}

// With --target indices: int64 [N, spatial...] uniform in [0, C) (from rand,
// so from the seed alone); when ignore_index is no class, element i (the
// global row-major index) is ignore_index for i % 7 == 3, so that ignoring
// is exercised too (a class ignore_index is hit by the draws themselves).
Tensor whole_class_indices(const Options& o, const Seeds& seeds) {
  Shape shape = o.input;
  shape.erase(shape.begin() + 1);
  const std::int64_t C = o.input[1];
  const Tensor u = Tensor::rand(shape, DType::F64, target_seed(seeds));
  Tensor t = Tensor::empty(shape, DType::I64);
  const bool ignore_is_class = o.ignore_index >= 0 && o.ignore_index < C;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    const auto c =
        static_cast<std::int64_t>((u.data<double>()[i] + 1.0) / 2.0 * static_cast<double>(C));
    t.data<std::int64_t>()[i] =
        !ignore_is_class && i % 7 == 3 ? o.ignore_index : std::min(c, C - 1);
  }
  return t;
}

CrossEntropyOptions cross_entropy_options(const Options& o) {
  return {o.reduction, o.ignore_index, o.label_smoothing};
}

// class indices (ignore_index, label_smoothing) against the naive oracle;
// probabilities against the probability oracle on the smoothed target
// (1 - s) t + s / C, computed here in f64.
void cross_entropy_reference(const Options& o, const GlobalTensors& g, int ranks,
                             std::vector<TensorCheck>& out) {
  using namespace dtensor::reference;
  const bool mean = o.reduction == LossReduction::Mean;
  const Int C = o.input[1];
  Tensor y, gx;
  if (o.class_indices) {
    y = ref_cross_entropy_indices(g.input, g.target, mean, o.ignore_index, o.label_smoothing);
    if (o.backward)
      gx = ref_cross_entropy_indices_grad_input(g.input, g.target, mean, o.ignore_index,
                                                o.label_smoothing);
  } else {
    Tensor t = g.target.to(DType::F64);
    const double s = o.label_smoothing;
    for (std::int64_t i = 0; i < t.numel(); ++i)
      t.data<double>()[i] = (1 - s) * t.data<double>()[i] + s / static_cast<double>(C);
    y = ref_cross_entropy(g.input, t, mean);
    if (o.backward) gx = ref_cross_entropy_grad_input(g.input, t, mean);
  }
  out.push_back(compare("output", g.output, y, g.input.numel() + 1, o.dtype, ranks));
  if (o.backward) out.push_back(compare("grad_input", g.grad_input, gx, C + 2, o.dtype, ranks));
}

OpEntry cross_entropy_entry() {
  OpEntry e = loss_entry(OpKind::CrossEntropy, "cross_entropy");
  e.options.insert(e.options.end(), {"--target", "--ignore-index", "--label-smoothing"});
  e.params_line = [](const Options& o) {
    return fmt::format("reduction={} target={} ignore_index={} label_smoothing={}",
                       loss_reduction_name(o.reduction),
                       o.class_indices ? "indices" : "probabilities", o.ignore_index,
                       o.label_smoothing);
  };
  e.meta = [](json& meta, const Options& o) {
    reduction_meta(meta, o);
    // target.npy is int64 ('<i8') for indices, whatever npy_dtype says.
    meta["target"] = o.class_indices ? "indices" : "probabilities";
    meta["ignore_index"] = o.ignore_index;
    meta["label_smoothing"] = o.label_smoothing;
  };
  e.whole_target = [](const Options& o, const Seeds& seeds) {
    return o.class_indices ? whole_class_indices(o, seeds) : whole_probabilities(o, seeds);
  };
  // The index target's placements: the input's along its other dims (input
  // dim 0 is target dim 0, input dim d >= 2 target dim d - 1); replicated
  // where the input is sharded along the classes or Partial.
  e.target_placements = [](const Options& o, const Placements& input) {
    if (!o.class_indices) return input;
    Placements out;
    for (const Placement& p : input)
      out.push_back(p.is_shard() && p.dim() != 1 ? Placement(Shard(p.dim() == 0 ? 0 : p.dim() - 1))
                                                 : Placement::replicate());
    return out;
  };
  e.forward = [](const Options& o, const Operands& ops) {
    return Forward(cross_entropy(ops.input, *ops.target, cross_entropy_options(o)));
  };
  e.backward = [](const Options& o, const Operands& ops, const std::optional<DTensor>&) {
    return input_grad(
        cross_entropy_backward(ops.input, *ops.target, cross_entropy_options(o), 1.0));
  };
  e.reference = cross_entropy_reference;
  return e;
}

// ---- the pointwise losses ----

reference::RefPointwiseLoss ref_pointwise_loss_kind(const Options& o) {
  using reference::RefPointwiseLoss;
  return o.op == OpKind::L1Loss         ? RefPointwiseLoss::L1
         : o.op == OpKind::SmoothL1Loss ? RefPointwiseLoss::SmoothL1
         : o.op == OpKind::HuberLoss    ? RefPointwiseLoss::Huber
                                        : RefPointwiseLoss::BceWithLogits;
}

void pointwise_loss_reference(const Options& o, const GlobalTensors& g, int ranks,
                              std::vector<TensorCheck>& out) {
  using namespace dtensor::reference;
  const bool mean = o.reduction == LossReduction::Mean;
  const RefPointwiseLoss l = ref_pointwise_loss_kind(o);
  const double param = o.op == OpKind::HuberLoss ? o.delta : o.beta;
  out.push_back(compare("output", g.output, ref_pointwise_loss(l, g.input, g.target, mean, param),
                        g.input.numel() + 1, o.dtype, ranks));
  if (o.backward)
    out.push_back(compare("grad_input", g.grad_input,
                          ref_pointwise_loss_grad_input(l, g.input, g.target, mean, param), 4,
                          o.dtype, ranks));
}

std::vector<OpEntry> pointwise_loss_entries() {
  std::vector<OpEntry> out;
  OpEntry e = loss_entry(OpKind::L1Loss, "l1_loss");
  e.forward = [](const Options& o, const Operands& ops) {
    return Forward(l1_loss(ops.input, *ops.target, o.reduction));
  };
  e.backward = [](const Options& o, const Operands& ops, const std::optional<DTensor>&) {
    return input_grad(l1_loss_backward(ops.input, *ops.target, o.reduction, 1.0));
  };
  e.reference = pointwise_loss_reference;
  out.push_back(e);

  e = loss_entry(OpKind::SmoothL1Loss, "smooth_l1_loss");
  e.options.push_back("--beta");
  e.params_line = [](const Options& o) {
    return fmt::format("reduction={} beta={}", loss_reduction_name(o.reduction), o.beta);
  };
  e.meta = [](json& meta, const Options& o) {
    reduction_meta(meta, o);
    meta["beta"] = o.beta;
  };
  e.forward = [](const Options& o, const Operands& ops) {
    return Forward(smooth_l1_loss(ops.input, *ops.target, o.reduction, o.beta));
  };
  e.backward = [](const Options& o, const Operands& ops, const std::optional<DTensor>&) {
    return input_grad(smooth_l1_loss_backward(ops.input, *ops.target, o.reduction, o.beta, 1.0));
  };
  e.reference = pointwise_loss_reference;
  out.push_back(e);

  e = loss_entry(OpKind::HuberLoss, "huber_loss");
  e.options.push_back("--delta");
  e.params_line = [](const Options& o) {
    return fmt::format("reduction={} delta={}", loss_reduction_name(o.reduction), o.delta);
  };
  e.meta = [](json& meta, const Options& o) {
    reduction_meta(meta, o);
    meta["delta"] = o.delta;
  };
  e.forward = [](const Options& o, const Operands& ops) {
    return Forward(huber_loss(ops.input, *ops.target, o.reduction, o.delta));
  };
  e.backward = [](const Options& o, const Operands& ops, const std::optional<DTensor>&) {
    return input_grad(huber_loss_backward(ops.input, *ops.target, o.reduction, o.delta, 1.0));
  };
  e.reference = pointwise_loss_reference;
  out.push_back(e);

  e = loss_entry(OpKind::BinaryCrossEntropyWithLogits, "binary_cross_entropy_with_logits");
  e.forward = [](const Options& o, const Operands& ops) {
    return Forward(binary_cross_entropy_with_logits(ops.input, *ops.target, o.reduction));
  };
  e.backward = [](const Options& o, const Operands& ops, const std::optional<DTensor>&) {
    return input_grad(
        binary_cross_entropy_with_logits_backward(ops.input, *ops.target, o.reduction, 1.0));
  };
  e.reference = pointwise_loss_reference;
  out.push_back(e);
  return out;
}

}  // namespace
}  // namespace dtensor::op_cli::entries

namespace dtensor::op_cli {

std::vector<OpEntry> loss_entries() {
  using namespace entries;
  std::vector<OpEntry> out{mse_loss_entry(), cross_entropy_entry()};
  for (auto& e : pointwise_loss_entries())
    out.push_back(std::move(e));
  return out;
}

}  // namespace dtensor::op_cli
