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
      meta["padding_mode"] = std::string(padding_mode_name(o.padding_mode));
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
      meta["mode"] = std::string(pad_mode_name(o.mode));
      meta["value"] = o.value;
      break;
    case OpKind::Upsample:
      meta["mode"] = std::string(upsample_mode_name(o.upsample_mode));
      meta["size"] = o.size.empty() ? json(nullptr) : json(o.size);
      meta["scale_factor"] = o.scale.empty() ? json(nullptr) : json(o.scale);
      meta["align_corners"] = o.align_corners;
      break;
    case OpKind::BatchNorm:
    case OpKind::GroupNorm:
    case OpKind::InstanceNorm:
    case OpKind::LayerNorm:
      if (o.op == OpKind::GroupNorm) meta["num_groups"] = o.num_groups;
      if (o.op == OpKind::LayerNorm)
        meta["normalized_shape"] = Shape(o.input.begin() + 1, o.input.end());
      meta["eps"] = o.eps;
      if (o.op == OpKind::BatchNorm) {
        meta["momentum"] = o.momentum;
        meta["training"] = o.training;
      }
      meta["affine"] = o.affine;
      meta["weight_shape"] = o.affine ? json(o.weight_shape()) : json(nullptr);
      break;
    case OpKind::Cat: {
      meta["inputs"] = o.inputs;
      meta["channels"] = o.channels;
      meta["cat_dim"] = o.cat_dim;
      json shapes = json::array();
      for (std::int64_t k = 0; k < o.inputs; ++k)
        shapes.push_back(o.input_shape(k));
      meta["input_shapes"] = shapes;
      break;
    }
    case OpKind::LeakyRelu:
      meta["negative_slope"] = o.negative_slope;
      break;
    case OpKind::Gelu:
      meta["approximate"] = std::string(gelu_approximate_name(o.approximate));
      break;
    case OpKind::Silu:
    case OpKind::Sigmoid:
    case OpKind::Tanh:
    case OpKind::Relu:
      break;
    case OpKind::MseLoss:
    case OpKind::CrossEntropy:
      meta["reduction"] = std::string(loss_reduction_name(o.reduction));
      if (o.op == OpKind::CrossEntropy) {
        // target.npy is int64 ('<i8') for indices, whatever npy_dtype says.
        meta["target"] = o.class_indices ? "indices" : "probabilities";
        meta["ignore_index"] = o.ignore_index;
        meta["label_smoothing"] = o.label_smoothing;
      }
      break;
    case OpKind::L1Loss:
    case OpKind::BinaryCrossEntropyWithLogits:
      meta["reduction"] = std::string(loss_reduction_name(o.reduction));
      break;
    case OpKind::SmoothL1Loss:
      meta["reduction"] = std::string(loss_reduction_name(o.reduction));
      meta["beta"] = o.beta;
      break;
    case OpKind::HuberLoss:
      meta["reduction"] = std::string(loss_reduction_name(o.reduction));
      meta["delta"] = o.delta;
      break;
    case OpKind::Dropout:
      meta["p"] = o.p;
      break;
    case OpKind::Linear:
      meta["out_features"] = o.out_features;
      meta["bias"] = o.bias;
      meta["weight_shape"] = o.weight_shape();
      break;
    case OpKind::Add:
    case OpKind::Sub:
    case OpKind::Mul:
    case OpKind::Div:
    case OpKind::Maximum:
    case OpKind::Minimum:
      meta["other_shape"] = o.other_shape;
      break;
    case OpKind::Clamp:
      meta["min"] = o.min ? json(*o.min) : json(nullptr);
      meta["max"] = o.max ? json(*o.max) : json(nullptr);
      break;
    case OpKind::Pow:
      meta["exponent"] = o.exponent;
      break;
    case OpKind::Exp:
    case OpKind::Log:
    case OpKind::Sqrt:
    case OpKind::Rsqrt:
    case OpKind::Neg:
    case OpKind::Abs:
    case OpKind::Square:
      break;
    // The shape operators: their options resolved.
    case OpKind::Reshape:
      meta["shape"] = o.shape;
      break;
    case OpKind::Permute:
      meta["order"] = o.order;
      break;
    case OpKind::Transpose:
      meta["dim0"] = o.dim0;
      meta["dim1"] = o.dim1;
      break;
    case OpKind::Flatten:
      meta["start_dim"] = o.start_dim;
      meta["end_dim"] = o.end_dim;
      break;
    case OpKind::Narrow:
      meta["dim"] = o.dim;
      meta["start"] = o.start;
      meta["length"] = o.length;
      break;
    case OpKind::Sum:
    case OpKind::Mean:
    case OpKind::Amax:
    case OpKind::Amin:
    case OpKind::Var:
      meta["dims"] = o.dims;
      meta["keepdim"] = o.keepdim;
      if (o.op == OpKind::Var) meta["correction"] = o.correction;
      break;
    case OpKind::Softmax:
    case OpKind::LogSoftmax:
      meta["dim"] = o.dim;
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
