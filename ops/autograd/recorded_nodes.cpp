#include "ops/autograd/recorded_nodes.h"

#include <utility>

#include "dtensor/core/errors.h"

namespace dtensor::autograd::detail {
namespace {

std::vector<DTensor> dtensor_args(const std::vector<OpArg>& args) {
  std::vector<DTensor> out;
  for (const auto& a : args)
    if (const auto* d = std::get_if<DTensor>(&a)) out.push_back(*d);
  return out;
}

// Saved tensors keep their values but not their autograd state: a node that
// held its outputs' state would own itself.
DTensor without_history(const DTensor& x) {
  return x.detach();
}

class DispatchNode final : public Node {
 public:
  DispatchNode(const std::string& op, std::vector<OpArg> args, const std::vector<DTensor>& outputs,
               BackwardFunction backward)
      : Node(op, dtensor_args(args), outputs.size()), backward_(std::move(backward)) {
    for (auto& a : args)
      if (auto* d = std::get_if<DTensor>(&a)) *d = without_history(*d);
    forward_.emplace(op, std::move(args));
    for (const auto& y : outputs)
      outputs_.push_back(without_history(y));
  }

  std::vector<std::optional<DTensor>> apply(
      const std::vector<std::optional<DTensor>>& grad_outputs) override {
    DTENSOR_CHECK_ARG(
        forward_.has_value(), "autograd",
        "backward through {} a second time: its saved tensors were freed after the first "
        "backward (pass retain_graph=true to keep them)",
        name());
    std::vector<bool> needs;
    for (const auto& e : next_edges())
      needs.push_back(!e.empty());
    BackwardCall call{*forward_, outputs_, grad_outputs, needs};
    auto grads = backward_(call);
    DTENSOR_CHECK_ARG(grads.size() == needs.size(), "autograd",
                      "{}: its backward returned {} gradients for {} DTensor arguments", name(),
                      grads.size(), needs.size());
    return grads;
  }

  void release_saved() override {
    forward_.reset();
    outputs_.clear();
  }

 private:
  BackwardFunction backward_;
  std::optional<OpSchema> forward_;
  std::vector<DTensor> outputs_;
};

// A call of an operator without a backward on inputs that require grad:
// there is no gradient to give, and dropping it would silently train the
// leaves upstream on part of the loss. Raised only if backward() gets here.
class NoBackwardNode final : public Node {
 public:
  NoBackwardNode(const std::string& op, const std::vector<OpArg>& args, std::size_t num_outputs)
      : Node(op, dtensor_args(args), num_outputs) {}
  std::vector<std::optional<DTensor>> apply(const std::vector<std::optional<DTensor>>&) override {
    throw NotSupported(
        "autograd",
        fmt::format("backward: operator '{}' has no backward (OpDef::backward), and its inputs "
                    "require grad: the gradient cannot flow through it. Give it a backward, "
                    "compute its inputs under NoGradGuard or from detach(), or, if it has no "
                    "gradient on purpose, register it with OpDef::differentiable = false",
                    name()));
  }
  void release_saved() override {}
};

class RedistributeNode final : public Node {
 public:
  explicit RedistributeNode(const DTensor& input) : Node("redistribute", {input}, 1) {}
  std::vector<std::optional<DTensor>> apply(
      const std::vector<std::optional<DTensor>>& grad_outputs) override {
    return {grad_outputs.at(0)};
  }
  void release_saved() override {}
};

// Redistributes are recorded through the hook the placement layer offers.
const bool redistribute_hook_installed = [] {
  dtensor::detail::set_redistribute_recorder([](const DTensor& input, DTensor result) {
    if (!is_grad_enabled()) return result;
    return attach(std::make_shared<RedistributeNode>(input), {std::move(result)}).at(0);
  });
  return true;
}();

}  // namespace

bool should_record(const std::string& op, const std::vector<OpArg>& args) {
  if (!is_grad_enabled()) return false;
  bool any = false;
  for (const auto& a : args)
    if (const auto* d = std::get_if<DTensor>(&a)) any = any || d->requires_grad();
  if (!any) return false;
  const OpDef* def = find_op_def(op);
  return def && (def->backward || def->differentiable);
}

std::vector<DTensor> record_dispatch(const std::string& op, std::vector<OpArg> args,
                                     std::vector<DTensor> outputs) {
  const OpDef* def = find_op_def(op);
  std::shared_ptr<Node> node;
  if (def->backward)
    node = std::make_shared<DispatchNode>(op, std::move(args), outputs, def->backward);
  else
    node = std::make_shared<NoBackwardNode>(op, args, outputs.size());
  return attach(node, std::move(outputs));
}

}  // namespace dtensor::autograd::detail
