#include "tools/dtensor-conv/options.h"

#include <charconv>
#include <functional>
#include <limits>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "dtensor/core/errors.h"
#include "tools/cli/value_reader.h"

namespace dtensor::conv_cli {
namespace {

using cli::asks_for_help, cli::fail, cli::split, cli::ValueReader, cli::without_component;

using Int = std::int64_t;

// dtensor-conv's rules refuse "+3".
const ValueReader read{false};

// A per-spatial-dim list must have one entry (for every dim) or one per dim.
template <typename T>
void check_count(std::string_view option, const std::vector<T>& list, Int spatial) {
  const Int n = static_cast<Int>(list.size());
  if (n != 1 && n != spatial)
    fail(option, fmt::format("{} values for {} spatial dim(s); give 1 or {}", n, spatial, spatial));
}

template <typename T>
T at_dim(const std::vector<T>& list, std::size_t i) {
  return list.size() == 1 ? list[0] : list[i];
}

// A flag given a value ("--check=yes"), set aside for CLI11 as an argument it
// will not read (see prepare_for_cli11).
constexpr char kFlagWithValue = '\x1f';

// Rewrites the line for CLI11 where its reading differs from ours: "--opt="
// (an empty value; CLI11 would take the next argument as the value) becomes
// "--opt" "", and "--flag=VALUE" (CLI11 would read VALUE as true or false)
// becomes an argument it sets aside, refused by refuse_extra. Arguments that
// are an option's value (the one after "--opt") are left as they are.
std::vector<std::string> prepare_for_cli11(const CLI::App& app,
                                           const std::vector<std::string>& args) {
  std::vector<std::string> line;
  bool is_value = false;
  for (const auto& a : args) {
    if (std::exchange(is_value, false) || a.rfind("--", 0) != 0) {
      line.push_back(a);
      continue;
    }
    const auto eq = a.find('=');
    const CLI::Option* opt = app.get_option_no_throw(a.substr(0, eq));
    if (opt && opt->get_expected_max() == 0 && eq != std::string::npos) {
      line.push_back(kFlagWithValue + a);
    } else if (opt && eq == std::string::npos) {
      is_value = opt->get_expected_max() > 0;
      line.push_back(a);
    } else if (opt && eq + 1 == a.size()) {
      line.push_back(a.substr(0, eq));
      line.emplace_back();
    } else {
      line.push_back(a);
    }
  }
  return line;
}

// An argument CLI11 set aside: an unknown option, a stray argument, a flag
// with a value.
[[noreturn]] void refuse_extra(const std::string& arg) {
  if (!arg.empty() && arg[0] == kFlagWithValue)
    fail(arg.substr(1, arg.find('=') - 1), "takes no value");
  if (arg.rfind("--", 0) != 0)
    throw UsageError(fmt::format("unexpected argument '{}' (options start with --)", arg));
  fail(arg.substr(0, arg.find('=')), "unknown option (see --help)");
}

// Everything that concerns the arguments together, once all are read.
void check_combination(const Options& o, bool iters_given, bool warmup_given, bool padding_given,
                       bool padding_lr_given) {
  if (padding_given && padding_lr_given)
    fail("--padding", "give either --padding or --padding-lr, not both");
  if (!o.bench && iters_given) fail("--iters", "only meaningful with --bench");
  if (!o.bench && warmup_given) fail("--warmup", "only meaningful with --bench");

  const Int spatial = o.spatial_dims();
  check_count("--kernel", o.kernel, spatial);
  check_count("--stride", o.params.stride, spatial);
  check_count("--dilation", o.params.dilation, spatial);
  check_count(padding_lr_given ? "--padding-lr" : "--padding", o.params.padding, spatial);

  const Int channels = o.input[1];
  const Int out_channels = o.out_channels.value_or(channels);
  if (channels % o.params.groups != 0)
    fail("--groups", fmt::format("{} does not divide the {} input channels (--input)",
                                 o.params.groups, channels));
  if (out_channels % o.params.groups != 0)
    fail("--groups", fmt::format("{} does not divide the {} output channels (--out-channels)",
                                 o.params.groups, out_channels));

  for (std::size_t i = 0; i < static_cast<std::size_t>(spatial); ++i) {
    const Int length = o.input[2 + i];
    const auto pad = at_dim(o.params.padding, i);
    const Int k = at_dim(o.kernel, i), s = at_dim(o.params.stride, i),
              d = at_dim(o.params.dilation, i);
    if (k > 1 && d > (std::numeric_limits<Int>::max() - 1) / (k - 1))
      fail("--dilation", fmt::format("{} with --kernel {} spans more positions than a 64-bit "
                                     "length can hold",
                                     d, k));
    if (pad.first > std::numeric_limits<Int>::max() - length ||
        pad.second > std::numeric_limits<Int>::max() - length - pad.first)
      fail(padding_lr_given ? "--padding-lr" : "--padding",
           fmt::format("{}:{} around spatial dim {} (length {}) is past what a 64-bit length can "
                       "hold",
                       pad.first, pad.second, i, length));
    const Int out = conv_output_length(length, k, s, d, pad.first, pad.second);
    if (out < 1)
      fail("--input",
           fmt::format("spatial dim {} (length {}) is shorter than --kernel {} with --dilation {} "
                       "and --padding {}:{} need ({}): the output would be empty",
                       i, length, k, d, pad.first, pad.second, conv_kernel_extent(k, d)));
  }

  cli::check_input_placements(o.placements, static_cast<Int>(o.input.size()));

  // The library's own rules, as a last guard: whatever it would reject at run
  // time is rejected here, before any rank starts talking.
  try {
    check_conv_args(o.input, o.weight_shape(),
                    o.bias ? std::optional<Shape>(Shape{out_channels}) : std::nullopt, o.params);
  } catch (const InvalidArgument& e) {
    throw UsageError("invalid convolution: " + without_component(e.what()));
  }
}

}  // namespace

Shape Options::weight_shape() const {
  const Int channels = input.size() > 1 ? input[1] : 0;
  Shape w{out_channels.value_or(channels), channels / std::max<Int>(params.groups, 1)};
  for (Int i = 0; i < spatial_dims(); ++i)
    w.push_back(at_dim(kernel, static_cast<std::size_t>(i)));
  return w;
}

ConvParams Options::conv_params() const {
  return params.expanded(spatial_dims());
}

Options parse_options(const std::vector<std::string>& args) {
  Options o;
  o.help = asks_for_help(args);
  if (o.help) return o;

  bool iters_given = false, warmup_given = false, padding_given = false, padding_lr_given = false;
  bool no_bias = false;
  using Handler = std::function<void(std::string_view option, std::string_view value)>;
  const std::vector<std::pair<std::string, Handler>> with_value = {
      {"--mesh",
       [&](auto opt, auto v) {
         o.mesh = read.list(opt, v, 1, 'x');
         if (o.mesh.size() > 3) fail(opt, "a mesh has 1, 2 or 3 dims (e.g. 4, 2x2, 2x1x2)");
       }},
      {"--placements",
       [&](auto opt, auto v) {
         try {
           o.placements = parse_placements(std::string(v), "--placements");
         } catch (const InvalidArgument& e) {
           const std::string msg = without_component(e.what());
           throw UsageError(msg.rfind(opt, 0) == 0 ? msg : fmt::format("{}: {}", opt, msg));
         }
       }},
      {"--input",
       [&](auto opt, auto v) {
         o.input = read.list(opt, v, 1);
         if (o.input.size() < 3 || o.input.size() > 5)
           fail(opt, fmt::format("{} dims given; expected N,C,W or N,C,H,W or N,C,D,H,W",
                                 o.input.size()));
       }},
      {"--out-channels",
       [&](auto opt, auto v) { o.out_channels = read.integer_at_least(opt, v, 1); }},
      {"--kernel", [&](auto opt, auto v) { o.kernel = read.list(opt, v, 1); }},
      {"--stride", [&](auto opt, auto v) { o.params.stride = read.list(opt, v, 1); }},
      {"--dilation", [&](auto opt, auto v) { o.params.dilation = read.list(opt, v, 1); }},
      {"--padding",
       [&](auto opt, auto v) {
         o.params.padding = ConvParams::symmetric_padding(read.list(opt, v, 0));
         padding_given = true;
       }},
      {"--padding-lr",
       [&](auto opt, auto v) {
         o.params.padding = read.padding_lr(opt, v, 0);
         padding_lr_given = true;
       }},
      {"--groups", [&](auto opt, auto v) { o.params.groups = read.integer_at_least(opt, v, 1); }},
      {"--dtype",
       [&](auto opt, auto v) {
         try {
           o.dtype = parse_dtype(v);
           require_floating(o.dtype, opt);
         } catch (const InvalidArgument&) {
           fail(opt, fmt::format("unknown dtype '{}' (expected f32, f64, bf16 or f16)", v));
         }
       }},
      {"--device",
       [&](auto opt, auto v) {
         if (v == "cpu")
           o.device = DeviceType::CPU;
         else if (v == "cuda")
           o.device = DeviceType::CUDA;
         else
           fail(opt, fmt::format("unknown device '{}' (expected cpu or cuda)", v));
       }},
      {"--seed",
       [&](auto opt, auto v) {
         std::uint64_t s = 0;
         const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), s);
         if (v.empty() || ec != std::errc() || end != v.data() + v.size())
           fail(opt, fmt::format("'{}' is not a non-negative integer", v));
         o.seed = s;
       }},
      {"--dump",
       [&](auto opt, auto v) {
         if (v.empty()) fail(opt, "empty directory name");
         o.dump = std::string(v);
       }},
      {"--iters",
       [&](auto opt, auto v) {
         o.iters = static_cast<int>(std::min<Int>(read.integer_at_least(opt, v, 1), 1000000));
         iters_given = true;
       }},
      {"--warmup",
       [&](auto opt, auto v) {
         o.warmup = static_cast<int>(std::min<Int>(read.integer_at_least(opt, v, 0), 1000000));
         warmup_given = true;
       }},
  };

  // CLI11 reads the line (option names, "--opt value" and "--opt=value", the
  // flags); unknown options and stray arguments are kept aside (remaining())
  // and refused here, by name. Each value is checked as soon as it is read, so
  // the first mistake on the line is the one reported.
  CLI::App app{"dtensor-conv", "dtensor-conv"};
  app.set_help_flag();  // handled above
  app.allow_extras();
  for (const auto& [name, handle] : with_value)
    app.add_option(name,
                   [&app, name = name, handle = handle](const CLI::results_t& r) {
                     if (!app.remaining().empty()) refuse_extra(app.remaining().front());
                     handle(name, r.back());
                     return true;
                   })
        ->trigger_on_parse();
  for (auto [name, flag] :
       std::initializer_list<std::pair<const char*, bool*>>{{"--no-bias", &no_bias},
                                                            {"--backward", &o.backward},
                                                            {"--check", &o.check},
                                                            {"--bench", &o.bench},
                                                            {"--json", &o.json}})
    app.add_flag(name, *flag);

  const std::vector<std::string> line = prepare_for_cli11(app, args);
  try {
    app.parse(std::vector<std::string>(line.rbegin(), line.rend()));  // CLI11 reads from the back
  } catch (const CLI::ArgumentMismatch&) {
    // Only the last argument can lack its value, so an extra seen before wins.
    if (!app.remaining().empty()) refuse_extra(app.remaining().front());
    fail(line.back(), "needs a value");
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  if (!app.remaining().empty()) refuse_extra(app.remaining().front());
  o.bias = !no_bias;
  check_combination(o, iters_given, warmup_given, padding_given, padding_lr_given);
  return o;
}

