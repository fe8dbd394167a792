#include "tools/dtensor-op/options.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include "dtensor/core/errors.h"
#include "tools/cli/value_reader.h"
#include "tools/dtensor-op/op_table.h"

namespace dtensor::op_cli {
namespace {

using Int = std::int64_t;
using cli::fail, cli::split, cli::without_component;

// dtensor-op reads "+3" as 3.
const cli::ValueReader read{true};

// A list of positive finite numbers.
std::vector<double> parse_positive_list(std::string_view option, std::string_view text) {
  if (text.empty()) fail(option, "empty list");
  std::vector<double> out;
  for (auto part : split(text, ',')) {
    const double v = read.number(option, part);
    if (!(v > 0)) fail(option, fmt::format("{} must be > 0", part));
    out.push_back(v);
  }
  return out;
}

// One entry for every spatial dim, or one per dim: spelled out per dim.
template <typename T>
std::vector<T> per_dim(std::string_view option, const std::vector<T>& list, Int spatial) {
  const Int n = static_cast<Int>(list.size());
  if (n != 1 && n != spatial)
    fail(option, fmt::format("{} values for {} spatial dim(s); give 1 or {}", n, spatial, spatial));
  if (n == spatial) return list;
  return std::vector<T>(static_cast<std::size_t>(spatial), list[0]);
}

// --other-shape: a comma list of sizes >= 1, optionally in brackets; "" or
// "[]" is the 0-d (scalar-shaped) tensor.
Shape parse_other_shape(std::string_view text) {
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']')
    text = text.substr(1, text.size() - 2);
  if (text.empty()) return {};
  return read.list("--other-shape", text, 1);
}

std::string ops_list() {
  std::string s;
  for (const OpEntry& e : op_table())
    s += (s.empty() ? "" : ", ") + std::string(e.name);
  return s;
}

// The ops each operator-specific option applies to, in the table's order
// (the options sorted by name, so that the first inapplicable one given is
// the one named).
std::map<std::string_view, std::vector<OpKind>> applicability() {
  std::map<std::string_view, std::vector<OpKind>> out;
  for (const OpEntry& e : op_table())
    for (std::string_view option : e.options)
      out[option].push_back(e.kind);
  return out;
}

std::string applies_to(const std::vector<OpKind>& ops) {
  std::string s;
  for (OpKind k : ops)
    s += (s.empty() ? "" : ", ") + std::string(op_name(k));
  return s;
}

// ---- the shape operators' options (this tool's own arithmetic, as above) ----

// `text` (a dim of the --input's `rank` dims, negative counting from the end)
// made non-negative.
Int parse_dim(std::string_view option, std::string_view text, Int rank) {
  const Int d = read.integer(option, text);
  if (d < -rank || d >= rank)
    fail(option, fmt::format("{} is outside the {}-d input (--input); give {}..{}", d, rank, -rank,
                             rank - 1));
  return d < 0 ? d + rank : d;
}

// --shape: sizes >= 0 and at most one -1 (inferred from the input's element
// count), optionally in brackets; "" or [] is 0-d.
Shape parse_view_shape(std::string_view text, const Shape& input) {
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']')
    text = text.substr(1, text.size() - 2);
  Shape shape = text.empty() ? Shape{} : read.list("--shape", text, -1);
  const Int numel = shape_numel(input);
  Int known = 1, inferred = -1;
  for (std::size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] >= 0) {
      known *= shape[k];
    } else if (inferred >= 0) {
      fail("--shape", fmt::format("[{}]: only one size may be -1", fmt::join(shape, ",")));
    } else {
      inferred = static_cast<Int>(k);
    }
  }
  if (inferred >= 0 && known != 0 && numel % known == 0)
    shape[static_cast<std::size_t>(inferred)] = numel / known;
  if (shape_numel(shape) != numel || (inferred >= 0 && known == 0))
    fail("--shape", fmt::format("[{}] does not hold the {} elements of the input [{}] (--input)",
                                fmt::join(shape, ","), numel, fmt::join(input, ",")));
  return shape;
}

