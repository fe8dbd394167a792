#include "tools/dtensor-op/dump.h"

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tools/dtensor-conv/npy.h"

namespace dtensor::op_cli {
namespace {

using json = nlohmann::ordered_json;

// The tensors in file order; undefined ones are not written.
std::vector<std::pair<std::string, const Tensor*>> named(const GlobalTensors& g) {
  return {{"input", &g.input},
          {"weight", &g.weight},
          {"bias", &g.bias},
          {"grad_output", &g.grad_output},
          {"output", &g.output},
          {"grad_input", &g.grad_input},
          {"grad_weight", &g.grad_weight},
          {"grad_bias", &g.grad_bias}};
}

std::vector<std::string> placement_strings(const Placements& ps) {
  std::vector<std::string> out;
  for (const auto& p : ps)
    out.push_back(p.str());
  return out;
}

json padding_pairs(const ConvParams::Padding& padding) {
  json out = json::array();
  for (const auto& [l, r] : padding)
    out.push_back({l, r});
  return out;
}

}  // namespace

std::string dump_metadata(const Options& o, int world_size, const Placements& output_placements,
                          const GlobalTensors& g) {
  json files = json::object();
  for (const auto& [name, t] : named(g))
    if (t->defined()) files[name] = name + ".npy";

  json meta = json::object();
  meta["format"] = "dtensor-op dump 1";
  meta["op"] = std::string(op_name(o.op));
  meta["spatial_dims"] = o.spatial_dims();
  meta["input_shape"] = o.input;
  meta["output_shape"] = g.output.shape();
  switch (o.op) {
    case OpKind::Conv:
    case OpKind::ConvTranspose:
      meta["weight_shape"] = o.weight_shape();
      meta["out_channels"] = o.out_channels;
      meta["kernel"] = o.kernel;
      meta["stride"] = o.stride;
      meta["padding"] = padding_pairs(o.padding);
      if (o.op == OpKind::ConvTranspose) meta["output_padding"] = o.output_padding;
      meta["dilation"] = o.dilation;
      meta["groups"] = o.groups;
      meta["bias"] = o.bias;
      meta["padding_mode"] = std::string(padding_mode_str(o.padding_mode));
      break;
    case OpKind::MaxPool:
    case OpKind::AvgPool:
      meta["kernel"] = o.kernel;
      meta["stride"] = o.stride;
      meta["padding"] = padding_pairs(o.padding);
      if (o.op == OpKind::MaxPool) meta["dilation"] = o.dilation;
      meta["ceil_mode"] = o.ceil_mode;
      if (o.op == OpKind::AvgPool) {
        meta["count_include_pad"] = o.count_include_pad;
        meta["divisor_override"] = o.divisor_override ? json(*o.divisor_override) : json(nullptr);
      }
      break;
    case OpKind::AdaptiveAvgPool:
    case OpKind::AdaptiveMaxPool:
      meta["output_size"] = o.output_size;
      break;
    case OpKind::Pad:
      meta["padding"] = padding_pairs(o.padding);
      meta["mode"] = std::string(pad_mode_str(o.mode));
      meta["value"] = o.value;
      break;
  }
  meta["backward"] = o.backward;
  meta["dtype"] = std::string(dtype_name(o.dtype));
  // numpy has no bfloat16: bf16 tensors are stored widened (exactly) to float32.
  meta["npy_dtype"] = o.dtype == DType::F64   ? "float64"
                      : o.dtype == DType::F16 ? "float16"
                                              : "float32";
  meta["seed"] = o.seed;
  meta["world_size"] = world_size;
  meta["mesh"] = o.mesh;
  meta["placements"] = placement_strings(o.placements);
  meta["output_placements"] = placement_strings(output_placements);
  meta["files"] = files;
  return meta.dump();
}

void write_dump(const std::string& dir, const Options& o, int world_size,
                const Placements& output_placements, const GlobalTensors& g) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error(fmt::format("--dump: cannot create {}: {}", dir, ec.message()));
  for (const auto& [name, t] : named(g))
    if (t->defined()) conv_cli::write_npy(dir + "/" + name + ".npy", *t);
  std::ofstream meta(dir + "/meta.json", std::ios::trunc);
  meta << dump_metadata(o, world_size, output_placements, g) << "\n";
  meta.close();
  if (!meta) throw std::runtime_error(fmt::format("--dump: cannot write {}/meta.json", dir));
}

}  // namespace dtensor::op_cli