void resolve_for_world(Options& o, int world_size) {
  cli::resolve_mesh(o.mesh, o.placements, o.input, world_size);
}

std::string usage_line() {
  return "usage: dtensor-run -n P -- dtensor-conv [options]   (dtensor-conv --help)";
}

std::string help_text() {
  return usage_line() + R"(

Runs one tensor-parallel convolution (forward, optionally backward) on
seeded random data, and optionally checks, dumps and times it.

Geometry
  --mesh 4 | 2x2 | 2x1x2     mesh shape; the product must be the world size
                             (default: 1-D over the whole world)
  --placements S3 | S2,S3 | S0,S3 | R
                             input placements, one per mesh dim (the weight and
                             bias are replicated). Default: the last spatial
                             dims, one per mesh dim (1-D mesh: the last one)
  --input N,C,W | N,C,H,W | N,C,D,H,W
                             global input shape (default 2,4,16,16)
  --out-channels K           default: C
  --kernel k[,k...]          default 3
  --stride s[,...]           default 1
  --dilation d[,...]         default 1
  --padding p[,...]          symmetric padding, default 0
  --padding-lr l:r[,l:r...]  asymmetric padding (instead of --padding)
  --groups g                 default 1
  --no-bias                  no bias
  Lists take one value (for every spatial dim) or one per spatial dim.

Data
  --dtype f32|f64|bf16|f16   default f32
  --device cpu|cuda          default cpu; cuda puts each rank's tensors on
                             cuda:<local rank % device count> (CUDA tensors
                             go over NCCL unless DTENSOR_BACKEND says else)
  --seed S                   default 0; the same data on every rank and for
                             every number of ranks

Actions
  --backward                 also run convolution_backward on a seeded random
                             grad_output
  --check                    compare every result with a naive f64 direct
                             convolution (single process, no shared code);
                             print max errors; exit 1 when over tolerance
  --dump DIR                 rank 0 writes input, weight, bias, grad_output,
                             output, grad_input, grad_weight, grad_bias as .npy
                             (bf16 widened to float32) and meta.json;
                             tools/check_dump.py in libdtensor's source tree
                             (not installed) checks them with PyTorch
  --bench                    time the distributed passes and the local kernel
                             alone on the same per-rank window (medians)
    --iters N                timed iterations (default 10)
    --warmup N               untimed iterations first (default 2)
  --json                     the last line of rank 0's stdout is one JSON object
  --help, -h                 this text

Exit status: 0 ok, 1 --check over tolerance, 2 bad argument (every rank),
3 the library raised an error. See docs/cli.md in libdtensor's source tree.
)";
}

}  // namespace dtensor::conv_cli
