// DeviceMesh: an N-D grid of ranks with one communicator per mesh dimension.
//
// Every rank in the mesh must construct the same mesh (same shape and ranks)
// in the same order relative to its other meshes: construction creates the
// per-dimension groups, and only the members of a group take part in its
// creation. Ranks outside the mesh may construct it too; they get no
// coordinate and no groups. Copies share the groups.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtensor/core/dtype.h"
#include "dtensor/core/process_group.h"
#include "dtensor/core/shape.h"

namespace dtensor {

class DeviceMesh {
 public:
  /// A mesh over world ranks 0 .. prod(shape)-1, row-major.
  DeviceMesh(DeviceType device_type, const Shape& shape);
  /// A mesh over the given world ranks (row-major order, each once).
  DeviceMesh(DeviceType device_type, const Shape& shape, const std::vector<int>& ranks);
  /// The same, over an explicit world group (default: dtensor::world()).
  DeviceMesh(DeviceType device_type, const Shape& shape, const std::vector<int>& ranks,
             std::shared_ptr<ProcessGroup> world);

  DeviceType device_type() const;
  /// The device this rank's local tensors live on: the CPU, or for a CUDA mesh
  /// the GPU init_process_group picked from the local rank (current device).
  Device device() const;
  /// Number of mesh dimensions.
  std::int64_t ndim() const;
  /// Ranks along mesh dimension `dim`.
  std::int64_t size(std::int64_t dim) const;
  std::int64_t size() const;  // number of ranks in the mesh
  const Shape& shape() const;
  /// World ranks, row-major.
  const std::vector<int>& ranks() const;

  /// This rank's coordinate, or nullopt for a rank outside the mesh.
  const std::optional<std::vector<std::int64_t>>& get_coordinate() const;
  bool contains_this_rank() const { return get_coordinate().has_value(); }
  /// Throws InvalidArgument "<what>: rank R is not in DeviceMesh(...)" on a
  /// rank outside the mesh: what every use of the mesh raises there.
  void require_member(const std::string& what) const;
  /// This rank's index along `dim` (its rank in get_group(dim)).
  std::int64_t get_local_rank(std::int64_t dim) const;
  /// The communicator of this rank's row along `dim`.
  std::shared_ptr<ProcessGroup> get_group(std::int64_t dim) const;
  /// The communicator of this rank's block over the mesh dims `dims` (the
  /// ranks that share this rank's coordinate on every other dim; group ranks
  /// in ascending world rank): get_group({d}) is get_group(d), every dim the
  /// mesh's group (dims of size 1 aside, which change no membership). Other blocks are made on
  /// first use, which is collective: every rank of the mesh asks for the same dims at the same
  /// point (as the ranks of one operator call do). InvalidArgument naming `dims` for an empty list,
  /// a dim out of range or a dim twice.
  std::shared_ptr<ProcessGroup> get_group(const std::vector<std::int64_t>& dims) const;
  /// A communicator over the whole mesh (metadata checks, scatter/gather).
  std::shared_ptr<ProcessGroup> get_mesh_group() const;
  /// The world rank at a mesh coordinate.
  int rank_at(const std::vector<std::int64_t>& coordinate) const;
  /// The mesh coordinate of a world rank (nullopt if not in the mesh).
  std::optional<std::vector<std::int64_t>> coordinate_of(int world_rank) const;

  bool operator==(const DeviceMesh& o) const;
  std::size_t hash() const;
  std::string str() const;  // "DeviceMesh(cpu, [2, 2], ranks=[0, 1, 2, 3])"

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

/// PyTorch's spelling: `init_device_mesh("cpu", (2, 2))`. The same as
/// DeviceMesh(device_type, shape) over world ranks 0 .. prod(shape)-1.
DeviceMesh init_device_mesh(DeviceType device_type, const Shape& mesh_shape);

}  // namespace dtensor
