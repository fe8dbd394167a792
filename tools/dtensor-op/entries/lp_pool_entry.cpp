// lp_pool's row (F.lp_pool1d/2d/3d), registered from this file alone: its
// own option (--norm-type) declared with it, its rules and output length in
// this tool's arithmetic, its oracle (naive f64 loops below) and its PyTorch
// call in meta.json's "torch", which tools/check_op_dump.py replays without
// knowing the operator. It shares --kernel, --stride and --ceil-mode with the
// pools. docs/architecture.md ("Adding an operator") walks through it.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "dtensor/ops/window_ops.h"
#include "tools/dtensor-op/entries/declared_options.h"
#include "tools/dtensor-op/entries/entry_helpers.h"

namespace dtensor::op_cli::entries {
namespace {

constexpr std::string_view kNormType = "--norm-type";

double norm_type(const Options& o) {
  return declared_number(o, kNormType, 0.0);
}

// No padding and no dilation: those options are not lp_pool's, so they keep
// their defaults and the pools' shape and rules apply as they are.
void check_lp_pool(const Options& o, const std::string& padding_option) {
  if (!declared_given(o, kNormType)) fail(kNormType, "lp_pool needs the power: --norm-type p");
  const double p = norm_type(o);
  if (!(p > 0)) fail(kNormType, fmt::format("{} must be > 0", p));
  check_pool(o, padding_option);
}

// ---- the oracle: naive f64 loops over each output's window ----

// A shape's spatial dims padded to three (leading 1s), and the plane count.
struct Grid {
  Int planes = 1;
  std::array<Int, 3> in{1, 1, 1}, out{1, 1, 1}, k{1, 1, 1}, s{1, 1, 1};
};

Grid grid_of(const Options& o) {
  Grid g;
  g.planes = o.input[0] * o.input[1];
  const Shape out = pool_output(o);
  const std::size_t first = 3 - o.kernel.size();
  for (std::size_t d = 0; d < o.kernel.size(); ++d) {
    g.in[first + d] = o.input[2 + d];
    g.out[first + d] = out[2 + d];
    g.k[first + d] = o.kernel[d];
    g.s[first + d] = o.stride[d];
  }
  return g;
}

// f(plane offset, the window's input offsets, the output's offset, the
// window's sum of x^p (as PyTorch scales it: the mean over the inputs it
// covers times the kernel's size)).
template <typename F>
void for_each_window(const Grid& g, const double* x, double p, F&& f) {
  const Int plane = g.in[0] * g.in[1] * g.in[2];
  const Int volume = g.k[0] * g.k[1] * g.k[2];
  Int y = 0;
  std::vector<Int> taps;
  for (Int n = 0; n < g.planes; ++n)
    for (Int a = 0; a < g.out[0]; ++a)
      for (Int b = 0; b < g.out[1]; ++b)
        for (Int c = 0; c < g.out[2]; ++c, ++y) {
          taps.clear();
          for (Int i = a * g.s[0]; i < std::min(a * g.s[0] + g.k[0], g.in[0]); ++i)
            for (Int j = b * g.s[1]; j < std::min(b * g.s[1] + g.k[1], g.in[1]); ++j)
              for (Int l = c * g.s[2]; l < std::min(c * g.s[2] + g.k[2], g.in[2]); ++l)
                taps.push_back(n * plane + (i * g.in[1] + j) * g.in[2] + l);
          double sum = 0;
          for (Int t : taps)
            sum += std::pow(x[t], p);
          f(taps, y, sum / static_cast<double>(taps.size()) * static_cast<double>(volume),
            static_cast<double>(volume) / static_cast<double>(taps.size()));
        }
}

Tensor ref_lp_pool(const Options& o, const Tensor& input) {
  const Tensor x = input.to(DType::F64).contiguous();
  Tensor y = Tensor::zeros(pool_output(o), DType::F64);
  const double p = norm_type(o);
  for_each_window(grid_of(o), x.data<double>(), p,
                  [&](const std::vector<Int>&, Int yi, double sums, double) {
                    y.data<double>()[yi] = std::pow(sums, 1.0 / p);
                  });
  return y;
}

// d y / d x_t = sums^(1/p - 1) * scale * x_t^(p - 1), scale = |kernel| / taps.
Tensor ref_lp_pool_grad(const Options& o, const Tensor& input, const Tensor& grad_output) {
  const Tensor x = input.to(DType::F64).contiguous();
  const Tensor gy = grad_output.to(DType::F64).contiguous();
  Tensor gx = Tensor::zeros(o.input, DType::F64);
  const double p = norm_type(o);
  const double* X = x.data<double>();
  for_each_window(
      grid_of(o), X, p, [&](const std::vector<Int>& taps, Int yi, double sums, double scale) {
        const double outer = gy.data<double>()[yi] * std::pow(sums, 1.0 / p - 1) * scale;
        for (Int t : taps)
          gx.data<double>()[t] += outer * std::pow(X[t], p - 1);
      });
  return gx;
}

// A 1-d F.lp_pool1d takes its kernel and stride as numbers, not lists.
json per_dim_argument(const std::vector<Int>& v) {
  return v.size() == 1 ? json(v[0]) : json(v);
}

OpEntry lp_pool_entry() {
  OpEntry e{"lp_pool", Family::Window};
  e.options = {"--kernel", "--stride", "--ceil-mode"};
  e.declared_options = {{kNormType, "p", "the power (required, > 0)"}};
  e.help_heading =
      "lp_pool (F.lp_pool1d/2d/3d: (sum of x^p over each window)^(1/p), no padding;\n"
      "the input is drawn in [0.5, 1.5))";
  e.needs_spatial = true;
  e.stride_defaults_to_kernel = true;
  e.positive_input = true;
  e.check = check_lp_pool;
  e.output_shape = pool_output;
  e.params_line = [](const Options& o) {
    return fmt::format("norm_type={} kernel={} stride={} ceil_mode={}", norm_type(o),
                       list(o.kernel), list(o.stride), o.ceil_mode);
  };
  e.meta = [](json& meta, const Options& o) {
    meta["norm_type"] = norm_type(o);
    meta["kernel"] = o.kernel;
    meta["stride"] = o.stride;
    meta["ceil_mode"] = o.ceil_mode;
    const Int volume = prod_from(Shape(o.kernel.begin(), o.kernel.end()), 0);
    meta["torch"] = {
        {"function", fmt::format("nn.functional.lp_pool{}d", o.spatial_dims())},
        {"args", {norm_type(o), per_dim_argument(o.kernel)}},
        {"kwargs", {{"stride", per_dim_argument(o.stride)}, {"ceil_mode", o.ceil_mode}}},
        {"output_terms", volume + 1},
        {"grad_terms", volume + 1}};
  };
  e.forward = [](const Options& o, const Operands& ops) {
    return Forward(lp_pool(ops.input, norm_type(o), o.kernel, o.stride, o.ceil_mode));
  };
  e.backward = [](const Options& o, const Operands& ops, const std::optional<DTensor>& gy) {
    return input_grad(
        lp_pool_backward(gy.value(), ops.input, norm_type(o), o.kernel, o.stride, o.ceil_mode));
  };
  e.reference = [](const Options& o, const GlobalTensors& g, int ranks,
                   std::vector<TensorCheck>& out) {
    const Int terms = prod_from(Shape(o.kernel.begin(), o.kernel.end()), 0) + 1;
    out.push_back(compare("output", g.output, ref_lp_pool(o, g.input), terms, o.dtype, ranks));
    if (o.backward)
      out.push_back(compare("grad_input", g.grad_input, ref_lp_pool_grad(o, g.input, g.grad_output),
                            terms, o.dtype, ranks));
  };
  return e;
}

const OpRegistration row{lp_pool_entry};

}  // namespace
}  // namespace dtensor::op_cli::entries
