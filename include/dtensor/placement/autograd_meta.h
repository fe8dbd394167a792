// What a DTensor carries for autograd: whether gradients are wanted, the
// gradient accumulated so far (leaves), and the graph node that produced it
// (results of recorded operators). The engine that walks the graph lives
// with dispatch (dtensor/ops/autograd.h); this layer only holds the state,
// so that a DTensor can carry it without knowing about operators.
//
// The state is shared by the copies of a DTensor made after it exists, as a
// PyTorch tensor is one object however many names refer to it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace dtensor {

class DTensor;
namespace autograd {
class Node;
}

struct AutogradMeta {
  bool requires_grad = false;
  /// The accumulated gradient (leaves; non-leaves when retained).
  std::shared_ptr<DTensor> grad{};
  /// The node that computed this tensor (null for a leaf).
  std::shared_ptr<autograd::Node> grad_fn{};
  /// Which of grad_fn's outputs this tensor is.
  std::uint32_t output_nr = 0;
};

namespace detail {
/// Set by the autograd engine: records `result = input.redistribute(...)`
/// when `input` requires grad (and grad mode is on), returning the result
/// with its autograd state attached.
using RedistributeRecorder = std::function<DTensor(const DTensor& input, DTensor result)>;
void set_redistribute_recorder(RedistributeRecorder recorder);
const RedistributeRecorder& redistribute_recorder();
}  // namespace detail

}  // namespace dtensor