template <typename Has, typename Value>
void parse_view_options(Options& o, const Has& has, const Value& value) {
  const Int rank = static_cast<Int>(o.input.size());
  const auto required = [&](std::string_view option, std::string_view usage) {
    if (!has(option)) fail(option, fmt::format("{} needs it: {}", op_name(o.op), usage));
  };
  switch (o.op) {
    case OpKind::Reshape:
      required("--shape", "--shape s,... (one size may be -1)");
      o.shape = parse_view_shape(value("--shape"), o.input);
      break;
    case OpKind::Permute: {
      required("--order", "--order d,... (a permutation of the input's dims)");
      const std::string& text = value("--order");
      if (text.empty()) fail("--order", "empty list");
      o.order.clear();
      std::vector<bool> seen(static_cast<std::size_t>(rank), false);
      for (auto part : split(text, ',')) {
        const Int d = parse_dim("--order", part, rank);
        if (seen[static_cast<std::size_t>(d)])
          fail("--order", fmt::format("dim {} is repeated in {}", d, text));
        seen[static_cast<std::size_t>(d)] = true;
        o.order.push_back(d);
      }
      if (static_cast<Int>(o.order.size()) != rank)
        fail("--order", fmt::format("{} dims given for the {}-d input (--input); give each once",
                                    o.order.size(), rank));
      break;
    }
    case OpKind::Transpose:
      required("--dim0", "--dim0 a --dim1 b");
      required("--dim1", "--dim0 a --dim1 b");
      o.dim0 = parse_dim("--dim0", value("--dim0"), rank);
      o.dim1 = parse_dim("--dim1", value("--dim1"), rank);
      break;
    case OpKind::Flatten:
      o.start_dim = has("--start-dim") ? parse_dim("--start-dim", value("--start-dim"), rank)
                                       : parse_dim("--start-dim", "1", rank);
      o.end_dim = has("--end-dim") ? parse_dim("--end-dim", value("--end-dim"), rank) : rank - 1;
      if (o.start_dim > o.end_dim)
        fail("--start-dim",
             fmt::format("dim {} comes after --end-dim (dim {})", o.start_dim, o.end_dim));
      break;
    case OpKind::Narrow: {
      required("--dim", "--dim d --start s --length l");
      required("--start", "--dim d --start s --length l");
      required("--length", "--dim d --start s --length l");
      o.dim = parse_dim("--dim", value("--dim"), rank);
      const Int size = o.input[static_cast<std::size_t>(o.dim)];
      const Int start = read.integer("--start", value("--start"));
      if (start < -size || start > size)
        fail("--start", fmt::format("{} is outside dim {} of size {}; give {}..{}", start, o.dim,
                                    size, -size, size));
      o.start = start < 0 ? start + size : start;
      o.length = read.integer_at_least("--length", value("--length"), 0);
      if (o.start + o.length > size)
        fail("--length", fmt::format("start {} + length {} is past the end of dim {} (size {})",
                                     o.start, o.length, o.dim, size));
      break;
    }
    default:
      break;
  }
}

std::string padding_option(bool lr) {
  return lr ? "--padding-lr" : "--padding";
}

// The library's own rules, as a last guard: whatever it would reject at run
// time is rejected here, before any rank starts talking.
void check_with_library(const Options& o) {
  const OpEntry& e = op_entry(o.op);
  if (!e.check_with_library) return;
  try {
    e.check_with_library(o);
  } catch (const InvalidArgument& ex) {
    throw UsageError(fmt::format("invalid {}: {}", op_name(o.op), without_component(ex.what())));
  }
}

}  // namespace

std::string_view op_name(OpKind op) {
  return op_entry(op).name;
}

std::string_view Options::name() const {
  return op_name(op);
}

Family Options::family() const {
  return op_entry(op).family;
}

bool Options::is_window() const {
  return family() == Family::Window;
}

bool Options::is_norm() const {
  return family() == Family::Norm;
}

bool Options::is_activation() const {
  return family() == Family::Activation;
}

bool Options::is_loss() const {
  return family() == Family::Loss;
}

bool Options::is_pointwise_loss() const {
  return is_loss() && op != OpKind::MseLoss && op != OpKind::CrossEntropy;
}

bool Options::is_binary() const {
  return family() == Family::Binary;
}

bool Options::is_unary() const {
  return family() == Family::Unary;
}

bool Options::is_view() const {
  return family() == Family::View;
}

bool Options::is_reduction() const {
  return family() == Family::Reduction;
}

bool Options::is_softmax() const {
  return family() == Family::Softmax;
}

bool Options::positive_input() const {
  return op_entry(op).positive_input;
}

bool Options::has_weight() const {
  const WeightKind w = op_entry(op).weight;
  return w == WeightKind::Always || (w == WeightKind::WhenAffine && affine);
}

Shape Options::bias_shape() const {
  if (!has_weight() || !bias) return {};
  if (is_norm()) return weight_shape();
  if (op == OpKind::Linear) return {out_features};
  return {out_channels};
}

Shape Options::input_shape(std::int64_t k) const {
  Shape s = input;
  if (op == OpKind::Cat && k >= 0 && k < static_cast<Int>(channels.size()))
    s[1] = channels[static_cast<std::size_t>(k)];
  return s;
}

Shape Options::weight_shape() const {
  if (!has_weight()) return {};
  if (op == OpKind::LayerNorm) return Shape(input.begin() + 1, input.end());
  if (is_norm()) return {input[1]};
  if (op == OpKind::Linear) return {out_features, input.back()};
  const Int C = input[1];
  const Int g = std::max<Int>(groups, 1);
  Shape w = op == OpKind::Conv ? Shape{out_channels, C / g} : Shape{C, out_channels / g};
  w.insert(w.end(), kernel.begin(), kernel.end());
  return w;
}

Shape Options::output_shape() const {
  const OpEntry& e = op_entry(op);
  return e.output_shape ? e.output_shape(*this) : input;
}

ConvParams Options::conv_params() const {
  ConvParams p;
  p.stride = stride;
  p.padding = padding;
  p.dilation = dilation;
  p.groups = groups;
  p.padding_mode = padding_mode;
  return p;
}

