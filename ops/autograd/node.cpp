#include "dtensor/core/errors.h"
#include "dtensor/ops/autograd.h"

namespace dtensor::autograd {
namespace {
thread_local std::uint64_t next_sequence_nr = 0;

Edge edge_to(const DTensor& input) {
  const auto& meta = input.autograd_meta();
  if (!meta || !meta->requires_grad) return {};
  if (meta->grad_fn) return {meta->grad_fn, meta->output_nr, nullptr};
  return {nullptr, 0, meta};
}
}  // namespace

Node::Node(std::string name, const std::vector<DTensor>& inputs, std::size_t num_outputs)
    : name_(std::move(name)), sequence_nr_(next_sequence_nr++), num_outputs_(num_outputs) {
  next_.reserve(inputs.size());
  input_specs_.reserve(inputs.size());
  for (const auto& x : inputs) {
    next_.push_back(edge_to(x));
    input_specs_.push_back(x.spec());
  }
}

std::vector<DTensor> attach(const std::shared_ptr<Node>& node, std::vector<DTensor> outputs) {
  DTENSOR_CHECK_ARG(outputs.size() == node->num_outputs(), "autograd",
                    "{}: {} outputs for a node with {}", node->name(), outputs.size(),
                    node->num_outputs());
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    // Fresh state: an output may share its input's (a no-op redistribute
    // returns the input itself), which must keep its own history.
    auto meta = std::make_shared<AutogradMeta>();
    meta->requires_grad = true;
    meta->grad_fn = node;
    meta->output_nr = static_cast<std::uint32_t>(i);
    outputs[i].set_autograd_meta(std::move(meta));
  }
  return outputs;
}

}  // namespace dtensor::autograd
