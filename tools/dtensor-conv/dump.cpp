#include "tools/dtensor-conv/dump.h"

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "tools/dtensor-conv/json.h"
#include "tools/dtensor-conv/npy.h"

namespace dtensor::conv_cli {
namespace {

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

}  // namespace

std::string dump_metadata(const Options& o, int world_size, const Placements& output_placements,
                          const GlobalTensors& g) {
  const ConvParams p = o.conv_params();
  const Shape weight = o.weight_shape();
  JsonValue padding = JsonValue::array();
  for (const auto& [l, r] : p.padding)
    padding.push_back({l, r});

  JsonObject files;
  for (const auto& [name, t] : named(g))
    if (t->defined()) files.add(name, name + ".npy");

  JsonObject meta;
  meta.add("format", "dtensor-conv dump 1")
      .add("spatial_dims", o.spatial_dims())
      .add("input_shape", o.input)
      .add("weight_shape", weight)
      .add("output_shape", g.output.shape())
      .add("out_channels", weight[0])
      .add("kernel", Shape(weight.begin() + 2, weight.end()))
      .add("stride", p.stride)
      .add("padding", padding)
      .add("dilation", p.dilation)
      .add("groups", p.groups)
      .add("bias", o.bias)
      .add("backward", o.backward)
      .add("dtype", std::string(dtype_name(o.dtype)))
      // numpy has no bfloat16: bf16 tensors are stored widened (exactly) to float32.
      .add("npy_dtype", o.dtype == DType::F64   ? "float64"
                        : o.dtype == DType::F16 ? "float16"
                                                : "float32")
      .add("seed", o.seed)
      .add("world_size", world_size)
      .add("mesh", o.mesh)
      .add("placements", placement_strings(o.placements))
      .add("output_placements", placement_strings(output_placements))
      .add("files", files);
  return meta.str();
}

void write_dump(const std::string& dir, const Options& o, int world_size,
                const Placements& output_placements, const GlobalTensors& g) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error(fmt::format("--dump: cannot create {}: {}", dir, ec.message()));
  for (const auto& [name, t] : named(g))
    if (t->defined()) write_npy(dir + "/" + name + ".npy", *t);
  std::ofstream meta(dir + "/meta.json", std::ios::trunc);
  meta << dump_metadata(o, world_size, output_placements, g) << "\n";
  meta.close();
  if (!meta) throw std::runtime_error(fmt::format("--dump: cannot write {}/meta.json", dir));
}

}  // namespace dtensor::conv_cli