ConvTransposeParams Options::conv_transpose_params() const {
  ConvTransposeParams p;
  p.stride = stride;
  p.padding.clear();
  for (const auto& [l, r] : padding)
    p.padding.push_back(l);
  p.output_padding = output_padding;
  p.dilation = dilation;
  p.groups = groups;
  return p;
}

UpsampleParams Options::upsample_params() const {
  UpsampleParams p;
  p.mode = upsample_mode;
  p.size = size;
  p.scale_factor = scale;
  p.align_corners = align_corners;
  return p;
}

PoolParams Options::pool_params() const {
  PoolParams p;
  p.kernel = kernel;
  p.stride = stride;
  p.padding = padding;
  p.dilation = dilation;
  p.ceil_mode = ceil_mode;
  p.count_include_pad = count_include_pad;
  p.divisor_override = divisor_override;
  return p;
}

Options parse_options(const std::vector<std::string>& args) {
  Options o;
  o.help = cli::asks_for_help(args);
  if (o.help) return o;

  // CLI11 reads the command line (names, values, --opt=V, flags, unknown
  // options); the values are kept as text and parsed below, so that every
  // message names its option the same way.
  CLI::App app{"dtensor-op", "dtensor-op"};
  app.set_help_flag();  // handled above
  std::string op_text;
  app.add_option("OP", op_text);
  std::map<std::string, std::string, std::less<>> text;
  std::map<std::string, CLI::Option*, std::less<>> given;
  for (const char* name : {"--mesh",           "--placements",   "--input",
                           "--dtype",          "--device",       "--seed",
                           "--dump",           "--iters",        "--warmup",
                           "--kernel",         "--stride",       "--dilation",
                           "--padding",        "--padding-lr",   "--divisor-override",
                           "--output-size",    "--out-channels", "--groups",
                           "--output-padding", "--padding-mode", "--mode",
                           "--value",          "--size",         "--scale",
                           "--num-groups",     "--eps",          "--momentum",
                           "--inputs",         "--channels",     "--cat-dim",
                           "--negative-slope", "--approximate",  "--reduction",
                           "--other-shape",    "--min",          "--max",
                           "--exponent",       "--shape",        "--order",
                           "--dim0",           "--dim1",         "--start-dim",
                           "--end-dim",        "--dim",          "--start",
                           "--length",         "--dims",         "--correction",
                           "--beta",           "--delta",        "--p",
                           "--out-features",   "--target",       "--ignore-index",
                           "--label-smoothing"}) {
    given[name] = app.add_option(name, text[name]);
    given[name]->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
  bool ceil_mode = false, count_include_pad = false, no_bias = false;
  bool align_corners = false, no_affine = false, eval = false;
  for (auto [name, flag] : std::initializer_list<std::pair<const char*, bool*>>{
           {"--backward", &o.backward},
           {"--check", &o.check},
           {"--bench", &o.bench},
           {"--json", &o.json},
           {"--ceil-mode", &ceil_mode},
           {"--count-include-pad", &count_include_pad},
           {"--no-bias", &no_bias},
           {"--align-corners", &align_corners},
           {"--no-affine", &no_affine},
           {"--eval", &eval},
           {"--keepdim", &o.keepdim}})
    given[name] = app.add_flag(name, *flag);
  // The rows' own options (a name two rows declare is one option).
  std::map<std::string, bool, std::less<>> declared_flags;
  for (const OpEntry& e : op_table())
    for (const DeclaredOption& d : e.declared_options) {
      const std::string name(d.name);
      if (given.count(name)) continue;
      if (d.value.empty()) {
        given[name] = app.add_flag(name, declared_flags[name]);
      } else {
        given[name] = app.add_option(name, text[name]);
        given[name]->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
      }
    }
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 reads from the back
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  const auto has = [&](std::string_view name) { return given.find(name)->second->count() > 0; };
  const auto value = [&](std::string_view name) -> const std::string& {
    return text.find(name)->second;
  };

  // OP
  if (op_text.empty()) fail("OP", fmt::format("missing; give one of {}", ops_list()));
  const OpEntry* entry = find_op(op_text);
  if (!entry)
    fail("OP", fmt::format("unknown operator '{}' (expected one of {})", op_text, ops_list()));
  o.op = entry->kind;
  for (const auto& [name, ops] : applicability())
    if (has(name) && std::find(ops.begin(), ops.end(), o.op) == ops.end())
      fail(name,
           fmt::format("not an option of {} (it applies to {})", op_name(o.op), applies_to(ops)));

  // Common options: dtensor-conv's rules.
  if (has("--mesh")) {
    o.mesh = read.list("--mesh", value("--mesh"), 1, 'x');
    if (o.mesh.size() > 3) fail("--mesh", "a mesh has 1, 2 or 3 dims (e.g. 4, 2x2, 2x1x2)");
  }
  if (has("--placements")) {
    try {
      o.placements = parse_placements(value("--placements"), "--placements");
    } catch (const InvalidArgument& e) {
      const std::string msg = without_component(e.what());
      throw UsageError(msg.rfind("--placements", 0) == 0 ? msg : "--placements: " + msg);
    }
  }
  if (has("--input")) {
    o.input = read.list("--input", value("--input"), 1);
    // The window ops, upsample and instance_norm need a spatial dim; the
    // others take [N, C] too.
    const bool needs_spatial = entry->needs_spatial;
    if (o.is_view()) {
      // The shape operators take any tensor of 1 to 5 dims.
      if (o.input.size() > 5)
        fail("--input",
             fmt::format("{} dims given; expected 1 to 5 for {}", o.input.size(), op_name(o.op)));
    } else if (o.input.size() < (needs_spatial ? 3u : 2u) || o.input.size() > 5) {
      fail("--input", fmt::format("{} dims given; expected {}N,C,W or N,C,H,W or N,C,D,H,W for {}",
                                  o.input.size(), needs_spatial ? "" : "N,C or ", op_name(o.op)));
    }
  }
  if (has("--dtype")) {
    try {
      o.dtype = parse_dtype(value("--dtype"));
      require_floating(o.dtype, "--dtype");
    } catch (const InvalidArgument&) {
      fail("--dtype",
           fmt::format("unknown dtype '{}' (expected f32, f64, bf16 or f16)", value("--dtype")));
    }
  }
  if (has("--device")) {
    const std::string& v = value("--device");
    if (v == "cpu")
      o.device = DeviceType::CPU;
    else if (v == "cuda")
      o.device = DeviceType::CUDA;
    else
      fail("--device", fmt::format("unknown device '{}' (expected cpu or cuda)", v));
  }
  if (has("--seed")) {
    const std::string& v = value("--seed");
    std::uint64_t s = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), s);
    if (v.empty() || ec != std::errc() || end != v.data() + v.size())
      fail("--seed", fmt::format("'{}' is not a non-negative integer", v));
    o.seed = s;
  }
  if (has("--dump")) {
    if (value("--dump").empty()) fail("--dump", "empty directory name");
    o.dump = value("--dump");
  }
  if (has("--iters")) {
    if (!o.bench) fail("--iters", "only meaningful with --bench");
    o.iters = static_cast<int>(
        std::min<Int>(read.integer_at_least("--iters", value("--iters"), 1), 1000000));
  }
  if (has("--warmup")) {
    if (!o.bench) fail("--warmup", "only meaningful with --bench");
    o.warmup = static_cast<int>(
        std::min<Int>(read.integer_at_least("--warmup", value("--warmup"), 0), 1000000));
  }

  // The operator's parameters, resolved per spatial dim (none for a 1-d
  // input of the shape operators).
  const Int spatial = std::max<Int>(o.spatial_dims(), 0);
  const bool pool = entry->stride_defaults_to_kernel;
  o.kernel = per_dim(
      "--kernel",
      has("--kernel") ? read.list("--kernel", value("--kernel"), 1) : std::vector<Int>{3}, spatial);
  o.stride = has("--stride")
                 ? per_dim("--stride", read.list("--stride", value("--stride"), 1), spatial)
             : pool ? o.kernel
                    : std::vector<Int>(static_cast<std::size_t>(spatial), 1);
  o.dilation = per_dim(
      "--dilation",
      has("--dilation") ? read.list("--dilation", value("--dilation"), 1) : std::vector<Int>{1},
      spatial);
  if (has("--padding") && has("--padding-lr"))
    fail("--padding", "give either --padding or --padding-lr, not both");
  const bool padding_lr = has("--padding-lr");
  // Only constant padding may be negative (it crops).
  const Int pad_min = o.op == OpKind::Pad ? std::numeric_limits<Int>::min() : 0;
  if (padding_lr) {
    o.padding = per_dim("--padding-lr",
                        read.padding_lr("--padding-lr", value("--padding-lr"), pad_min), spatial);
  } else if (has("--padding")) {
    o.padding =
        per_dim("--padding",
                ConvParams::symmetric_padding(read.list("--padding", value("--padding"), pad_min)),
                spatial);
  } else if (o.op == OpKind::Pad) {
    fail("--padding-lr", "pad needs the padding: --padding-lr l:r[,...] (or --padding p[,...])");
  } else {
    o.padding = ConvParams::Padding(static_cast<std::size_t>(spatial), {0, 0});
  }
  o.ceil_mode = ceil_mode;
  o.count_include_pad = count_include_pad;
  if (has("--divisor-override"))
    o.divisor_override = read.integer("--divisor-override", value("--divisor-override"));
  if (o.op == OpKind::AdaptiveAvgPool || o.op == OpKind::AdaptiveMaxPool) {
    if (!has("--output-size"))
      fail("--output-size",
           fmt::format("{} needs the output size: --output-size o[,...]", op_name(o.op)));
    o.output_size =
        per_dim("--output-size", read.list("--output-size", value("--output-size"), 1), spatial);
  }
  if (has("--groups")) o.groups = read.integer_at_least("--groups", value("--groups"), 1);
  o.out_channels = has("--out-channels")
                       ? read.integer_at_least("--out-channels", value("--out-channels"), 1)
                       : o.input[1];
  o.bias = !no_bias;
  o.output_padding =
      per_dim("--output-padding",
              has("--output-padding") ? read.list("--output-padding", value("--output-padding"), 0)
                                      : std::vector<Int>{0},
              spatial);
  if (has("--padding-mode")) {
    const std::string& v = value("--padding-mode");
    bool ok = false;
    for (PaddingMode m :
         {PaddingMode::Zeros, PaddingMode::Reflect, PaddingMode::Replicate, PaddingMode::Circular})
      if (v == padding_mode_name(m)) {
        o.padding_mode = m;
        ok = true;
      }
    if (!ok)
      fail("--padding-mode",
           fmt::format("unknown mode '{}' (expected zeros, reflect, replicate or circular)", v));
  }
  if (has("--mode") && o.op == OpKind::Upsample) {
    const std::string& v = value("--mode");
    if (v == "nearest")
      o.upsample_mode = UpsampleMode::Nearest;
    else if (v == "linear")
      o.upsample_mode = UpsampleMode::Linear;
    else
      fail("--mode", fmt::format("unknown mode '{}' (expected nearest or linear)", v));
  } else if (has("--mode")) {
    const std::string& v = value("--mode");
    bool ok = false;
    for (PadMode m : {PadMode::Constant, PadMode::Reflect, PadMode::Replicate, PadMode::Circular})
      if (v == pad_mode_name(m)) {
        o.mode = m;
        ok = true;
      }
    if (!ok)
      fail("--mode",
           fmt::format("unknown mode '{}' (expected constant, reflect, replicate or circular)", v));
  }
  if (has("--value")) {
    if (o.mode != PadMode::Constant)
      fail("--value",
           fmt::format("only --mode constant takes a value (mode is {})", pad_mode_name(o.mode)));
    o.value = read.number("--value", value("--value"));
  }

  // upsample
  if (o.op == OpKind::Upsample) {
    if (has("--size") && has("--scale"))
      fail("--scale", "give either --size or --scale, not both (as F.interpolate)");
    if (has("--size"))
      o.size = per_dim("--size", read.list("--size", value("--size"), 1), spatial);
    else if (has("--scale"))
      o.scale = per_dim("--scale", parse_positive_list("--scale", value("--scale")), spatial);
    else
      fail("--size", "upsample needs the output size: --size s[,...] or --scale f[,...]");
  }
  if (align_corners && o.upsample_mode != UpsampleMode::Linear)
    fail("--align-corners",
         "only --mode linear takes it (PyTorch: align_corners is for the interpolating modes)");
  o.align_corners = align_corners;

  // The normalisations.
  if (has("--num-groups"))
    o.num_groups = read.integer_at_least("--num-groups", value("--num-groups"), 1);
  else if (o.op == OpKind::GroupNorm)
    fail("--num-groups", "group_norm needs the number of groups: --num-groups G (dividing C)");
  if (has("--eps")) {
    o.eps = read.number("--eps", value("--eps"));
    if (o.eps < 0) fail("--eps", fmt::format("{} must be >= 0", value("--eps")));
  }
  if (has("--momentum")) o.momentum = read.number("--momentum", value("--momentum"));
  o.affine = !no_affine;
  if (o.is_norm()) o.bias = o.affine;
  o.training = !eval;

  // cat
  if (o.op == OpKind::Cat) {
    const Int rank = static_cast<Int>(o.input.size());
    std::optional<Int> k;
    if (has("--inputs")) k = read.integer_at_least("--inputs", value("--inputs"), 1);
    std::vector<Int> channels;
    if (has("--channels")) {
      channels = read.list("--channels", value("--channels"), 1);
      if (k && static_cast<Int>(channels.size()) != *k)
        fail("--channels",
             fmt::format("{} value(s) for --inputs {}; give one per input", channels.size(), *k));
    }
    o.inputs = k ? *k : has("--channels") ? static_cast<Int>(channels.size()) : 2;
    if (!has("--channels")) channels.assign(static_cast<std::size_t>(o.inputs), o.input[1]);
    Int d = 1;
    if (has("--cat-dim")) {
      d = read.integer("--cat-dim", value("--cat-dim"));
      if (d < -rank || d >= rank)
        fail("--cat-dim", fmt::format("{} is outside the {}-d inputs (--input); give {}..{}", d,
                                      rank, -rank, rank - 1));
      if (d < 0) d += rank;
    }
    if (d != 1)
      for (Int c : channels)
        if (c != channels[0])
          fail("--channels",
               fmt::format("cat along dim {} needs inputs equal in every other dim: give "
                           "--channels all equal (or none)",
                           d));
    o.channels = channels;
    o.cat_dim = d;
    o.input[1] = channels[0];
  }

  // Activations.
  if (has("--negative-slope"))
    o.negative_slope = read.number("--negative-slope", value("--negative-slope"));
  if (has("--approximate")) {
    const std::string& v = value("--approximate");
    if (v == "none")
      o.approximate = GeluApproximate::None;
    else if (v == "tanh")
      o.approximate = GeluApproximate::Tanh;
    else
      fail("--approximate", fmt::format("unknown approximation '{}' (expected none or tanh)", v));
  }

  // Losses.
  if (has("--reduction")) {
    const std::string& v = value("--reduction");
    if (v == "mean")
      o.reduction = LossReduction::Mean;
    else if (v == "sum")
      o.reduction = LossReduction::Sum;
    else
      fail("--reduction", fmt::format("unknown reduction '{}' (expected mean or sum)", v));
  }
  if (has("--beta")) {
    o.beta = read.number("--beta", value("--beta"));
    if (o.beta < 0) fail("--beta", fmt::format("{} must be >= 0 (as PyTorch)", value("--beta")));
  }
  o.out_features = has("--out-features")
                       ? read.integer_at_least("--out-features", value("--out-features"), 1)
                       : o.input.back();
  if (has("--p")) {
    o.p = read.number("--p", value("--p"));
    if (!(o.p >= 0 && o.p <= 1))
      fail("--p", fmt::format("{} is not a probability (expected 0 <= p <= 1)", value("--p")));
  }
  if (has("--delta")) {
    o.delta = read.number("--delta", value("--delta"));
    if (!(o.delta > 0))
      fail("--delta", fmt::format("{} must be > 0 (as PyTorch)", value("--delta")));
  }
  // cross_entropy's target kind and options (PyTorch's bounds).
  if (has("--target")) {
    const std::string& v = value("--target");
    if (v == "indices")
      o.class_indices = true;
    else if (v != "probabilities")
      fail("--target", fmt::format("unknown target '{}' (expected probabilities or indices)", v));
  }
  if (has("--ignore-index")) {
    o.ignore_index = read.integer("--ignore-index", value("--ignore-index"));
    if (!o.class_indices && o.ignore_index >= 0)
      fail("--ignore-index", fmt::format("{} applies to --target indices only (PyTorch: "
                                         "\"ignore_index is not supported for floating point "
                                         "target\"; a negative one is accepted)",
                                         o.ignore_index));
  }
  if (has("--label-smoothing")) {
    o.label_smoothing = read.number("--label-smoothing", value("--label-smoothing"));
    if (!(o.label_smoothing >= 0 && o.label_smoothing <= 1))
      fail("--label-smoothing",
           fmt::format("{} must be between 0.0 and 1.0 (as PyTorch)", value("--label-smoothing")));
  }

  // The tensor API.
  if (o.is_binary()) {
    o.other_shape = has("--other-shape") ? parse_other_shape(value("--other-shape")) : o.input;
    // Broadcastable to the input: aligned at the last dims, each equal or 1,
    // and no more dims than the input (the output keeps the input's shape).
    bool ok = o.other_shape.size() <= o.input.size();
    for (std::size_t k = 0; ok && k < o.other_shape.size(); ++k) {
      const Int n = o.other_shape[k];
      ok = n == 1 || n == o.input[o.input.size() - o.other_shape.size() + k];
    }
    if (!ok)
      fail("--other-shape",
           fmt::format("[{}] does not broadcast to the input's [{}] (--input): each dim, aligned "
                       "at the last, must equal the input's or be 1",
                       fmt::join(o.other_shape, ","), fmt::join(o.input, ",")));
  }
  if (has("--min")) o.min = read.number("--min", value("--min"));
  if (has("--max")) o.max = read.number("--max", value("--max"));
  if (o.op == OpKind::Clamp && !o.min && !o.max)
    fail("--min", "clamp needs at least one bound: --min v and/or --max v");
  if (has("--exponent"))
    o.exponent = read.number("--exponent", value("--exponent"));
  else if (o.op == OpKind::Pow)
    fail("--exponent", "pow needs the exponent: --exponent e");

  parse_view_options(o, has, value);
  // Reductions and softmax: dims of the input, negatives counted from the end.
  const Int input_rank = static_cast<Int>(o.input.size());
  const auto input_dim = [&](std::string_view option, std::string_view text) {
    const Int d = read.integer(option, text);
    if (d < -input_rank || d >= input_rank)
      fail(option, fmt::format("{} is outside the {}-d input (--input); give {}..{}", d, input_rank,
                               -input_rank, input_rank - 1));
    return d < 0 ? d + input_rank : d;
  };
  if (o.is_reduction()) {
    std::string_view t = has("--dims") ? std::string_view(value("--dims")) : std::string_view();
    if (t.size() >= 2 && t.front() == '[' && t.back() == ']') t = t.substr(1, t.size() - 2);
    if (t.empty()) {
      for (Int d = 0; d < input_rank; ++d)
        o.dims.push_back(d);
    } else {
      for (auto part : split(t, ','))
        o.dims.push_back(input_dim("--dims", part));
      std::sort(o.dims.begin(), o.dims.end());
      if (std::adjacent_find(o.dims.begin(), o.dims.end()) != o.dims.end())
        fail("--dims", fmt::format("'{}' names a dim twice", value("--dims")));
    }
  }
  if (has("--correction")) {
    o.correction = read.number("--correction", value("--correction"));
    if (o.correction < 0)
      fail("--correction", fmt::format("{} must be >= 0", value("--correction")));
  }
  if (o.is_softmax()) {
    if (!has("--dim")) fail("--dim", fmt::format("{} needs the dim: --dim d", op_name(o.op)));
    o.dim = input_dim("--dim", value("--dim"));
  }

  for (const DeclaredOption& d : entry->declared_options)
    if (has(d.name)) o.declared[std::string(d.name)] = d.value.empty() ? "" : value(d.name);
  if (entry->check) entry->check(o, padding_option(padding_lr));

  cli::check_input_placements(o.placements, static_cast<Int>(o.input.size()));
  check_with_library(o);
  return o;
}

