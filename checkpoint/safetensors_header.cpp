#include "checkpoint/safetensors_header.h"

#include <array>
#include <nlohmann/json.hpp>

#include "checkpoint/safetensors_format.h"
#include "dtensor/checkpoint/checkpoint.h"

namespace dtensor::checkpoint {
namespace {

[[noreturn]] void corrupt(const std::string& path, const std::string& why) {
  throw CheckpointCorrupt("checkpoint", fmt::format("{}: {}", path, why));
}

}  // namespace

std::map<std::string, SafetensorsEntry> read_safetensors_header(const FileReader& file,
                                                                const std::string& path) {
  const auto size = static_cast<std::uint64_t>(file.size());
  if (size < 8) corrupt(path, fmt::format("{} bytes: not a safetensors file", size));
  std::array<unsigned char, 8> prefix{};
  file.read_at(0, prefix.data(), 8);
  std::uint64_t n = 0;
  for (auto byte = prefix.rbegin(); byte != prefix.rend(); ++byte)
    n = (n << 8) | *byte;
  if (n > size - 8)
    corrupt(path,
            fmt::format("a header of {} bytes runs past the end of the file ({} bytes)", n, size));
  std::string text(static_cast<std::size_t>(n), '\0');
  if (file.read_at(8, text.data(), static_cast<std::int64_t>(n)) != static_cast<std::int64_t>(n))
    corrupt(path, "could not be read whole");
  const auto header = nlohmann::json::parse(text, nullptr, false);
  if (!header.is_object()) corrupt(path, "the header is not a JSON object");
  const std::uint64_t base = 8 + n;
  const std::uint64_t data_bytes = size - base;
  std::map<std::string, SafetensorsEntry> out;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string what = fmt::format("{}: tensor '{}'", path, name);
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") ||
        !e.contains("data_offsets") || !e["dtype"].is_string() || !e["shape"].is_array() ||
        !e["data_offsets"].is_array())
      corrupt(path, fmt::format("tensor '{}' lacks dtype, shape or data_offsets", name));
    const DType dtype = parse_safetensors_dtype(e["dtype"].get<std::string>(), what);
    Shape shape;
    for (const auto& d : e["shape"]) {
      if (!d.is_number_integer() || d.get<std::int64_t>() < 0)
        corrupt(path, fmt::format("tensor '{}' has a bad shape {}", name, e["shape"].dump()));
      shape.push_back(d.get<std::int64_t>());
    }
    const auto& off = e["data_offsets"];
    if (off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      corrupt(path, fmt::format("tensor '{}' has bad data_offsets {}", name, off.dump()));
    const auto begin = off[0].get<std::uint64_t>(), end = off[1].get<std::uint64_t>();
    if (begin > end || end > data_bytes)
      corrupt(path, fmt::format("tensor '{}': data_offsets [{}, {}) lie outside the {} bytes of "
                                "data",
                                name, begin, end, data_bytes));
    // Sizes first (overflow-checked), so that a header promising more than
    // the file holds allocates nothing.
    std::int64_t numel = 0;
    try {
      numel = shape_numel(shape);
    } catch (const InvalidArgument&) {
      corrupt(path, fmt::format("tensor '{}': shape {} has more elements than int64 holds", name,
                                shape_str(shape)));
    }
    const std::uint64_t element = dtype_size(dtype);
    if (static_cast<std::uint64_t>(numel) > data_bytes / element)
      corrupt(path, fmt::format("tensor '{}': shape {} of {} needs more than the {} bytes of data",
                                name, shape_str(shape), dtype_name(dtype), data_bytes));
    const std::uint64_t bytes = static_cast<std::uint64_t>(numel) * element;
    if (end - begin != bytes)
      corrupt(path, fmt::format("tensor '{}': {} bytes of data for shape {} of {} ({} expected)",
                                name, end - begin, shape_str(shape), dtype_name(dtype), bytes));
    out.emplace(name, SafetensorsEntry{dtype, std::move(shape), base + begin, bytes});
  }
  return out;
}

}  // namespace dtensor::checkpoint
