// Autograd over dispatch: every dispatched operator whose OpDef has a
// backward records a node when one of its DTensor arguments requires grad;
// backward() walks the recorded graph from a result, in the reverse order
// of the forward (the same order on every rank, so that the backward's
// collectives match), and accumulates gradients into the leaves' grad().
//
// Placement: every gradient is placed like the tensor it is the gradient of
// (a Partial tensor's gradient is Replicate). A leaf's gradient that comes
// out Partial (a replicated weight whose input was sharded) stays Partial
// until the end of backward(), where every such gradient is reduced at once,
// in buckets (reduce_partials), not once per operator.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dtensor/ops/registry.h"
#include "dtensor/placement/dtensor.h"

namespace dtensor {

/// Whether operators called on this thread are recorded (PyTorch's
/// torch.is_grad_enabled()).
bool is_grad_enabled();
void set_grad_enabled(bool enabled);

/// Recording off for its lifetime (torch.no_grad()).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

/// Computes the gradients of `output` with respect to every leaf that
/// requires grad and accumulates them into their grad(). Without `grad`,
/// `output` must hold one element (a loss) and its gradient is 1. A
/// collective: every rank of the output's mesh calls it. The graph's saved
/// tensors are freed afterwards unless `retain_graph` (a second backward
/// through a freed graph is an InvalidArgument).
void backward(const DTensor& output, const std::optional<DTensor>& grad = std::nullopt,
              bool retain_graph = false);

namespace autograd {

/// Where a node's input gradient goes: the node that produced the input (and
/// which of its outputs the input was), or the input itself when it is a
/// leaf. Empty when the input does not require grad.
struct Edge {
  std::shared_ptr<Node> node{};
  std::uint32_t output_nr = 0;
  std::shared_ptr<AutogradMeta> leaf{};
  bool empty() const { return !node && !leaf; }
};

/// One recorded operation.
class Node {
 public:
  /// `inputs`: the recorded call's DTensor arguments, in order.
  Node(std::string name, const std::vector<DTensor>& inputs, std::size_t num_outputs);
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  const std::string& name() const { return name_; }
  /// Creation order on this thread: backward runs the ready node with the
  /// highest number first, so every rank runs the nodes in the same order.
  std::uint64_t sequence_nr() const { return sequence_nr_; }
  std::size_t num_outputs() const { return num_outputs_; }
  const std::vector<Edge>& next_edges() const { return next_; }
  /// The spec of each input (what its gradient is placed like).
  const std::vector<DTensorSpec>& input_specs() const { return input_specs_; }

  /// The gradient of each input given those of the outputs.
  virtual std::vector<std::optional<DTensor>> apply(
      const std::vector<std::optional<DTensor>>& grad_outputs) = 0;
  /// Drops what the forward saved (after a backward without retain_graph).
  virtual void release_saved() = 0;

 private:
  std::string name_;
  std::uint64_t sequence_nr_;
  std::size_t num_outputs_;
  std::vector<Edge> next_;
  std::vector<DTensorSpec> input_specs_;
};

/// Attaches `node` to `outputs` (fresh autograd state for each, output i
/// being the node's output i) and returns them. What dispatch does for a
/// recorded call; custom autograd functions outside dispatch can do the same.
std::vector<DTensor> attach(const std::shared_ptr<Node>& node, std::vector<DTensor> outputs);

}  // namespace autograd
}  // namespace dtensor
