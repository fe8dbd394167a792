// read_safetensors / write_safetensors: one whole file on one process, on
// the layout of safetensors_format.h.
#include <filesystem>
#include <memory>
#include <vector>

#include "checkpoint/durable_file.h"
#include "checkpoint/safetensors_format.h"
#include "checkpoint/safetensors_header.h"
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
  std::map<std::string, Tensor> out;
  for (const auto& [name, e] : checkpoint::read_safetensors_header(*file, path)) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    const auto want = static_cast<std::int64_t>(e.bytes);
    if (want > 0 && file->read_at(static_cast<std::int64_t>(e.offset), t.data_ptr(), want) != want)
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
