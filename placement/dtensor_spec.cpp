#include "dtensor/placement/dtensor_spec.h"

#include "dtensor/core/errors.h"
#include "dtensor/placement/chunk.h"

namespace dtensor {

DTensorSpec::DTensorSpec(DeviceMesh mesh, Placements placements, Shape global_shape, DType dtype) {
  DTENSOR_CHECK_ARG(static_cast<std::int64_t>(placements.size()) == mesh.ndim(), "placement",
                    "placements: {} given ({}) for a {}-D mesh; one per mesh dim is needed",
                    placements.size(), placements_str(placements), mesh.ndim());
  for (auto e : global_shape)
    DTENSOR_CHECK_ARG(e >= 0, "placement", "global shape {} has a negative extent",
                      shape_str(global_shape));
  // The element count must fit (shape_numel throws InvalidArgument otherwise),
  // and so must its bytes.
  std::int64_t bytes = 0;
  DTENSOR_CHECK_ARG(!__builtin_mul_overflow(shape_numel(global_shape),
                                            static_cast<std::int64_t>(dtype_size(dtype)), &bytes),
                    "placement", "global shape {} of {} needs more than 2^63 bytes",
                    shape_str(global_shape), dtype_name(dtype));
  const auto rank = static_cast<std::int64_t>(global_shape.size());
  for (auto& p : placements) {
    if (p.is_shard())
      DTENSOR_CHECK_ARG(p.dim() >= -rank && p.dim() < rank, "placement",
                        "placements: {} is out of range for a tensor of rank {}", p.str(), rank);
    p = p.normalized(rank);
  }
  data_ = std::make_shared<const Data>(
      Data{std::move(mesh), std::move(placements), std::move(global_shape), dtype});
}

namespace {
// A coordinate names one position of the mesh: as many entries as mesh dims,
// each in range. Checked before any entry is read (a short coordinate would
// otherwise be read past its end), and for Replicate dims too, so that a bad
// coordinate is an error whatever the placements.
void check_coordinate(const DeviceMesh& mesh, const std::vector<std::int64_t>& c,
                      const char* what) {
  DTENSOR_CHECK_ARG(static_cast<std::int64_t>(c.size()) == mesh.ndim(), "placement",
                    "{}: coordinate {} has {} entries for a {}-D mesh", what, shape_str(c),
                    c.size(), mesh.ndim());
  for (std::size_t i = 0; i < c.size(); ++i)
    DTENSOR_CHECK_ARG(c[i] >= 0 && c[i] < mesh.shape()[i], "placement",
                      "{}: coordinate {} is outside the mesh shape {}", what, shape_str(c),
                      shape_str(mesh.shape()));
}
}  // namespace

Shape DTensorSpec::local_shape_at(const std::vector<std::int64_t>& c) const {
  check_coordinate(mesh(), c, "local_shape_at");
  Shape s = shape();
  for (std::size_t i = 0; i < placements().size(); ++i)
    if (placements()[i].is_shard()) {
      const auto d = placements()[i].dim();
      s[d] = chunk_extent(s[d], mesh().size(static_cast<std::int64_t>(i)), c[i]).length;
    }
  return s;
}

Shape DTensorSpec::global_offset_at(const std::vector<std::int64_t>& c) const {
  check_coordinate(mesh(), c, "global_offset_at");
  Shape s = shape(), off(shape().size(), 0);
  for (std::size_t i = 0; i < placements().size(); ++i)
    if (placements()[i].is_shard()) {
      const auto d = placements()[i].dim();
      const Extent e = chunk_extent(s[d], mesh().size(static_cast<std::int64_t>(i)), c[i]);
      off[d] += e.offset;
      s[d] = e.length;
    }
  return off;
}

Shape DTensorSpec::local_shape() const {
  const auto& c = mesh().get_coordinate();
  return c ? local_shape_at(*c) : Shape(shape().size(), 0);
}

Shape DTensorSpec::global_offset() const {
  const auto& c = mesh().get_coordinate();
  return c ? global_offset_at(*c) : Shape(shape().size(), 0);
}

bool DTensorSpec::is_replicated() const {
  for (auto& p : placements())
    if (!p.is_replicate()) return false;
  return true;
}

bool DTensorSpec::has_partial() const {
  for (auto& p : placements())
    if (p.is_partial()) return true;
  return false;
}

std::vector<std::int64_t> DTensorSpec::mesh_dims_sharding(std::int64_t d) const {
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < placements().size(); ++i)
    if (placements()[i].is_shard(d)) out.push_back(static_cast<std::int64_t>(i));
  return out;
}

bool DTensorSpec::operator==(const DTensorSpec& o) const {
  if (data_ == o.data_) return true;
  return dtype() == o.dtype() && shape() == o.shape() && placements() == o.placements() &&
         mesh() == o.mesh();
}

std::size_t DTensorSpec::hash() const {
  std::size_t h = mesh().hash() ^ (static_cast<std::size_t>(dtype()) + 0x9e3779b97f4a7c15ull);
  for (auto& p : placements())
    h = h * 1000003u ^ p.hash();
  for (auto e : shape())
    h = h * 1000003u ^ static_cast<std::size_t>(e);
  return h;
}

std::string DTensorSpec::str() const {
  return fmt::format("DTensorSpec({}, {}, [{}] on {})", dtype_name(dtype()), shape_str(shape()),
                     placements_str(placements()), mesh().str());
}

}  // namespace dtensor
