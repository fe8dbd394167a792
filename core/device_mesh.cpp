#include "dtensor/core/device_mesh.h"

#include "dtensor/core/comm_scope.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/detail/device_ops.h"
#include "dtensor/core/distributed.h"
#include "dtensor/core/errors.h"
#include "dtensor/core/logging.h"

namespace dtensor {

struct DeviceMesh::Impl {
  DeviceType device_type;
  Shape shape;
  std::vector<int> ranks;
  std::optional<std::vector<std::int64_t>> coord;
  std::vector<std::shared_ptr<ProcessGroup>> dim_groups;
  std::shared_ptr<ProcessGroup> mesh_group;
  std::shared_ptr<ProcessGroup> world_group;  // the parent of blocks made on first use
  // Blocks over several (not all) mesh dims, by the bit set of their dims.
  mutable std::mutex blocks_mutex;
  mutable std::map<unsigned, std::shared_ptr<ProcessGroup>> blocks;
  int world_rank = -1;  // this process, for the message of a rank outside the mesh
  int world_size = 0;
};

namespace {

std::vector<int> iota_ranks(const Shape& shape) {
  std::vector<int> r(static_cast<std::size_t>(shape_numel(shape)));
  for (std::size_t i = 0; i < r.size(); ++i)
    r[i] = static_cast<int>(i);
  return r;
}

// Group of `members` (world ranks) from the world group: the world itself when
// it is exactly the world, so a 1-D mesh over everyone opens no new connections.
std::shared_ptr<ProcessGroup> group_of(const std::shared_ptr<ProcessGroup>& world,
                                       const std::vector<int>& members) {
  bool is_world = static_cast<int>(members.size()) == world->size();
  for (std::size_t i = 0; is_world && i < members.size(); ++i)
    is_world = members[i] == static_cast<int>(i);
  if (is_world) return world;
  // Subgroup members are addressed by rank in the world group; the group
  // orders them ascending, so sort and keep the mesh order by mapping below.
  return world->new_subgroup(members);
}

// Every row of mesh dim d (the ranks that differ only in coordinate d), in
// order of their first rank; ranks increase along each row (checked before).
std::vector<std::vector<int>> rows_of_dim(const Shape& shape, const std::vector<int>& ranks,
                                          std::size_t d) {
  std::int64_t inner = 1;
  for (std::size_t k = d + 1; k < shape.size(); ++k)
    inner *= shape[k];
  std::vector<std::vector<int>> rows;
  for (std::int64_t f = 0; f < static_cast<std::int64_t>(ranks.size()); ++f) {
    if ((f / inner) % shape[d] != 0) continue;  // not the first of its row
    std::vector<int> row;
    for (std::int64_t i = 0; i < shape[d]; ++i)
      row.push_back(ranks[static_cast<std::size_t>(f + i * inner)]);
    rows.push_back(std::move(row));
  }
  return rows;
}

// This rank's group along dim d of a mesh covering the whole world, from one
// collective split (the world itself when the dim is one row over everyone).
std::shared_ptr<ProcessGroup> split_dim(const std::shared_ptr<ProcessGroup>& world,
                                        const Shape& shape, const std::vector<int>& ranks,
                                        std::size_t d) {
  const auto rows = rows_of_dim(shape, ranks, d);
  if (rows.size() == 1) return group_of(world, rows[0]);
  auto g = world->split_groups(rows);
  DTENSOR_CHECK_ARG(g != nullptr, "mesh", "mesh dim {}: rank {} is in no row", d, world->rank());
  return g;
}

}  // namespace

DeviceMesh::DeviceMesh(DeviceType device_type, const Shape& shape)
    : DeviceMesh(device_type, shape, iota_ranks(shape)) {}

DeviceMesh::DeviceMesh(DeviceType device_type, const Shape& shape, const std::vector<int>& ranks)
    : DeviceMesh(device_type, shape, ranks, world()) {}

DeviceMesh::DeviceMesh(DeviceType device_type, const Shape& shape, const std::vector<int>& ranks,
                       std::shared_ptr<ProcessGroup> world_group) {
  detail::CommScope scope("DeviceMesh");
  check_arg(world_group != nullptr, "mesh", "DeviceMesh: no world group");
  DTENSOR_CHECK_ARG(!shape.empty() && shape.size() <= 3, "mesh",
                    "mesh shape: {} has {} dims; 1, 2 or 3 are supported", shape_str(shape),
                    shape.size());
  for (auto s : shape)
    DTENSOR_CHECK_ARG(s >= 1, "mesh", "mesh shape: every dim must be >= 1, got {}",
                      shape_str(shape));
  DTENSOR_CHECK_ARG(shape_numel(shape) == static_cast<std::int64_t>(ranks.size()), "mesh",
                    "mesh shape {} holds {} ranks but {} were given", shape_str(shape),
                    shape_numel(shape), ranks.size());
  DTENSOR_CHECK_ARG(static_cast<std::int64_t>(ranks.size()) <= world_group->size(), "mesh",
                    "mesh shape {} needs {} ranks but the world has {}", shape_str(shape),
                    ranks.size(), world_group->size());
  std::set<int> seen;
  for (int r : ranks) {
    DTENSOR_CHECK_ARG(r >= 0 && r < world_group->size(), "mesh",
                      "mesh ranks: rank {} is outside the world [0, {})", r, world_group->size());
    check_arg(seen.insert(r).second, "mesh", "mesh ranks: rank {} appears twice", r);
  }
  // Along each mesh dim the ranks must increase. Checked here for the whole
  // mesh, not row by row while the groups are created: each rank creates only
  // its own rows' groups, so a per-row check let the ranks of a valid row go
  // on into group creation while those of an invalid row raised (a hang).
  {
    std::int64_t inner = 1;  // distance between neighbours along dim d (row-major)
    for (std::size_t d = shape.size(); d-- > 0;) {
      for (std::int64_t f = 0; f < static_cast<std::int64_t>(ranks.size()); ++f) {
        const bool has_next = (f / inner) % shape[d] + 1 < shape[d];
        if (!has_next) continue;
        const int a = ranks[static_cast<std::size_t>(f)];
        const int b = ranks[static_cast<std::size_t>(f + inner)];
        check_arg(a < b, "mesh",
                  "mesh ranks: along each mesh dim the ranks must increase (dim {} has {} "
                  "before {})",
                  d, a, b);
      }
      inner *= shape[d];
    }
  }
  auto impl = std::make_shared<Impl>();
  impl->device_type = device_type;
  impl->shape = shape;
  impl->ranks = ranks;
  const int me = world_group->rank();
  impl->world_rank = me;
  impl->world_group = world_group;
  impl->world_size = world_group->size();
  auto it = std::find(ranks.begin(), ranks.end(), me);
  if (it != ranks.end()) {
    std::int64_t flat = it - ranks.begin();
    std::vector<std::int64_t> c(shape.size());
    for (std::size_t d = shape.size(); d-- > 0;) {
      c[d] = flat % shape[d];
      flat /= shape[d];
    }
    impl->coord = c;
    // Groups are created in a fixed order (dim 0, 1, ..., then the whole mesh)
    // on every member, which is what subgroup creation requires.
    //
    // A mesh over the whole world: every world rank is a member and builds
    // this mesh, so all the rows of a dim can be made in one collective
    // split_groups call (NCCL: one ncclCommSplit of the world communicator,
    // instead of a new unique id and rendezvous per row). A mesh over part of
    // the world cannot: ranks outside it need not construct it, and a split
    // needs every rank of the parent, so it makes its rows with new_subgroup.
    const bool whole_world = static_cast<int>(ranks.size()) == world_group->size();
    for (std::size_t d = 0; whole_world && d < shape.size(); ++d)
      impl->dim_groups.push_back(split_dim(world_group, shape, ranks, d));
    for (std::size_t d = 0; !whole_world && d < shape.size(); ++d) {
      std::vector<int> members;
      std::vector<std::int64_t> cc = c;
      for (std::int64_t i = 0; i < shape[d]; ++i) {
        cc[d] = i;
        std::int64_t f = 0;
        for (std::size_t k = 0; k < shape.size(); ++k)
          f = f * shape[k] + cc[k];
        members.push_back(ranks[static_cast<std::size_t>(f)]);
      }
      DTENSOR_CHECK_ARG(std::is_sorted(members.begin(), members.end()), "mesh",
                        "mesh ranks: along each mesh dim the ranks must increase (dim {} has {})",
                        d, fmt::join(members, ","));
      impl->dim_groups.push_back(group_of(world_group, members));
    }
    std::vector<int> all = ranks;
    std::sort(all.begin(), all.end());
    impl->mesh_group = shape.size() == 1 ? impl->dim_groups[0] : group_of(world_group, all);
  }
  impl_ = std::move(impl);
  log::debug("created {}", str());
}

DeviceType DeviceMesh::device_type() const {
  return impl_->device_type;
}

Device DeviceMesh::device() const {
  if (impl_->device_type == DeviceType::CPU) return Device::cpu();
  auto ops = detail::find_device_ops(impl_->device_type);
  return Device{impl_->device_type, ops ? ops->current_device() : 0};
}
std::int64_t DeviceMesh::ndim() const {
  return static_cast<std::int64_t>(impl_->shape.size());
}
std::int64_t DeviceMesh::size(std::int64_t dim) const {
  return impl_->shape[normalize_dim(dim, ndim(), "mesh dim")];
}
std::int64_t DeviceMesh::size() const {
  return shape_numel(impl_->shape);
}
const Shape& DeviceMesh::shape() const {
  return impl_->shape;
}
const std::vector<int>& DeviceMesh::ranks() const {
  return impl_->ranks;
}
const std::optional<std::vector<std::int64_t>>& DeviceMesh::get_coordinate() const {
  return impl_->coord;
}

std::int64_t DeviceMesh::get_local_rank(std::int64_t dim) const {
  require_member("get_local_rank");
  return (*impl_->coord)[normalize_dim(dim, ndim(), "mesh dim")];
}

std::shared_ptr<ProcessGroup> DeviceMesh::get_group(std::int64_t dim) const {
  require_member("get_group");
  return impl_->dim_groups[normalize_dim(dim, ndim(), "mesh dim")];
}

std::shared_ptr<ProcessGroup> DeviceMesh::get_group(const std::vector<std::int64_t>& dims) const {
  require_member("get_group");
  DTENSOR_CHECK_ARG(!dims.empty(), "mesh", "get_group: dims is empty");
  unsigned set = 0;
  for (std::int64_t d : dims) {
    DTENSOR_CHECK_ARG(d >= 0 && d < ndim(), "mesh", "get_group: dims has {}, outside the {}-D mesh",
                      d, ndim());
    DTENSOR_CHECK_ARG(!(set & (1u << d)), "mesh", "get_group: dims has {} twice", d);
    set |= 1u << d;
  }
  // Dims of size 1 change no membership: the block is a row, or the whole
  // mesh, whenever its members are.
  unsigned wide = 0, outside = 0;
  for (std::int64_t d = 0; d < ndim(); ++d)
    if (impl_->shape[static_cast<std::size_t>(d)] > 1)
      (set & (1u << d) ? wide : outside) |= 1u << d;
  if (wide == 0) return impl_->dim_groups[static_cast<std::size_t>(dims[0])];
  if ((wide & (wide - 1)) == 0)
    return impl_->dim_groups[static_cast<std::size_t>(__builtin_ctz(wide))];
  if (outside == 0) return impl_->mesh_group;
  std::lock_guard lock(impl_->blocks_mutex);
  auto& g = impl_->blocks[set];
  if (g) return g;
  detail::CommScope scope("DeviceMesh::get_group");
  // Every block: the ranks whose coordinates agree outside `set`, ascending.
  const Shape& shape = impl_->shape;
  std::map<std::vector<std::int64_t>, std::vector<int>> by_rest;
  for (std::size_t f = 0; f < impl_->ranks.size(); ++f) {
    std::vector<std::int64_t> rest;
    std::int64_t flat = static_cast<std::int64_t>(f);
    for (std::size_t d = shape.size(); d-- > 0;) {
      if (!(set & (1u << d))) rest.push_back(flat % shape[d]);
      flat /= shape[d];
    }
    by_rest[rest].push_back(impl_->ranks[f]);
  }
  std::vector<std::vector<int>> blocks;
  std::vector<int> mine;
  for (auto& [rest, members] : by_rest) {
    std::sort(members.begin(), members.end());
    if (std::find(members.begin(), members.end(), impl_->world_rank) != members.end())
      mine = members;
    blocks.push_back(members);
  }
  // As for the rows at construction: one collective split when the mesh is
  // the whole world, else the members of this rank's block make it alone.
  const bool whole_world = static_cast<int>(impl_->ranks.size()) == impl_->world_group->size();
  g = whole_world ? impl_->world_group->split_groups(blocks) : group_of(impl_->world_group, mine);
  return g;
}

std::shared_ptr<ProcessGroup> DeviceMesh::get_mesh_group() const {
  require_member("get_mesh_group");
  return impl_->mesh_group;
}

void DeviceMesh::require_member(const std::string& what) const {
  DTENSOR_CHECK_ARG(
      impl_->coord.has_value(), "mesh",
      "{}: rank {} is not in {} (a mesh of {} of the world's {} ranks): a rank outside a "
      "mesh cannot use it; build the mesh over every rank, or skip its calls where "
      "contains_this_rank() is false",
      what, impl_->world_rank, str(), impl_->ranks.size(), impl_->world_size);
}

int DeviceMesh::rank_at(const std::vector<std::int64_t>& c) const {
  DTENSOR_CHECK_ARG(c.size() == impl_->shape.size(), "mesh",
                    "rank_at: coordinate of rank {} for a {}-D mesh", c.size(),
                    impl_->shape.size());
  std::int64_t f = 0;
  for (std::size_t k = 0; k < c.size(); ++k) {
    check_arg(c[k] >= 0 && c[k] < impl_->shape[k], "mesh", "rank_at: coordinate out of range");
    f = f * impl_->shape[k] + c[k];
  }
  return impl_->ranks[static_cast<std::size_t>(f)];
}

std::optional<std::vector<std::int64_t>> DeviceMesh::coordinate_of(int world_rank) const {
  auto it = std::find(impl_->ranks.begin(), impl_->ranks.end(), world_rank);
  if (it == impl_->ranks.end()) return std::nullopt;
  std::int64_t flat = it - impl_->ranks.begin();
  std::vector<std::int64_t> c(impl_->shape.size());
  for (std::size_t d = c.size(); d-- > 0;) {
    c[d] = flat % impl_->shape[d];
    flat /= impl_->shape[d];
  }
  return c;
}

bool DeviceMesh::operator==(const DeviceMesh& o) const {
  return impl_ == o.impl_ || (impl_->device_type == o.impl_->device_type &&
                              impl_->shape == o.impl_->shape && impl_->ranks == o.impl_->ranks);
}

std::size_t DeviceMesh::hash() const {
  std::size_t h = static_cast<std::size_t>(impl_->device_type) + 0x51ed27ull;
  for (auto s : impl_->shape)
    h = h * 1000003u ^ static_cast<std::size_t>(s);
  for (auto r : impl_->ranks)
    h = h * 1000003u ^ static_cast<std::size_t>(r);
  return h;
}

std::string DeviceMesh::str() const {
  return fmt::format("DeviceMesh({}, {}, ranks=[{}])", device_type_name(impl_->device_type),
                     shape_str(impl_->shape), fmt::join(impl_->ranks, ", "));
}

DeviceMesh init_device_mesh(DeviceType device_type, const Shape& mesh_shape) {
  return DeviceMesh(device_type, mesh_shape);
}

}  // namespace dtensor
