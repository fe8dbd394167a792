// load_npy_sharded / load_safetensors_sharded: map the file, agree on what it
// holds, copy this rank's box.
#include "dtensor/data/load_sharded.h"

#include <cstring>
#include <exception>
#include <memory>
#include <vector>

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
    check_arg(!p.is_partial(), "data",
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

// Bytes of `shape` elements of `element_size`, or InvalidArgument when 64 bits cannot count them.
std::uint64_t array_bytes(const Shape& shape, std::size_t element_size, const std::string& path) {
  std::uint64_t bytes = element_size;
  for (const std::int64_t e : shape)
    check_arg(!__builtin_mul_overflow(bytes, static_cast<std::uint64_t>(e), &bytes), "data",
              "{}: shape {} has more bytes than 64 bits count", path, shape_str(shape));
  return bytes;
}

// The dtype whose elements have the stored bytes (integers are carried in a
// float tensor of their width until decoded), and the dtype of the values.
DType carrier_of(NpyElement e) {
  switch (e) {
    case NpyElement::F16:
      return DType::F16;
    case NpyElement::F32:
    case NpyElement::I32:
      return DType::F32;
    case NpyElement::F64:
    case NpyElement::I64:
      return DType::F64;
  }
  return DType::F32;
}
DType values_of(NpyElement e) {
  return e == NpyElement::I32 || e == NpyElement::I64 ? DType::F64 : carrier_of(e);
}

// Integers as F64 (exact up to 2^53): libdtensor has no integer dtype.
Tensor decode(const Tensor& raw, NpyElement e) {
  if (e != NpyElement::I32 && e != NpyElement::I64) return raw;
  Tensor out = Tensor::empty(raw.shape(), DType::F64);
  auto* dst = out.data<double>();
  const auto n = static_cast<std::size_t>(raw.numel());
  const auto* src = static_cast<const char*>(raw.data_ptr());
  for (std::size_t i = 0; i < n; ++i) {
    if (e == NpyElement::I32) {
      std::int32_t v = 0;
      std::memcpy(&v, src + 4 * i, 4);
      dst[i] = static_cast<double>(v);
    } else {
      std::int64_t v = 0;
      std::memcpy(&v, src + 8 * i, 8);
      dst[i] = static_cast<double>(v);
    }
  }
  return out;
}

std::string_view element_name(NpyElement e) {
  switch (e) {
    case NpyElement::F16:
      return "<f2";
    case NpyElement::F32:
      return "<f4";
    case NpyElement::F64:
      return "<f8";
    case NpyElement::I32:
      return "<i4";
    case NpyElement::I64:
      return "<i8";
  }
  return "?";
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
    const std::uint64_t want = array_bytes(h.shape, npy_element_size(h.element), path);
    const std::uint64_t have = file.bytes().size() - h.data_offset;
    check_arg(have == want, "data", "{}: {} data bytes for shape {} of {} ({} expected{})", path,
              have, shape_str(h.shape), element_name(h.element), want,
              have < want ? ": the file is truncated" : "");
    seen = fmt::format("{} {}", element_name(h.element), shape_str(h.shape));
    const DTensorSpec spec = spec_for(mesh, placements, h.shape,
                                      options.dtype.value_or(values_of(h.element)), what, path);
    return load_box(
        file, h.data_offset, carrier_of(h.element),
        [&](const Tensor& raw) { return decode(raw, h.element); }, spec, options.stats);
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