namespace {

// `words` joined by spaces and wrapped at 76 columns, the lines after the
// first starting with `indent`.
std::string wrapped(const std::vector<std::string>& words, std::string_view indent) {
  constexpr std::size_t kWidth = 76;
  std::string out, line;
  for (const std::string& word : words) {
    if (!line.empty() && line.size() + 1 + word.size() > kWidth) {
      out += line + "\n";
      line = std::string(indent) + word;
    } else {
      line += (line.empty() ? "" : " ") + word;
    }
  }
  return out + line;
}

// "a |", "b |", ..., "z": names as the help lists alternatives.
std::vector<std::string> alternatives(const std::vector<std::string_view>& names) {
  std::vector<std::string> words;
  for (std::size_t i = 0; i < names.size(); ++i)
    words.push_back(std::string(names[i]) + (i + 1 < names.size() ? " |" : ""));
  return words;
}

// The help's OP list: every row of the op table, in its order.
std::string op_list() {
  std::vector<std::string_view> names;
  for (const OpEntry& e : op_table())
    names.push_back(e.name);
  std::vector<std::string> words = alternatives(names);
  words.insert(words.begin(), "OP:");
  return wrapped(words, "    ");
}

// The heading of the unary functions' options: their names, and those that
// draw a positive input.
std::string unary_heading() {
  std::vector<std::string_view> names, positive;
  for (const OpEntry& e : op_table()) {
    if (e.family != Family::Unary) continue;
    names.push_back(e.name);
    if (e.positive_input) positive.push_back(e.name);
  }
  std::vector<std::string> words = alternatives(names);
  for (std::size_t i = 0; i < positive.size(); ++i) {
    const bool last = i + 1 == positive.size();
    if (last && i > 0) words.emplace_back("and");
    words.push_back((i == 0 ? "(" : "") + std::string(positive[i]) +
                    (last || i + 2 == positive.size() ? "" : ","));
  }
  for (const char* w : {"draw", "the", "input", "in", "[0.5,", "1.5))"})
    words.emplace_back(w);
  return wrapped(words, "");
}

// The help of the rows registered from their own files: each one's heading
// and declared options, in the columns of the sections above.
std::string registered_help() {
  constexpr std::size_t kColumn = 29;
  std::string out;
  for (const OpEntry& e : op_table()) {
    if (e.kind <= OpKind::Linear) continue;
    out += std::string(e.help_heading.empty() ? e.name : e.help_heading) + "\n";
    for (const DeclaredOption& d : e.declared_options) {
      std::string left =
          "  " + std::string(d.name) + (d.value.empty() ? "" : " ") + std::string(d.value);
      if (left.size() + 1 > kColumn) {  // the description on a line of its own
        out += left + "\n";
        left.clear();
      }
      std::vector<std::string> words;
      for (auto w : split(d.help, ' '))
        words.emplace_back(w);
      words.front() = left + std::string(kColumn - left.size(), ' ') + words.front();
      out += wrapped(words, std::string(kColumn, ' ')) + "\n";
    }
  }
  return out;
}

}  // namespace

