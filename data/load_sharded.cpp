// load_npy_sharded / load_safetensors_sharded: map the file, agree on what it
// holds, copy this rank's box.
#include "dtensor/data/load_sharded.h"

#include <exception>
#include <optional>
#include <string>

#include "checkpoint/collective_outcome.h"
#include "checkpoint/safetensors_header.h"
#include "data/copy_box.h"
#include "data/mapped_file.h"
#include "data/npy_header.h"
#include "dtensor/core/errors.h"

namespace dtensor::data {
namespace {

// The spec of the tensor to load, with the caller's placements checked
// against the array: a Partial has no meaning for values read from a file.
DTensorSpec spec_for(const DeviceMesh& mesh, const Placements& placements, const Shape& shape,
                     DType dtype, const char* what, const std::string& path) {
  for (const auto& p : placements)
    DTENSOR_CHECK_ARG(!p.is_partial(), "data",
                      "{}('{}'): placements {}: a Partial placement cannot be loaded (a file holds "
                      "values, not pending sums)",
                      what, path, placements_str(placements));
  try {
    return DTensorSpec(mesh, placements, shape, dtype);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument("data", fmt::format("{}('{}'): placements {} do not fit the array of "
                                              "shape {} on {}: {}",
                                              what, path, placements_str(placements),
                                              shape_str(shape), mesh.str(), e.what()));
  }
}

// Runs `load` on every rank of the mesh and raises the lowest failing rank's
// error on all of them, so no rank fails alone and leaves the others waiting
// in a later collective. `load` also describes the array it found: ranks
// that see different files (no shared file system) are refused alike.
template <typename Load>
DTensor collective_load(const DeviceMesh& mesh, const char* what, Load&& load) {
  mesh.require_member(what);
  std::optional<DTensor> out;
  std::string seen;
  std::exception_ptr error;
  try {
    out = load(seen);
  } catch (...) {
    error = std::current_exception();
  }
  const auto all = checkpoint::gather_outcomes(*mesh.get_mesh_group(), error, seen, what);
  for (std::size_t r = 1; r < all.size(); ++r)
    check_arg(all[r] == all[0], "data",
              "{}: ranks see different arrays: {} on mesh rank 0, {} on {}", what, all[0], all[r],
              r);
  return std::move(*out);
}

// This rank's box of the array at `data_offset` of `file`, whose elements
// have the bytes of `stored`, turned into values by `decode`, converted to
// the spec's dtype and moved to the mesh's device.
template <typename Decode>
DTensor load_box(const MappedFile& file, std::uint64_t data_offset, DType stored, Decode&& decode,
                 const DTensorSpec& spec, LoadStats* stats) {
  const checkpoint::Box mine{spec.global_offset(), spec.local_shape()};
  Tensor local = Tensor::empty(mine.extents, stored);
  if (stats) *stats = LoadStats{};
  copy_box(file.bytes(), data_offset, spec.shape(), dtype_size(stored), mine, local.data_ptr(),
           stats);
  local = decode(local);
  if (local.dtype() != spec.dtype()) local = local.to(spec.dtype());
  if (spec.mesh().device().is_cuda()) local = local.to(spec.mesh().device());
  return DTensor(local, spec);
}

}  // namespace

DTensor load_npy_sharded(const std::string& path, const DeviceMesh& mesh,
                         const Placements& placements, const LoadOptions& options) {
  constexpr const char* what = "load_npy_sharded";
  return collective_load(mesh, what, [&](std::string& seen) {
    const MappedFile file(path);
    const NpyHeader h = parse_npy_header(file.bytes(), path);
    check_npy_size(h, file.bytes().size(), path);
    seen = fmt::format("{} {}", npy_descr(h.element), shape_str(h.shape));
    const DType dtype = options.dtype.value_or(npy_values(h.element));
    const DTensorSpec spec = spec_for(mesh, placements, h.shape, dtype, what, path);
    return load_box(
        file, h.data_offset, npy_carrier_for(h.element, dtype, path),
        [&](const Tensor& raw) { return decode_npy_for(raw, h.element, dtype); }, spec,
        options.stats);
  });
}

DTensor load_safetensors_sharded(const std::string& path, const std::string& tensor_name,
                                 const DeviceMesh& mesh, const Placements& placements,
                                 const LoadOptions& options) {
  constexpr const char* what = "load_safetensors_sharded";
  return collective_load(mesh, what, [&](std::string& seen) {
    const MappedFile file(path);  // InvalidArgument naming the path when missing
    const checkpoint::FileReader reader(path);
    const auto entries = checkpoint::read_safetensors_header(reader, path);
    const auto it = entries.find(tensor_name);
    if (it == entries.end()) {
      std::string names;
      for (const auto& [name, e] : entries)
        names += (names.empty() ? "" : ", ") + name;
      throw InvalidArgument("data", fmt::format("{}: no tensor '{}' (it holds: {})", path,
                                                tensor_name, names.empty() ? "none" : names));
    }
    const auto& e = it->second;
    seen = fmt::format("{} {}", dtype_name(e.dtype), shape_str(e.shape));
    const DTensorSpec spec =
        spec_for(mesh, placements, e.shape, options.dtype.value_or(e.dtype), what, path);
    return load_box(
        file, e.offset, e.dtype, [](const Tensor& raw) { return raw; }, spec, options.stats);
  });
}

}  // namespace dtensor::data
