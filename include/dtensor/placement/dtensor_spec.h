// DTensorSpec: what every rank knows about a distributed tensor without
// talking to anyone: the mesh, one placement per mesh dim, the global shape
// and the dtype. From it any rank's local shape and global offset follow.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtensor/core/device_mesh.h"
#include "dtensor/core/dtype.h"
#include "dtensor/core/shape.h"
#include "dtensor/placement/placement.h"

namespace dtensor {

class DTensorSpec {
 public:
  /// Validates: one placement per mesh dim, Shard dims in range (negative dims
  /// are normalised), non-negative extents. InvalidArgument names the problem.
  DTensorSpec(DeviceMesh mesh, Placements placements, Shape global_shape, DType dtype);
  // Copied, never moved from: a spec always holds its data (a copy costs a
  // reference count).
  DTensorSpec(const DTensorSpec&) = default;
  DTensorSpec& operator=(const DTensorSpec&) = default;

  const DeviceMesh& mesh() const { return data_->mesh; }
  const Placements& placements() const { return data_->placements; }
  const Shape& shape() const { return data_->shape; }
  DType dtype() const { return data_->dtype; }
  std::int64_t ndim() const { return static_cast<std::int64_t>(shape().size()); }

  /// Shape and global offset of the shard at a mesh coordinate. A tensor dim
  /// sharded on several mesh dims is split in mesh-dim order (nested chunks).
  Shape local_shape_at(const std::vector<std::int64_t>& coordinate) const;
  Shape global_offset_at(const std::vector<std::int64_t>& coordinate) const;
  /// The same for this rank (an empty shape of zeros for a rank outside the mesh).
  Shape local_shape() const;
  Shape global_offset() const;

  bool is_replicated() const;  // Replicate on every mesh dim
  bool has_partial() const;
  /// Mesh dims that shard tensor dim `d`, in order.
  std::vector<std::int64_t> mesh_dims_sharding(std::int64_t d) const;

  bool operator==(const DTensorSpec& o) const;
  std::size_t hash() const;
  /// "DTensorSpec(f32, [8, 3, 10], [S(0),R] on DeviceMesh(...))".
  std::string str() const;

 private:
  // A spec never changes once made, so copies share it: every call's
  // arguments, plans and results copy specs, and a copy allocates nothing.
  struct Data {
    DeviceMesh mesh;
    Placements placements;
    Shape shape;
    DType dtype;
  };
  std::shared_ptr<const Data> data_;
};

}  // namespace dtensor