std::string usage_line() {
  return "usage: dtensor-run -n P -- dtensor-op OP [options]   (dtensor-op --help)";
}

std::string help_text() {
  return usage_line() + R"(

Runs one tensor-parallel operator (forward, optionally backward) on seeded
random data, and optionally checks, dumps and times it.

)" + op_list() +
         R"(

Common (as dtensor-conv)
  --mesh 4 | 2x2 | 2x1x2     mesh shape; the product must be the world size
                             (default: 1-D over the whole world)
  --placements S3 | S2,S3 | R | P
                             input placements, one per mesh dim (weight and
                             bias are replicated). Default: the last spatial
                             dims, one per mesh dim
  --input N,C,W | N,C,H,W | N,C,D,H,W   global input (default 2,4,16,16);
                             N,C too for the norms (not instance_norm), cat,
                             the activations and the losses
  --dtype f32|f64|bf16|f16   default f32
  --device cpu|cuda          default cpu
  --seed S                   default 0
  --backward                 also run the operator's backward on a seeded
                             grad_output placed like the output
  --check                    compare with the naive f64 oracles; exit 1 when
                             over tolerance
  --dump DIR                 rank 0 writes the tensors as .npy and meta.json
                             (check with tools/check_op_dump.py)
  --bench                    time the distributed op and the same op on each
                             rank's own shard alone (medians)
    --iters N                timed iterations (default 10)
    --warmup N               untimed iterations first (default 2)
  --json                     the last line of rank 0's stdout is one JSON object

