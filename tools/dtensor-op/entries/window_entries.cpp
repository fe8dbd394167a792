// The window operators' rows: conv, conv_transpose, max_pool, avg_pool, the
// adaptive pools and pad.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "dtensor/ops/convolution.h"
#include "dtensor/ops/window_ops.h"
#include "tools/dtensor-op/entries/entry_helpers.h"
#include "tools/reference/reference_conv.h"
#include "tools/reference/reference_window_ops.h"

namespace dtensor::op_cli::entries {
namespace {

Int floor_div(Int a, Int b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}
Int ceil_div(Int a, Int b) {
  return -floor_div(-a, b);
}

// PyTorch's output lengths, one dim (this tool's own arithmetic: the checks
// must not rely on the library they guard).
Int conv_length(Int L, Int k, Int s, Int d, Int pl, Int pr) {
  return floor_div(L + pl + pr - d * (k - 1) - 1, s) + 1;
}
Int conv_transpose_length(Int L, Int k, Int s, Int d, Int p, Int op) {
  return (L - 1) * s - 2 * p + d * (k - 1) + op + 1;
}
Int pool_length(Int L, Int k, Int s, Int d, Int pl, Int pr, bool ceil_mode) {
  const Int span = L + pl + pr - d * (k - 1) - 1;
  Int out = (ceil_mode ? ceil_div(span, s) : floor_div(span, s)) + 1;
  if (ceil_mode && out > 0 && (out - 1) * s >= L + pl) --out;
  return out;
}

// [N, channels, length(dim 0), ...].
template <typename Length>
Shape spatial_output(const Options& o, Int channels, Length length) {
  Shape out{o.input[0], channels};
  for (Int i = 0; i < o.spatial_dims(); ++i)
    out.push_back(length(static_cast<std::size_t>(i), o.input[2 + static_cast<std::size_t>(i)]));
  return out;
}

Int kernel_size(const Options& o) {
  return prod_from(Shape(o.kernel.begin(), o.kernel.end()), 0);
}

// ---- conv and conv_transpose ----

void check_conv(const Options& o, const std::string& pad_opt) {
  const Int C = o.input[1];
  const bool t = o.op == OpKind::ConvTranspose;
  if (C % o.groups != 0)
    fail("--groups",
         fmt::format("{} does not divide the {} input channels (--input)", o.groups, C));
  if (o.out_channels % o.groups != 0)
    fail("--groups", fmt::format("{} does not divide the {} output channels (--out-channels)",
                                 o.groups, o.out_channels));
  if (t && o.padding_mode != PaddingMode::Zeros)
    fail("--padding-mode", "conv_transpose supports only zeros (as PyTorch)");
  for (Int i = 0; i < o.spatial_dims(); ++i) {
    const auto s = static_cast<std::size_t>(i);
    const Int L = o.input[2 + s], k = o.kernel[s], st = o.stride[s], d = o.dilation[s];
    const auto [pl, pr] = o.padding[s];
    if (t) {
      if (pl != pr)
        fail(pad_opt,
             fmt::format("conv_transpose takes symmetric padding; dim {} has {}:{}", i, pl, pr));
      if (o.output_padding[s] >= st && o.output_padding[s] >= d)
        fail("--output-padding",
             fmt::format("{} in dim {} must be smaller than --stride ({}) or --dilation ({})",
                         o.output_padding[s], i, st, d));
      if (conv_transpose_length(L, k, st, d, pl, o.output_padding[s]) < 1)
        fail(pad_opt, fmt::format("{} in dim {} (length {}) leaves an empty output", pl, i, L));
    } else {
      if (o.padding_mode == PaddingMode::Reflect && (pl >= L || pr >= L))
        fail(pad_opt,
             fmt::format("reflect padding {}:{} in dim {} must be < the length {}", pl, pr, i, L));
      if (o.padding_mode == PaddingMode::Circular && (pl > L || pr > L))
        fail(pad_opt, fmt::format("circular padding {}:{} in dim {} must be <= the length {}", pl,
                                  pr, i, L));
      if (conv_length(L, k, st, d, pl, pr) < 1)
        fail("--input", fmt::format("spatial dim {} (length {}, padded {}:{}) is shorter than the "
                                    "{} positions --kernel {} with --dilation {} spans: the "
                                    "output would be empty",
                                    i, L, pl, pr, d * (k - 1) + 1, k, d));
    }
  }
}

std::string conv_params_line(const Options& o) {
  return fmt::format(
      "kernel={} stride={} padding={}{} dilation={} groups={} padding_mode={}", list(o.kernel),
      list(o.stride), pads(o.padding),
      o.op == OpKind::ConvTranspose ? " output_padding=" + list(o.output_padding) : std::string(),
      list(o.dilation), o.groups, padding_mode_name(o.padding_mode));
}

void conv_meta(json& meta, const Options& o) {
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
}

Grads conv_grads(const Options& o, const ConvGrads& c) {
  Grads g;
  g.grad_input = c.grad_input;
  g.grad_weight = c.grad_weight;
  if (o.bias) g.grad_bias = c.grad_bias;
  return g;
}

OpEntry conv_entry() {
  OpEntry e{OpKind::Conv, "conv", Family::Window};
  e.options = {"--kernel",       "--stride", "--dilation", "--padding",     "--padding-lr",
               "--out-channels", "--groups", "--no-bias",  "--padding-mode"};
  e.weight = WeightKind::Always;
  e.needs_spatial = true;
  e.check = check_conv;
  e.check_with_library = [](const Options& o) {
    check_conv_args(o.input, o.weight_shape(),
                    o.bias ? std::optional<Shape>(Shape{o.out_channels}) : std::nullopt,
                    o.conv_params());
  };
  e.output_shape = [](const Options& o) {
    return spatial_output(o, o.out_channels, [&](std::size_t s, Int L) {
      return conv_length(L, o.kernel[s], o.stride[s], o.dilation[s], o.padding[s].first,
                         o.padding[s].second);
    });
  };
  e.params_line = conv_params_line;
  e.meta = conv_meta;
  e.forward = [](const Options& o, const Operands& ops) {
    return Forward(convolution(ops.input, *ops.weight, ops.bias, o.conv_params()));
  };
  e.backward = [](const Options& o, const Operands& ops, const std::optional<DTensor>& gy) {
    return conv_grads(o, convolution_backward(gy.value(), ops.input, *ops.weight, o.conv_params(),
                                              {true, true, o.bias}));
  };
  e.reference = [](const Options& o, const GlobalTensors& g, int ranks,
                   std::vector<TensorCheck>& out) {
    using namespace dtensor::reference;
    const ConvParams p = o.conv_params();
    const Shape& w = g.weight.shape();
    const Int ksize = kernel_size(o);
    out.push_back(compare("output", g.output,
                          ref_conv_padding_mode_forward(g.input, g.weight, g.bias, p),
                          w[1] * ksize + (o.bias ? 1 : 0), o.dtype, ranks));
    if (!o.backward) return;
    const Int per_output = g.grad_output.shape()[0] * prod_from(g.grad_output.shape(), 2);
    out.push_back(
        compare("grad_input", g.grad_input,
                ref_conv_padding_mode_grad_input(g.grad_output, g.weight, g.input.shape(), p),
                (w[0] / o.groups) * ksize, o.dtype, ranks));
    out.push_back(compare("grad_weight", g.grad_weight,
                          ref_conv_padding_mode_grad_weight(g.grad_output, g.input, w, p),
                          per_output, o.dtype, ranks));
    if (o.bias)
      out.push_back(compare("grad_bias", g.grad_bias, ref_conv_grad_bias(g.grad_output), per_output,
                            o.dtype, ranks));
  };
  return e;
}

OpEntry conv_transpose_entry() {
  OpEntry e{OpKind::ConvTranspose, "conv_transpose", Family::Window};
  e.options = {"--kernel",       "--stride", "--dilation", "--padding",        "--padding-lr",
               "--out-channels", "--groups", "--no-bias",  "--output-padding", "--padding-mode"};
  e.weight = WeightKind::Always;
  e.needs_spatial = true;
  e.check = check_conv;
  e.check_with_library = [](const Options& o) {
    conv_transpose_output_shape(o.input, o.weight_shape(), o.conv_transpose_params());
  };
  e.output_shape = [](const Options& o) {
    return spatial_output(o, o.out_channels, [&](std::size_t s, Int L) {
      return conv_transpose_length(L, o.kernel[s], o.stride[s], o.dilation[s], o.padding[s].first,
                                   o.output_padding[s]);
    });
  };
  e.params_line = conv_params_line;
  e.meta = conv_meta;
  e.forward = [](const Options& o, const Operands& ops) {
    return Forward(conv_transpose(ops.input, *ops.weight, ops.bias, o.conv_transpose_params()));
  };
  e.backward = [](const Options& o, const Operands& ops, const std::optional<DTensor>& gy) {
    return conv_grads(o, conv_transpose_backward(gy.value(), ops.input, *ops.weight,
                                                 o.conv_transpose_params(), {true, true, o.bias}));
  };
  e.reference = [](const Options& o, const GlobalTensors& g, int ranks,
                   std::vector<TensorCheck>& out) {
    using namespace dtensor::reference;
    const ConvTransposeParams p = o.conv_transpose_params();
    const Shape& x = g.input.shape();
    const Shape& w = g.weight.shape();  // [C, K/g, k...]
    const Int ksize = kernel_size(o);
    out.push_back(compare("output", g.output,
                          ref_conv_transpose_forward(g.input, g.weight, g.bias, p),
                          (w[0] / o.groups) * ksize + (o.bias ? 1 : 0), o.dtype, ranks));
    if (!o.backward) return;
    const Int per_output = g.grad_output.shape()[0] * prod_from(g.grad_output.shape(), 2);
    out.push_back(compare("grad_input", g.grad_input,
                          ref_conv_transpose_grad_input(g.grad_output, g.weight, x, p),
                          w[1] * ksize, o.dtype, ranks));
    out.push_back(compare("grad_weight", g.grad_weight,
                          ref_conv_transpose_grad_weight(g.grad_output, g.input, w, p),
                          x[0] * prod_from(x, 2), o.dtype, ranks));
    if (o.bias)
      out.push_back(compare("grad_bias", g.grad_bias, ref_conv_transpose_grad_bias(g.grad_output),
                            per_output, o.dtype, ranks));
  };
  return e;
}

// ---- max_pool and avg_pool ----

}  // namespace

void check_pool(const Options& o, const std::string& pad_opt) {
  if (o.divisor_override && *o.divisor_override == 0) fail("--divisor-override", "must not be 0");
  const Int spatial = o.spatial_dims();
  for (Int i = 0; i < spatial; ++i) {
    const auto s = static_cast<std::size_t>(i);
    const Int L = o.input[2 + s], k = o.kernel[s];
    const auto [pl, pr] = o.padding[s];
    // PyTorch: "pad should be at most half of kernel size" (kernel, not the dilated extent).
    if (pl > k / 2 || pr > k / 2)
      fail(pad_opt, fmt::format("{}:{} in dim {}: each side must be at most half the kernel "
                                "({} / 2 = {})",
                                pl, pr, i, k, k / 2));
    // PyTorch's avg_pool3d (only it) also wants every length >= the kernel.
    if (o.op == OpKind::AvgPool && spatial == 3 && L < k)
      fail("--input", fmt::format("spatial dim {} (length {}) is shorter than --kernel {}: "
                                  "avg_pool over 3 spatial dims needs every length >= the "
                                  "kernel (as PyTorch's avg_pool3d)",
                                  i, L, k));
    if (pool_length(L, k, o.stride[s], o.dilation[s], pl, pr, o.ceil_mode) < 1)
      fail("--input",
           fmt::format("spatial dim {} (length {}) is too short for --kernel {} (dilation {}, "
                       "padding {}:{}): the output would be empty",
                       i, L, k, o.dilation[s], pl, pr));
  }
}

Shape pool_output(const Options& o) {
  return spatial_output(o, o.input[1], [&](std::size_t s, Int L) {
    return pool_length(L, o.kernel[s], o.stride[s], o.dilation[s], o.padding[s].first,
                       o.padding[s].second, o.ceil_mode);
  });
}

namespace {

void check_pool_with_library(const Options& o) {
  o.pool_params().expanded(o.spatial_dims());
}

void pool_meta(json& meta, const Options& o) {
  meta["kernel"] = o.kernel;
  meta["stride"] = o.stride;
  meta["padding"] = padding_pairs(o.padding);
  if (o.op == OpKind::MaxPool) meta["dilation"] = o.dilation;
  meta["ceil_mode"] = o.ceil_mode;
  if (o.op == OpKind::AvgPool) {
    meta["count_include_pad"] = o.count_include_pad;
    meta["divisor_override"] = o.divisor_override ? json(*o.divisor_override) : json(nullptr);
  }
}

OpEntry max_pool_entry() {
  OpEntry e{OpKind::MaxPool, "max_pool", Family::Window};
  e.options = {"--kernel", "--stride", "--dilation", "--padding", "--padding-lr", "--ceil-mode"};
  e.needs_spatial = true;
  e.stride_defaults_to_kernel = true;
  e.check = check_pool;
  e.check_with_library = check_pool_with_library;
  e.output_shape = pool_output;
  e.params_line = [](const Options& o) {
    return fmt::format("kernel={} stride={} padding={} dilation={} ceil_mode={}", list(o.kernel),
                       list(o.stride), pads(o.padding), list(o.dilation), o.ceil_mode);
  };
  e.meta = pool_meta;
  e.forward = [](const Options& o, const Operands& ops) {
    return Forward(max_pool(ops.input, o.pool_params()));
  };
  e.backward = [](const Options& o, const Operands& ops, const std::optional<DTensor>& gy) {
    return input_grad(max_pool_backward(gy.value(), ops.input, o.pool_params()));
  };
  e.reference = [](const Options& o, const GlobalTensors& g, int ranks,
                   std::vector<TensorCheck>& out) {
    using namespace dtensor::reference;
    const PoolParams p = o.pool_params();
    out.push_back(compare("output", g.output, ref_max_pool_forward(g.input, p), 1, o.dtype, ranks,
                          /*exact=*/true));
    if (o.backward)
      out.push_back(compare("grad_input", g.grad_input,
                            ref_max_pool_grad_input(g.grad_output, g.input, p), kernel_size(o),
                            o.dtype, ranks));
  };
  return e;
}

OpEntry avg_pool_entry() {
  OpEntry e{OpKind::AvgPool, "avg_pool", Family::Window};
  e.options = {"--kernel",          "--stride",    "--padding",
               "--padding-lr",      "--ceil-mode", "--count-include-pad",
               "--divisor-override"};
  e.needs_spatial = true;
  e.stride_defaults_to_kernel = true;
  e.check = check_pool;
  e.check_with_library = check_pool_with_library;
  e.output_shape = pool_output;
  e.params_line = [](const Options& o) {
    return fmt::format(
        "kernel={} stride={} padding={} ceil_mode={} count_include_pad={} divisor_override={}",
        list(o.kernel), list(o.stride), pads(o.padding), o.ceil_mode, o.count_include_pad,
        o.divisor_override ? std::to_string(*o.divisor_override) : std::string("none"));
  };
  e.meta = pool_meta;
  e.forward = [](const Options& o, const Operands& ops) {
    return Forward(avg_pool(ops.input, o.pool_params()));
  };
  e.backward = [](const Options& o, const Operands& ops, const std::optional<DTensor>& gy) {
    return input_grad(avg_pool_backward(gy.value(), ops.input, o.pool_params()));
  };
  e.reference = [](const Options& o, const GlobalTensors& g, int ranks,
                   std::vector<TensorCheck>& out) {
    using namespace dtensor::reference;
    const PoolParams p = o.pool_params();
    const Int ksize = kernel_size(o);
    out.push_back(
        compare("output", g.output, ref_avg_pool_forward(g.input, p), ksize + 1, o.dtype, ranks));
    if (o.backward)
      out.push_back(compare("grad_input", g.grad_input,
                            ref_avg_pool_grad_input(g.grad_output, g.input.shape(), p), ksize + 1,
                            o.dtype, ranks));
  };
  return e;
}

// ---- the adaptive pools ----

// How many adaptive windows (at most) read one input element, and how many
// elements (at most) one window reads: ceil(L/O) + 1 per dim, a bound for both.
Int adaptive_terms(const Options& o) {
  Int t = 1;
  for (Int i = 0; i < o.spatial_dims(); ++i) {
    const Int L = o.input[2 + static_cast<std::size_t>(i)];
    const Int O = o.output_size[static_cast<std::size_t>(i)];
    t *= (L + O - 1) / O + 1;
  }
  return t;
}

OpEntry adaptive_pool_entry(OpKind kind, std::string_view name) {
  OpEntry e{kind, name, Family::Window};
  e.options = {"--output-size"};
  e.needs_spatial = true;
  e.output_shape = [](const Options& o) {
    return spatial_output(o, o.input[1], [&](std::size_t s, Int) { return o.output_size[s]; });
  };
  e.params_line = [](const Options& o) {
    return fmt::format("output_size={}", list(o.output_size));
  };
  e.meta = [](json& meta, const Options& o) { meta["output_size"] = o.output_size; };
  return e;
}

OpEntry adaptive_avg_pool_entry() {
  OpEntry e = adaptive_pool_entry(OpKind::AdaptiveAvgPool, "adaptive_avg_pool");
  e.forward = [](const Options& o, const Operands& ops) {
    return Forward(adaptive_avg_pool(ops.input, o.output_size));
  };
  e.backward = [](const Options& o, const Operands& ops, const std::optional<DTensor>& gy) {
    return input_grad(adaptive_avg_pool_backward(gy.value(), ops.input, o.output_size));
  };
  e.reference = [](const Options& o, const GlobalTensors& g, int ranks,
                   std::vector<TensorCheck>& out) {
    using namespace dtensor::reference;
    out.push_back(compare("output", g.output, ref_adaptive_avg_pool_forward(g.input, o.output_size),
                          adaptive_terms(o) + 1, o.dtype, ranks));
    if (o.backward)
      out.push_back(
          compare("grad_input", g.grad_input,
                  ref_adaptive_avg_pool_grad_input(g.grad_output, g.input.shape(), o.output_size),
                  adaptive_terms(o) + 1, o.dtype, ranks));
  };
  return e;
}

OpEntry adaptive_max_pool_entry() {
  OpEntry e = adaptive_pool_entry(OpKind::AdaptiveMaxPool, "adaptive_max_pool");
  e.forward = [](const Options& o, const Operands& ops) {
    return Forward(adaptive_max_pool(ops.input, o.output_size));
  };
  e.backward = [](const Options& o, const Operands& ops, const std::optional<DTensor>& gy) {
    return input_grad(adaptive_max_pool_backward(gy.value(), ops.input, o.output_size));
  };
  e.reference = [](const Options& o, const GlobalTensors& g, int ranks,
                   std::vector<TensorCheck>& out) {
    using namespace dtensor::reference;
    out.push_back(compare("output", g.output, ref_adaptive_max_pool_forward(g.input, o.output_size),
                          1, o.dtype, ranks,
                          /*exact=*/true));
    if (o.backward)
      out.push_back(compare("grad_input", g.grad_input,
                            ref_adaptive_max_pool_grad_input(g.grad_output, g.input, o.output_size),
                            adaptive_terms(o), o.dtype, ranks));
  };
  return e;
}

// ---- pad ----

// How many outputs (at most) read one input element of pad.
Int pad_terms(const Options& o) {
  Int t = 1;
  for (Int i = 0; i < o.spatial_dims(); ++i) {
    const Int L = std::max<Int>(o.input[2 + static_cast<std::size_t>(i)], 1);
    const auto [l, r] = o.padding[static_cast<std::size_t>(i)];
    t *= 1 + (std::abs(l) + L - 1) / L + (std::abs(r) + L - 1) / L;
  }
  return t;
}

void check_pad(const Options& o, const std::string& pad_opt) {
  for (Int i = 0; i < o.spatial_dims(); ++i) {
    const auto s = static_cast<std::size_t>(i);
    const Int L = o.input[2 + s];
    const auto [pl, pr] = o.padding[s];
    if (L + pl + pr < 1)
      fail(pad_opt, fmt::format("{}:{} crops all of dim {} (length {}): the output would be "
                                "empty",
                                pl, pr, i, L));
    // PyTorch crops the left, then the right: neither may remove more than
    // is left of the dim.
    if ((pl < 0 && -pl > L) || (pr < 0 && -pr > L + std::min<Int>(pl, 0)))
      fail(pad_opt, fmt::format("{}:{} crops more than dim {} holds (length {})", pl, pr, i, L));
    if (o.mode != PadMode::Constant && (pl < 0 || pr < 0))
      fail(pad_opt, fmt::format("negative padding ({}:{}) needs --mode constant", pl, pr));
    if (o.mode == PadMode::Reflect && (pl >= L || pr >= L))
      fail(pad_opt,
           fmt::format("reflect padding {}:{} in dim {} must be < the length {}", pl, pr, i, L));
    if (o.mode == PadMode::Circular && (pl > L || pr > L))
      fail(pad_opt,
           fmt::format("circular padding {}:{} in dim {} must be <= the length {}", pl, pr, i, L));
  }
}

OpEntry pad_entry() {
  OpEntry e{OpKind::Pad, "pad", Family::Window};
  e.options = {"--padding", "--padding-lr", "--mode", "--value"};
  e.needs_spatial = true;
  e.check = check_pad;
  e.output_shape = [](const Options& o) {
    return spatial_output(o, o.input[1], [&](std::size_t s, Int L) {
      return L + o.padding[s].first + o.padding[s].second;
    });
  };
  e.params_line = [](const Options& o) {
    return fmt::format("padding={} mode={} value={}", pads(o.padding), pad_mode_name(o.mode),
                       o.value);
  };
  e.meta = [](json& meta, const Options& o) {
    meta["padding"] = padding_pairs(o.padding);
    meta["mode"] = std::string(pad_mode_name(o.mode));
    meta["value"] = o.value;
  };
  e.forward = [](const Options& o, const Operands& ops) {
    return Forward(pad(ops.input, o.padding, o.mode, o.value));
  };
  e.backward = [](const Options& o, const Operands& ops, const std::optional<DTensor>& gy) {
    return input_grad(pad_backward(gy.value(), ops.input, o.padding, o.mode));
  };
  e.reference = [](const Options& o, const GlobalTensors& g, int ranks,
                   std::vector<TensorCheck>& out) {
    using namespace dtensor::reference;
    // The padding value as the run's dtype stores it.
    const double value = Tensor::full({1}, o.value, o.dtype).item({0});
    out.push_back(compare("output", g.output, ref_pad_forward(g.input, o.padding, o.mode, value), 1,
                          o.dtype, ranks));
    if (o.backward)
      out.push_back(compare("grad_input", g.grad_input,
                            ref_pad_grad_input(g.grad_output, g.input.shape(), o.padding, o.mode),
                            pad_terms(o), o.dtype, ranks));
  };
  return e;
}

}  // namespace
}  // namespace dtensor::op_cli::entries

namespace dtensor::op_cli {

std::vector<OpEntry> window_entries() {
  using namespace entries;
  return {conv_entry(),     conv_transpose_entry(),    max_pool_entry(),
          avg_pool_entry(), adaptive_avg_pool_entry(), adaptive_max_pool_entry(),
          pad_entry()};
}

}  // namespace dtensor::op_cli
