#include "tools/dtensor-op/dump.h"

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tools/cli/npy.h"
#include "tools/dtensor-op/op_table.h"

namespace dtensor::op_cli {
namespace {

using json = nlohmann::ordered_json;

// The tensors in file order; undefined ones are not written. cat's inputs
// 1..K-1 are input1, input2, ... (and grad_input1, ...).
std::vector<std::pair<std::string, const Tensor*>> named(const GlobalTensors& g) {
  std::vector<std::pair<std::string, const Tensor*>> out{{"input", &g.input}, {"other", &g.other}};
  for (std::size_t k = 0; k < g.more_inputs.size(); ++k)
    out.emplace_back(fmt::format("input{}", k + 1), &g.more_inputs[k]);
  out.insert(out.end(), {{"weight", &g.weight},
                         {"bias", &g.bias},
                         {"running_mean", &g.running_mean},
                         {"running_var", &g.running_var},
                         {"target", &g.target},
                         {"grad_output", &g.grad_output},
                         {"output", &g.output},
                         {"running_mean_out", &g.running_mean_out},
                         {"running_var_out", &g.running_var_out},
                         {"grad_input", &g.grad_input},
                         {"grad_other", &g.grad_other}});
  for (std::size_t k = 0; k < g.grad_more_inputs.size(); ++k)
    out.emplace_back(fmt::format("grad_input{}", k + 1), &g.grad_more_inputs[k]);
  out.insert(out.end(), {{"grad_weight", &g.grad_weight}, {"grad_bias", &g.grad_bias}});
  return out;
}

}  // namespace

std::vector<std::string> placement_strings(const Placements& ps) {
  std::vector<std::string> out;
  for (const auto& p : ps)
    out.push_back(p.str());
  return out;
}

std::vector<std::pair<std::string, std::string>> dump_files(const GlobalTensors& g) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, t] : named(g))
    if (t->defined()) out.emplace_back(name, name + ".npy");
  return out;
}

std::string dump_metadata(const Options& o, int world_size, const Placements& output_placements,
                          const GlobalTensors& g) {
  json files = json::object();
  for (const auto& [name, file] : dump_files(g))
    files[name] = file;

  json meta = json::object();
  meta["format"] = "dtensor-op dump 1";
  meta["op"] = std::string(op_name(o.op));
  meta["spatial_dims"] = o.spatial_dims();
  meta["input_shape"] = o.input;
  meta["output_shape"] = g.output.shape();
  if (const OpEntry& e = op_entry(o.op); e.meta) e.meta(meta, o);
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

void write_dump(const std::string& dir, const std::string& meta_json, const GlobalTensors& g) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error(fmt::format("--dump: cannot create {}: {}", dir, ec.message()));
  for (const auto& [name, t] : named(g))
    if (t->defined()) cli::write_npy(dir + "/" + name + ".npy", *t);
  std::ofstream meta(dir + "/meta.json", std::ios::trunc);
  meta << meta_json << "\n";
  meta.close();
  if (!meta) throw std::runtime_error(fmt::format("--dump: cannot write {}/meta.json", dir));
}

}  // namespace dtensor::op_cli