Window (conv, conv_transpose, max_pool, avg_pool)
  --kernel k[,...]           default 3
  --stride s[,...]           default 1; a pool's: its kernel
  --dilation d[,...]         default 1 (not avg_pool)
  --padding p[,...]          symmetric padding, default 0 (a pool: at most
                             kernel/2 per side)
  --padding-lr l:r[,...]     asymmetric padding instead (not conv_transpose)
  --ceil-mode                pools: ceil instead of floor
  --count-include-pad        avg_pool: divide by the padded window (default off)
  --divisor-override N       avg_pool: divide by N
Adaptive pools
  --output-size o[,...]      required
conv, conv_transpose
  --out-channels K           default: C
  --groups g                 default 1
  --no-bias                  no bias
  --output-padding o[,...]   conv_transpose only, default 0
  --padding-mode zeros|reflect|replicate|circular
                             conv (conv_transpose: zeros only), default zeros
pad
  --padding-lr l:r[,...]     required (or --padding p[,...]); negative crops
                             (constant mode only)
  --mode constant|reflect|replicate|circular   default constant
  --value v                  constant mode's value, default 0
upsample (F.interpolate)
  --mode nearest|linear      default nearest (linear: bi/trilinear by the dims)
  --size s[,...]             output size, or
  --scale f[,...]            scale factor (> 0; output floor(L * f)); one of
                             --size and --scale is required
  --align-corners            linear only (default off)
