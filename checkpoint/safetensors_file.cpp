// read_safetensors / write_safetensors: one whole file on one process, on
// the layout of safetensors_format.h.
#include <array>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "checkpoint/durable_file.h"
#include "checkpoint/safetensors_format.h"
#include "dtensor/checkpoint/checkpoint.h"
#include "dtensor/checkpoint/safetensors.h"

namespace dtensor {
namespace {

[[noreturn]] void corrupt(const std::string& path, const std::string& why) {
  throw CheckpointCorrupt("checkpoint", fmt::format("{}: {}", path, why));
}

// The layer's positional reader, with a file that cannot be opened reported
// as the caller's mistake (a wrong path), like any other bad argument.
std::unique_ptr<checkpoint::FileReader> open_file(const std::string& path) {
  try {
    return std::make_unique<checkpoint::FileReader>(path);
  } catch (const Error&) {
    throw InvalidArgument("checkpoint", fmt::format("read_safetensors: cannot open '{}'", path));
  }
}

}  // namespace

std::map<std::string, Tensor> read_safetensors(const std::string& path) {
  // The header first, then each tensor's bytes straight into the tensor.
  const auto file = open_file(path);
  const auto size = static_cast<std::uint64_t>(file->size());
  if (size < 8) corrupt(path, fmt::format("{} bytes: not a safetensors file", size));
  std::array<unsigned char, 8> prefix{};
  file->read_at(0, prefix.data(), 8);
  std::uint64_t n = 0;
  for (auto byte = prefix.rbegin(); byte != prefix.rend(); ++byte)
    n = (n << 8) | *byte;
  if (n > size - 8)
    corrupt(path,
            fmt::format("a header of {} bytes runs past the end of the file ({} bytes)", n, size));
  std::string text(static_cast<std::size_t>(n), '\0');
  if (file->read_at(8, text.data(), static_cast<std::int64_t>(n)) != static_cast<std::int64_t>(n))
    corrupt(path, "could not be read whole");
  const auto header = nlohmann::json::parse(text, nullptr, false);
  if (!header.is_object()) corrupt(path, "the header is not a JSON object");
  const std::uint64_t base = 8 + n;
  const std::uint64_t data_bytes = size - base;
  std::map<std::string, Tensor> out;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string what = fmt::format("{}: tensor '{}'", path, name);
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") ||
        !e.contains("data_offsets") || !e["dtype"].is_string() || !e["shape"].is_array() ||
        !e["data_offsets"].is_array())
      corrupt(path, fmt::format("tensor '{}' lacks dtype, shape or data_offsets", name));
    const DType dtype = checkpoint::parse_safetensors_dtype(e["dtype"].get<std::string>(), what);
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
    Tensor t = Tensor::empty(shape, dtype);
    const auto want = static_cast<std::int64_t>(bytes);
    if (want > 0 &&
        file->read_at(static_cast<std::int64_t>(base + begin), t.data_ptr(), want) != want)
      corrupt(path, fmt::format("tensor '{}' could not be read whole", name));
    out.emplace(name, std::move(t));
  }
  return out;
}

void write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors) {
  check_arg(!path.empty(), "checkpoint", "write_safetensors: path is empty");
  std::vector<checkpoint::SafetensorsItem> items;
  for (const auto& [name, t] : tensors) {
    check_arg(t.defined(), "checkpoint", "write_safetensors: tensor '{}' is undefined", name);
    items.push_back({name, t.dtype(), t.shape()});
  }
  const std::string preamble = checkpoint::safetensors_preamble(items);
  checkpoint::DurableWriter out(path);
  out.write(preamble.data(), static_cast<std::int64_t>(preamble.size()));
  for (const auto& [name, t] : tensors) {
    const Tensor host = t.to(Device::cpu()).contiguous();
    out.write(host.data_ptr(), static_cast<std::int64_t>(host.nbytes()));
  }
  out.commit();
  checkpoint::fsync_directory(std::filesystem::absolute(path).parent_path().string());
}

}  // namespace dtensor
