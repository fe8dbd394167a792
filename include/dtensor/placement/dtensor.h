// DTensor: a local tensor plus the spec that says which part of the global
// tensor it is. The entry points mirror PyTorch DTensor.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "dtensor/core/tensor.h"
#include "dtensor/placement/autograd_meta.h"
#include "dtensor/placement/dtensor_spec.h"

namespace dtensor {

class DTensor {
 public:
  DTensor(Tensor local, DTensorSpec spec);

  /// Wraps each rank's local tensor; a collective over the mesh. Without
  /// `global_shape`, it is derived from all local shapes, which must fit the
  /// placements; with it, the ranks check that they were all given the same
  /// shape and placements and that every local shape fits them. Either way
  /// every rank raises the same InvalidArgument (naming the rank at fault),
  /// never one rank alone. (The DTensor constructor wraps without checking.)
  static DTensor from_local(const Tensor& local, const DeviceMesh& mesh,
                            const Placements& placements,
                            const std::optional<Shape>& global_shape = std::nullopt);

  const Tensor& to_local() const { return local_; }
  const DTensorSpec& spec() const { return spec_; }
  /// The mesh (PyTorch: DTensor.device_mesh); mesh() is the short form, as on DTensorSpec.
  const DeviceMesh& device_mesh() const { return spec_.mesh(); }
  const DeviceMesh& mesh() const { return spec_.mesh(); }
  const Placements& placements() const { return spec_.placements(); }
  /// The global shape (the local one is to_local().shape()).
  const Shape& shape() const { return spec_.shape(); }
  std::int64_t ndim() const { return spec_.ndim(); }
  DType dtype() const { return spec_.dtype(); }

  /// The same tensor with other placements (same mesh). Returns *this (sharing
  /// the local tensor) when nothing changes; otherwise a fresh local tensor.
  DTensor redistribute(const DeviceMesh& mesh, const Placements& placements) const;
  /// The whole global tensor on every rank of the mesh. Like redistribute(),
  /// and as in PyTorch, when the tensor is already replicated on every mesh dim
  /// this is the local tensor itself (shared storage, no copy): clone() it
  /// before writing to it. Otherwise a fresh tensor.
  Tensor full_tensor() const;
  /// The value of a one-element tensor (a loss, a step count) as a double, on
  /// every rank of the mesh, as PyTorch's tensor.item(): a collective when the
  /// element is not already replicated (a Partial loss is reduced first).
  /// InvalidArgument naming numel when the tensor has more or fewer elements.
  double item() const;

  // ---- shape operators (dtensor/ops/views.h; defined with them in ops/) ----
  /// torch's reshape (one -1 allowed), flatten, permute, transpose and narrow.
  DTensor reshape(const Shape& shape) const;
  DTensor flatten(std::int64_t start_dim = 0, std::int64_t end_dim = -1) const;
  DTensor permute(const std::vector<std::int64_t>& order) const;
  DTensor transpose(std::int64_t dim0, std::int64_t dim1) const;
  DTensor narrow(std::int64_t dim, std::int64_t start, std::int64_t length) const;

  // ---- autograd (docs/training.md) ----
  /// Whether gradients flow to this tensor: set on leaves (parameters) by
  /// requires_grad_(), true for every result of a recorded operator.
  bool requires_grad() const { return autograd_ && autograd_->requires_grad; }
  /// PyTorch's requires_grad_(): marks (or unmarks) a leaf. The state is
  /// shared with copies made afterwards. Unmarking a non-leaf is an
  /// InvalidArgument (detach() it instead).
  DTensor& requires_grad_(bool enabled = true);
  /// The gradient accumulated by backward() (nullopt before any, or after
  /// set_grad(std::nullopt)); placed like this tensor.
  std::optional<DTensor> grad() const;
  /// Replaces the accumulated gradient (nullopt clears it, as zero_grad's
  /// set_to_none). It must have this tensor's spec.
  void set_grad(const std::optional<DTensor>& grad);
  /// A leaf: not the result of a recorded operator.
  bool is_leaf() const { return !autograd_ || !autograd_->grad_fn; }
  /// The node that computed this tensor (null for leaves).
  std::shared_ptr<autograd::Node> grad_fn() const;
  /// The same data and spec, outside the graph (no gradient flows through it).
  DTensor detach() const { return DTensor(local_, spec_); }
  /// The autograd state itself (null until something sets it), for the
  /// engine; users go through the members above.
  const std::shared_ptr<AutogradMeta>& autograd_meta() const { return autograd_; }
  void set_autograd_meta(std::shared_ptr<AutogradMeta> meta) { autograd_ = std::move(meta); }

 private:
  Tensor local_;
  DTensorSpec spec_;
  std::shared_ptr<AutogradMeta> autograd_;
};

/// Splits `global` (given on world rank `src_data_rank`; other ranks may pass
/// an undefined Tensor) over the mesh. That rank sends each rank only its part.
/// Partial(sum) placements put the value on index 0 of that mesh dim and zeros
/// elsewhere; Partial(avg|max|min) put it everywhere.
DTensor distribute_tensor(const Tensor& global, const DeviceMesh& mesh,
                          const Placements& placements, int src_data_rank = 0);

}  // namespace dtensor