batch_norm, group_norm, instance_norm, layer_norm (seeded replicated weight
and bias; batch_norm: seeded replicated running statistics)
  --num-groups G             group_norm: required, divides C
  --eps E                    default 1e-5
  --momentum M               batch_norm: default 0.1
  --no-affine                no weight and bias
  --eval                     batch_norm: normalise with the running statistics
                             (default: training, which updates them)
cat (K seeded inputs placed alike, equal but along the cat dim)
  --inputs K                 default 2 (or the number of --channels)
  --channels c1,...,cK       dim-1 sizes of the inputs (default: C of --input)
  --cat-dim d                default 1; another dim needs equal --channels
leaky_relu | gelu | silu | sigmoid | tanh | relu
  --negative-slope a         leaky_relu: default 0.01
  --approximate none|tanh    gelu: default none
mse_loss, cross_entropy (a seeded target placed like the input;
cross_entropy's: class probabilities, a softmax over dim 1)
  --reduction mean|sum       default mean; the loss is a 0-d tensor
  --target probabilities|indices
                             cross_entropy: default probabilities; indices: an
                             int64 target [N, spatial...] uniform in [0, C),
                             placed like the input's other dims (every 7th
                             element is --ignore-index when that is no class)
  --ignore-index i           cross_entropy: default -100 (>= 0: indices only)
  --label-smoothing s        cross_entropy: default 0.0 (0 <= s <= 1)
l1_loss | smooth_l1_loss | huber_loss | binary_cross_entropy_with_logits (a
seeded target of the input's shape placed like the input; bce's in [0, 1))
  --reduction mean|sum       default mean
  --beta b                   smooth_l1_loss: default 1.0 (>= 0)
  --delta d                  huber_loss: default 1.0 (> 0)
dropout (training mode; the mask is drawn from --seed and each element's
global index, so it does not depend on the ranks or the placements)
  --p p                      probability of zeroing an element, default 0.5
                             (0 <= p <= 1; the kept ones are scaled by
                             1 / (1 - p))
linear (F.linear over the last dim; seeded replicated weight [K, in] and bias
[K])
  --out-features K           default: in (the input's last dim)
  --no-bias                  no bias
add | sub | mul | div | maximum | minimum (NumPy broadcasting; a seeded other
operand placed like the input when the shapes are equal, else replicated)
  --other-shape s,...        the other's shape, broadcastable to --input
                             (default: the same); "" or [] is 0-d
)" + unary_heading() +
         R"(
  --min v, --max v           clamp: the bounds, at least one
  --exponent e               pow: required
reshape | permute | transpose | flatten | narrow (--input of 1 to 5 dims;
the output's placements follow the library's view rules)
  --shape s,...              reshape: required; one entry may be -1
  --order d,...              permute: required, a permutation of the dims
  --dim0 a --dim1 b          transpose: required
  --start-dim a --end-dim b  flatten: defaults 1 and -1
  --dim d --start s --length l
                             narrow: required; a negative start counts from
                             the end of the dim
sum | mean | amax | amin | var (torch.sum(x, dims, keepdim), ...)
  --dims d,...               the reduced dims, negatives from the end
                             (default: all)
  --keepdim                  keep each reduced dim with size 1
  --correction c             var: the divisor is N - c (default 1, >= 0)
softmax | log_softmax
  --dim d                    required; negatives from the end
)" + registered_help() +
         R"(Lists take one value (for every spatial dim) or one per spatial dim.

Exit status: 0 ok, 1 --check over tolerance, 2 bad argument (every rank),
3 the library raised an error. See docs/cli.md.
)";
}

}  // namespace dtensor::op_cli
