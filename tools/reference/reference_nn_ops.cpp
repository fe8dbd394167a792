#include "tools/reference/reference_nn_ops.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <string>

namespace dtensor::reference {
namespace {

using Int = std::int64_t;

[[noreturn]] void bad(const std::string& what) {
  throw std::invalid_argument("reference nn ops: " + what);
}

std::vector<double> as_f64(const Tensor& t) {
  const Tensor c = t.to(DType::F64).contiguous();
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

Tensor from_values(const Shape& shape, const std::vector<double>& v) {
  Tensor t = Tensor::zeros(shape, DType::F64);
  if (static_cast<Int>(v.size()) != t.numel()) bad("internal: size mismatch");
  std::copy(v.begin(), v.end(), t.data<double>());
  return t;
}

Int numel_of(const Shape& s) {
  Int n = 1;
  for (Int d : s)
    n *= d;
  return n;
}

// ---- upsample helpers ----

// One output index's sources along one dim: up to two (index, weight) pairs.
struct Taps {
  Int i0 = 0, i1 = 0;
  double w0 = 1, w1 = 0;
};

// PyTorch's CPU kernels differ here: the forward (UpSampleKernel.cpp,
// nearest_neighbor_compute_source_index) always computes floorf(o * scale);
// the backward (nearest_idx) first takes O == L as a copy and O == 2L as
// o >> 1. They differ only when a scale factor is given that makes O == L or
// O == 2L without being 1 or 2 (e.g. 2.1 on L = 4); each is followed.
Taps nearest_taps(Int o, Int L, Int O, const std::optional<double>& sf, bool backward) {
  Taps t;
  if (backward && O == L) {
    t.i0 = t.i1 = o;
  } else if (backward && O == 2 * L) {
    t.i0 = t.i1 = o >> 1;
  } else {
    // PyTorch computes the nearest source index in float, whatever the dtype.
    const float scale = sf && *sf > 0 ? static_cast<float>(1.0 / *sf)
                                      : static_cast<float>(L) / static_cast<float>(O);
    const Int src = static_cast<Int>(std::floor(static_cast<float>(o) * scale));
    t.i0 = t.i1 = std::min(src, L - 1);
  }
  return t;
}

Taps linear_taps(Int o, Int L, Int O, const std::optional<double>& sf, bool align_corners) {
  Taps t;
  if (O == L) {
    t.i0 = t.i1 = o;
    return t;
  }
  double scale = 0;
  if (align_corners)
    scale = O > 1 ? static_cast<double>(L - 1) / static_cast<double>(O - 1) : 0.0;
  else
    scale = sf && *sf > 0 ? 1.0 / *sf : static_cast<double>(L) / static_cast<double>(O);
  double src =
      align_corners ? scale * static_cast<double>(o) : scale * (static_cast<double>(o) + 0.5) - 0.5;
  if (!align_corners && src < 0) src = 0;
  t.i0 = std::min(static_cast<Int>(src), L - 1);
  t.i1 = t.i0 + (t.i0 < L - 1 ? 1 : 0);
  t.w1 = std::clamp(src - static_cast<double>(t.i0), 0.0, 1.0);
  t.w0 = 1.0 - t.w1;
  return t;
}

struct UpsampleGeometry {
  std::size_t nsp = 0;
  Int planes = 0;
  std::array<Int, 3> in{1, 1, 1}, out{1, 1, 1};
  // Per dim (3 slots) and output index: the taps.
  std::array<std::vector<Taps>, 3> taps;
};

UpsampleGeometry upsample_geometry(const Shape& x, const RefUpsample& p, bool backward) {
  if (x.size() < 3 || x.size() > 5) bad("upsample: input must be [N, C, spatial...] (1-3 dims)");
  if (p.size.empty() == p.scale_factor.empty()) bad("upsample: give exactly one of size, scale");
  const Shape out = ref_upsample_output_shape(x, p);
  UpsampleGeometry g;
  g.nsp = x.size() - 2;
  g.planes = x[0] * x[1];
  for (std::size_t i = 0; i < g.nsp; ++i) {
    const std::size_t slot = 3 - g.nsp + i;
    const Int L = x[2 + i], O = out[2 + i];
    g.in[slot] = L;
    g.out[slot] = O;
    std::optional<double> sf;
    if (!p.scale_factor.empty())
      sf = p.scale_factor.size() == 1 ? p.scale_factor[0] : p.scale_factor[i];
    for (Int o = 0; o < O; ++o)
      g.taps[slot].push_back(p.linear ? linear_taps(o, L, O, sf, p.align_corners)
                                      : nearest_taps(o, L, O, sf, backward));
  }
  for (std::size_t s = 0; s < 3 - g.nsp; ++s)
    g.taps[s].push_back(Taps{});
  return g;
}

// Calls f(output flat index within the plane, input flat index within the
// plane, weight) for every (output, tap) pair with a non-zero weight.
template <typename F>
void for_each_tap(const UpsampleGeometry& g, F&& f) {
  for (Int a = 0; a < g.out[0]; ++a)
    for (Int b = 0; b < g.out[1]; ++b)
      for (Int c = 0; c < g.out[2]; ++c) {
        const Taps &ta = g.taps[0][static_cast<std::size_t>(a)],
                   &tb = g.taps[1][static_cast<std::size_t>(b)],
                   &tc = g.taps[2][static_cast<std::size_t>(c)];
        const Int oi = (a * g.out[1] + b) * g.out[2] + c;
        for (int ka = 0; ka < 2; ++ka)
          for (int kb = 0; kb < 2; ++kb)
            for (int kc = 0; kc < 2; ++kc) {
              const double w = (ka ? ta.w1 : ta.w0) * (kb ? tb.w1 : tb.w0) * (kc ? tc.w1 : tc.w0);
              if (w == 0) continue;
              const Int ia = ka ? ta.i1 : ta.i0, ib = kb ? tb.i1 : tb.i0, ic = kc ? tc.i1 : tc.i0;
              f(oi, (ia * g.in[1] + ib) * g.in[2] + ic, w);
            }
      }
}

// ---- norm helpers ----

struct NormLayout {
  Int N = 0, C = 0, S = 1;  // S: spatial elements per (n, c)
  Int stats = 0;            // number of statistics sets
  Int params = 0;           // number of parameter elements
};

NormLayout norm_layout(const Shape& x, const RefNorm& p) {
  if (x.size() < 2 || x.size() > 5) bad("norm: input must be [N, C, spatial...] (0-3 dims)");
  NormLayout l;
  l.N = x[0];
  l.C = x[1];
  for (std::size_t i = 2; i < x.size(); ++i)
    l.S *= x[i];
  switch (p.kind) {
    case RefNormKind::Batch:
      l.stats = l.C;
      l.params = l.C;
      break;
    case RefNormKind::Group:
      if (p.num_groups < 1 || l.C % p.num_groups != 0) bad("group_norm: groups must divide C");
      l.stats = l.N * p.num_groups;
      l.params = l.C;
      break;
    case RefNormKind::Instance:
      l.stats = l.N * l.C;
      l.params = l.C;
      break;
    case RefNormKind::Layer:
      l.stats = l.N;
      l.params = l.C * l.S;
      break;
  }
  return l;
}

Int stat_of(const NormLayout& l, const RefNorm& p, Int n, Int c) {
  switch (p.kind) {
    case RefNormKind::Batch:
      return c;
    case RefNormKind::Group:
      return n * p.num_groups + c / (l.C / p.num_groups);
    case RefNormKind::Instance:
      return n * l.C + c;
    case RefNormKind::Layer:
      return n;
  }
  return 0;
}

Int param_of(const NormLayout& l, const RefNorm& p, Int c, Int s) {
  return p.kind == RefNormKind::Layer ? c * l.S + s : c;
}

// Calls f(flat index, statistic, parameter) for every element.
template <typename F>
void for_each_element(const NormLayout& l, const RefNorm& p, F&& f) {
  for (Int n = 0; n < l.N; ++n)
    for (Int c = 0; c < l.C; ++c) {
      const Int st = stat_of(l, p, n, c);
      for (Int s = 0; s < l.S; ++s)
        f((n * l.C + c) * l.S + s, st, param_of(l, p, c, s));
    }
}

bool uses_running(const RefNorm& p) {
  return p.kind == RefNormKind::Batch && !p.training;
}

// Per statistic: mean and 1 / sqrt(var + eps), from the input (biased
// variance, two passes) or from the running statistics (batch_norm eval).
struct Stats {
  std::vector<double> mean, invstd, var;
  std::vector<Int> count;
};

Stats statistics(const NormLayout& l, const RefNorm& p, const std::vector<double>& x,
                 const Tensor& running_mean, const Tensor& running_var) {
  Stats st;
  const auto n = static_cast<std::size_t>(l.stats);
  st.mean.assign(n, 0.0);
  st.var.assign(n, 0.0);
  st.invstd.assign(n, 0.0);
  st.count.assign(n, 0);
  if (uses_running(p)) {
    if (!running_mean.defined() || !running_var.defined())
      bad("batch_norm: eval mode needs running statistics");
    st.mean = as_f64(running_mean);
    st.var = as_f64(running_var);
    if (st.mean.size() != n || st.var.size() != n) bad("batch_norm: running statistics' shape");
  } else {
    for_each_element(l, p, [&](Int i, Int s, Int) {
      st.mean[static_cast<std::size_t>(s)] += x[static_cast<std::size_t>(i)];
      ++st.count[static_cast<std::size_t>(s)];
    });
    for (std::size_t s = 0; s < n; ++s)
      st.mean[s] /= static_cast<double>(std::max<Int>(st.count[s], 1));
    for_each_element(l, p, [&](Int i, Int s, Int) {
      const double d = x[static_cast<std::size_t>(i)] - st.mean[static_cast<std::size_t>(s)];
      st.var[static_cast<std::size_t>(s)] += d * d;
    });
    for (std::size_t s = 0; s < n; ++s)
      st.var[s] /= static_cast<double>(std::max<Int>(st.count[s], 1));
  }
  for (std::size_t s = 0; s < n; ++s)
    st.invstd[s] = 1.0 / std::sqrt(st.var[s] + p.eps);
  return st;
}

std::vector<double> param_values(const Tensor& t, Int params, const char* what) {
  if (!t.defined()) return {};
  auto v = as_f64(t);
  if (static_cast<Int>(v.size()) != params)
    bad(std::string("norm: ") + what + " has the wrong size");
  return v;
}

// ---- activation helpers ----

double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

constexpr double kPi = 3.14159265358979323846;

double act(double x, RefActivation a, double slope) {
  switch (a) {
    case RefActivation::Relu:
      return x > 0 ? x : 0.0;
    case RefActivation::LeakyRelu:
      return x > 0 ? x : slope * x;
    case RefActivation::Gelu:
      return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case RefActivation::GeluTanh: {
      const double u = std::sqrt(2.0 / kPi) * (x + 0.044715 * x * x * x);
      return 0.5 * x * (1.0 + std::tanh(u));
    }
    case RefActivation::Silu:
      return x * sigmoid(x);
    case RefActivation::Sigmoid:
      return sigmoid(x);
    case RefActivation::Tanh:
      return std::tanh(x);
  }
  return 0;
}

double act_derivative(double x, RefActivation a, double slope) {
  switch (a) {
    case RefActivation::Relu:
      return x > 0 ? 1.0 : 0.0;
    case RefActivation::LeakyRelu:
      return x > 0 ? 1.0 : slope;
    case RefActivation::Gelu: {
      const double cdf = 0.5 * (1.0 + std::erf(x / std::sqrt(2.0)));
      const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2.0 * kPi);
      return cdf + x * pdf;
    }
    case RefActivation::GeluTanh: {
      const double k = std::sqrt(2.0 / kPi);
      const double u = k * (x + 0.044715 * x * x * x);
      const double th = std::tanh(u);
      return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * x * x);
    }
    case RefActivation::Silu: {
      const double s = sigmoid(x);
      return s * (1.0 + x * (1.0 - s));
    }
    case RefActivation::Sigmoid: {
      const double s = sigmoid(x);
      return s * (1.0 - s);
    }
    case RefActivation::Tanh: {
      const double t = std::tanh(x);
      return 1.0 - t * t;
    }
  }
  return 0;
}

// ---- loss helpers ----

// [N, C, rest...] as (outer N, classes C, inner rest).
struct ClassLayout {
  Int N = 0, C = 0, inner = 1;
};

ClassLayout class_layout(const Shape& x) {
  if (x.size() < 2) bad("cross_entropy: input must have rank >= 2");
  ClassLayout l{x[0], x[1], 1};
  for (std::size_t i = 2; i < x.size(); ++i)
    l.inner *= x[i];
  return l;
}

void same_shape(const Tensor& a, const Tensor& b, const char* op) {
  if (a.shape() != b.shape()) bad(std::string(op) + ": input and target shapes differ");
}

}  // namespace

// ---- upsample ----------------------------------------------------------------

Shape ref_upsample_output_shape(const Shape& x, const RefUpsample& p) {
  if (x.size() < 3 || x.size() > 5) bad("upsample: input must be [N, C, spatial...] (1-3 dims)");
  const std::size_t nsp = x.size() - 2;
  Shape out{x[0], x[1]};
  for (std::size_t i = 0; i < nsp; ++i) {
    Int O = 0;
    if (!p.size.empty()) {
      if (p.size.size() != 1 && p.size.size() != nsp) bad("upsample: size per dim");
      O = p.size.size() == 1 ? p.size[0] : p.size[i];
    } else {
      if (p.scale_factor.size() != 1 && p.scale_factor.size() != nsp)
        bad("upsample: scale_factor per dim");
      const double sf = p.scale_factor.size() == 1 ? p.scale_factor[0] : p.scale_factor[i];
      O = static_cast<Int>(std::floor(static_cast<double>(x[2 + i]) * sf));
    }
    if (O < 1) bad("upsample: empty output");
    out.push_back(O);
  }
  return out;
}

Tensor ref_upsample_forward(const Tensor& x, const RefUpsample& p) {
  const UpsampleGeometry g = upsample_geometry(x.shape(), p, /*backward=*/false);
  const auto in = as_f64(x);
  const Int in_plane = g.in[0] * g.in[1] * g.in[2], out_plane = g.out[0] * g.out[1] * g.out[2];
  std::vector<double> out(static_cast<std::size_t>(g.planes * out_plane), 0.0);
  for (Int pl = 0; pl < g.planes; ++pl)
    for_each_tap(g, [&](Int oi, Int ii, double w) {
      out[static_cast<std::size_t>(pl * out_plane + oi)] +=
          w * in[static_cast<std::size_t>(pl * in_plane + ii)];
    });
  return from_values(ref_upsample_output_shape(x.shape(), p), out);
}

Tensor ref_upsample_grad_input(const Tensor& grad_out, const Shape& input_shape,
                               const RefUpsample& p) {
  const UpsampleGeometry g = upsample_geometry(input_shape, p, /*backward=*/true);
  if (grad_out.shape() != ref_upsample_output_shape(input_shape, p))
    bad("upsample: grad_output has the wrong shape");
  const auto gy = as_f64(grad_out);
  const Int in_plane = g.in[0] * g.in[1] * g.in[2], out_plane = g.out[0] * g.out[1] * g.out[2];
  std::vector<double> gx(static_cast<std::size_t>(g.planes * in_plane), 0.0);
  for (Int pl = 0; pl < g.planes; ++pl)
    for_each_tap(g, [&](Int oi, Int ii, double w) {
      gx[static_cast<std::size_t>(pl * in_plane + ii)] +=
          w * gy[static_cast<std::size_t>(pl * out_plane + oi)];
    });
  return from_values(input_shape, gx);
}

// ---- normalisation -------------------------------------------------------------

std::int64_t ref_norm_set_size(const Shape& x, const RefNorm& p) {
  const NormLayout l = norm_layout(x, p);
  switch (p.kind) {
    case RefNormKind::Batch:
      return l.N * l.S;
    case RefNormKind::Group:
      return (l.C / p.num_groups) * l.S;
    case RefNormKind::Instance:
      return l.S;
    case RefNormKind::Layer:
      return l.C * l.S;
  }
  return 0;
}

Shape ref_norm_param_shape(const Shape& x, const RefNorm& p) {
  norm_layout(x, p);
  if (p.kind == RefNormKind::Layer) return Shape(x.begin() + 1, x.end());
  return Shape{x[1]};
}

RefNormForward ref_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                const Tensor& running_mean, const Tensor& running_var,
                                const RefNorm& p) {
  const NormLayout l = norm_layout(x.shape(), p);
  const auto xv = as_f64(x);
  const Stats st = statistics(l, p, xv, running_mean, running_var);
  const auto w = param_values(weight, l.params, "weight");
  const auto b = param_values(bias, l.params, "bias");
  std::vector<double> y(xv.size());
  for_each_element(l, p, [&](Int i, Int s, Int q) {
    const auto si = static_cast<std::size_t>(s), qi = static_cast<std::size_t>(q);
    const double xhat = (xv[static_cast<std::size_t>(i)] - st.mean[si]) * st.invstd[si];
    y[static_cast<std::size_t>(i)] = xhat * (w.empty() ? 1.0 : w[qi]) + (b.empty() ? 0.0 : b[qi]);
  });
  RefNormForward r;
  r.output = from_values(x.shape(), y);
  for (double v : st.invstd)
    r.max_invstd = std::max(r.max_invstd, v);
  if (p.kind == RefNormKind::Batch && running_mean.defined() && running_var.defined()) {
    if (p.training) {
      auto rm = as_f64(running_mean), rv = as_f64(running_var);
      if (static_cast<Int>(rm.size()) != l.C || static_cast<Int>(rv.size()) != l.C)
        bad("batch_norm: running statistics' shape");
      for (std::size_t c = 0; c < rm.size(); ++c) {
        const double n = static_cast<double>(st.count[c]);
        const double unbiased = n > 1 ? st.var[c] * n / (n - 1) : st.var[c];
        rm[c] = (1 - p.momentum) * rm[c] + p.momentum * st.mean[c];
        rv[c] = (1 - p.momentum) * rv[c] + p.momentum * unbiased;
      }
      r.running_mean = from_values(running_mean.shape(), rm);
      r.running_var = from_values(running_var.shape(), rv);
    } else {
      r.running_mean = running_mean.to(DType::F64);
      r.running_var = running_var.to(DType::F64);
    }
  }
  return r;
}

RefNormGrads ref_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                               const Tensor& running_mean, const Tensor& running_var,
                               const RefNorm& p) {
  const NormLayout l = norm_layout(x.shape(), p);
  if (grad_out.shape() != x.shape()) bad("norm: grad_output has the wrong shape");
  const auto xv = as_f64(x);
  const auto gy = as_f64(grad_out);
  const Stats st = statistics(l, p, xv, running_mean, running_var);
  const auto w = param_values(weight, l.params, "weight");
  const auto n_stats = static_cast<std::size_t>(l.stats);
  std::vector<double> xhat(xv.size()), g(xv.size());
  std::vector<double> mean_g(n_stats, 0.0), mean_gx(n_stats, 0.0);
  std::vector<double> gw(static_cast<std::size_t>(l.params), 0.0),
      gb(static_cast<std::size_t>(l.params), 0.0);
  for_each_element(l, p, [&](Int i, Int s, Int q) {
    const auto ii = static_cast<std::size_t>(i), si = static_cast<std::size_t>(s),
               qi = static_cast<std::size_t>(q);
    xhat[ii] = (xv[ii] - st.mean[si]) * st.invstd[si];
    g[ii] = gy[ii] * (w.empty() ? 1.0 : w[qi]);
    mean_g[si] += g[ii];
    mean_gx[si] += g[ii] * xhat[ii];
    gw[qi] += gy[ii] * xhat[ii];
    gb[qi] += gy[ii];
  });
  std::vector<double> gx(xv.size());
  if (uses_running(p)) {
    for_each_element(l, p, [&](Int i, Int s, Int) {
      gx[static_cast<std::size_t>(i)] =
          g[static_cast<std::size_t>(i)] * st.invstd[static_cast<std::size_t>(s)];
    });
  } else {
    for (std::size_t s = 0; s < n_stats; ++s) {
      const double n = static_cast<double>(std::max<Int>(st.count[s], 1));
      mean_g[s] /= n;
      mean_gx[s] /= n;
    }
    for_each_element(l, p, [&](Int i, Int s, Int) {
      const auto ii = static_cast<std::size_t>(i), si = static_cast<std::size_t>(s);
      gx[ii] = st.invstd[si] * (g[ii] - mean_g[si] - xhat[ii] * mean_gx[si]);
    });
  }
  RefNormGrads r;
  r.grad_input = from_values(x.shape(), gx);
  const Shape ps = ref_norm_param_shape(x.shape(), p);
  r.grad_weight = from_values(ps, gw);
  r.grad_bias = from_values(ps, gb);
  return r;
}

// ---- cat -------------------------------------------------------------------------

Tensor ref_cat(const std::vector<Tensor>& inputs, std::int64_t dim) {
  if (inputs.empty()) bad("cat: no inputs");
  const Shape& first = inputs[0].shape();
  const Int rank = static_cast<Int>(first.size());
  if (dim < 0) dim += rank;
  if (dim < 0 || dim >= rank) bad("cat: dim out of range");
  const auto d = static_cast<std::size_t>(dim);
  Shape out = first;
  out[d] = 0;
  for (const Tensor& t : inputs) {
    const Shape& s = t.shape();
    if (static_cast<Int>(s.size()) != rank) bad("cat: ranks differ");
    for (std::size_t k = 0; k < s.size(); ++k)
      if (k != d && s[k] != first[k]) bad("cat: shapes differ outside dim");
    out[d] += s[d];
  }
  // outer x (length along dim x inner) blocks.
  Int outer = 1, inner = 1;
  for (std::size_t k = 0; k < d; ++k)
    outer *= first[k];
  for (std::size_t k = d + 1; k < first.size(); ++k)
    inner *= first[k];
  std::vector<double> y(static_cast<std::size_t>(numel_of(out)));
  Int at = 0;  // offset along dim
  for (const Tensor& t : inputs) {
    const auto v = as_f64(t);
    const Int len = t.shape()[d];
    for (Int o = 0; o < outer; ++o)
      for (Int j = 0; j < len; ++j)
        for (Int i = 0; i < inner; ++i)
          y[static_cast<std::size_t>((o * out[d] + at + j) * inner + i)] =
              v[static_cast<std::size_t>((o * len + j) * inner + i)];
    at += len;
  }
  return from_values(out, y);
}

std::vector<Tensor> ref_cat_grad(const Tensor& grad_out, const std::vector<Shape>& input_shapes,
                                 std::int64_t dim) {
  const Shape& out = grad_out.shape();
  const Int rank = static_cast<Int>(out.size());
  if (dim < 0) dim += rank;
  if (dim < 0 || dim >= rank) bad("cat: dim out of range");
  const auto d = static_cast<std::size_t>(dim);
  Int outer = 1, inner = 1, total = 0;
  for (std::size_t k = 0; k < d; ++k)
    outer *= out[k];
  for (std::size_t k = d + 1; k < out.size(); ++k)
    inner *= out[k];
  for (const Shape& s : input_shapes)
    total += s.at(d);
  if (total != out[d]) bad("cat: the pieces do not add up to grad_output");
  const auto gy = as_f64(grad_out);
  std::vector<Tensor> pieces;
  Int at = 0;
  for (const Shape& s : input_shapes) {
    const Int len = s[d];
    std::vector<double> v(static_cast<std::size_t>(numel_of(s)));
    for (Int o = 0; o < outer; ++o)
      for (Int j = 0; j < len; ++j)
        for (Int i = 0; i < inner; ++i)
          v[static_cast<std::size_t>((o * len + j) * inner + i)] =
              gy[static_cast<std::size_t>((o * out[d] + at + j) * inner + i)];
    pieces.push_back(from_values(s, v));
    at += len;
  }
  return pieces;
}

// ---- activations -------------------------------------------------------------

Tensor ref_activation_forward(const Tensor& x, RefActivation a, double negative_slope) {
  auto v = as_f64(x);
  for (double& e : v)
    e = act(e, a, negative_slope);
  return from_values(x.shape(), v);
}

Tensor ref_activation_grad_input(const Tensor& grad_out, const Tensor& x, RefActivation a,
                                 double negative_slope) {
  if (grad_out.shape() != x.shape()) bad("activation: grad_output has the wrong shape");
  const auto xv = as_f64(x);
  auto g = as_f64(grad_out);
  for (std::size_t i = 0; i < g.size(); ++i)
    g[i] *= act_derivative(xv[i], a, negative_slope);
  return from_values(x.shape(), g);
}

// ---- losses ------------------------------------------------------------------

Tensor ref_mse_loss(const Tensor& x, const Tensor& target, bool mean) {
  same_shape(x, target, "mse_loss");
  const auto a = as_f64(x), t = as_f64(target);
  double sum = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    sum += (a[i] - t[i]) * (a[i] - t[i]);
  if (mean) sum /= static_cast<double>(a.size());  // NaN for an empty input, as PyTorch
  return from_values(Shape{}, {sum});
}

Tensor ref_mse_loss_grad_input(const Tensor& x, const Tensor& target, bool mean, double grad) {
  same_shape(x, target, "mse_loss");
  const auto a = as_f64(x), t = as_f64(target);
  std::vector<double> g(a.size());
  const double scale = grad * (mean ? 1.0 / static_cast<double>(a.size()) : 1.0);
  for (std::size_t i = 0; i < a.size(); ++i)
    g[i] = 2.0 * (a[i] - t[i]) * scale;
  return from_values(x.shape(), g);
}

namespace {

double pointwise_term(RefPointwiseLoss l, double x, double t, double p) {
  const double d = x - t, a = std::abs(d);
  switch (l) {
    case RefPointwiseLoss::L1:
      return a;
    case RefPointwiseLoss::SmoothL1:
      if (p == 0) return a;
      return a < p ? 0.5 * d * d / p : a - 0.5 * p;
    case RefPointwiseLoss::Huber:
      return a < p ? 0.5 * d * d : p * (a - 0.5 * p);
    case RefPointwiseLoss::BceWithLogits: {
      const double s = 1.0 / (1.0 + std::exp(-x));
      return -(t * std::log(s) + (1.0 - t) * std::log(1.0 - s));
    }
  }
  return NAN;
}

double pointwise_slope(RefPointwiseLoss l, double x, double t, double p) {
  const double d = x - t;
  const double sign = d > 0 ? 1.0 : d < 0 ? -1.0 : 0.0;
  switch (l) {
    case RefPointwiseLoss::L1:
      return sign;
    case RefPointwiseLoss::SmoothL1:
      if (p == 0) return sign;
      return std::abs(d) < p ? d / p : sign;
    case RefPointwiseLoss::Huber:
      return std::abs(d) < p ? d : p * sign;
    case RefPointwiseLoss::BceWithLogits:
      return 1.0 / (1.0 + std::exp(-x)) - t;
  }
  return NAN;
}

}  // namespace

Tensor ref_pointwise_loss(RefPointwiseLoss l, const Tensor& x, const Tensor& target, bool mean,
                          double param) {
  same_shape(x, target, "pointwise loss");
  const auto a = as_f64(x), t = as_f64(target);
  double sum = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    sum += pointwise_term(l, a[i], t[i], param);
  if (mean) sum /= static_cast<double>(a.size());  // NaN for an empty input, as PyTorch
  return from_values(Shape{}, {sum});
}

Tensor ref_pointwise_loss_grad_input(RefPointwiseLoss l, const Tensor& x, const Tensor& target,
                                     bool mean, double param, double grad) {
  same_shape(x, target, "pointwise loss");
  const auto a = as_f64(x), t = as_f64(target);
  std::vector<double> g(a.size());
  const double scale = grad * (mean ? 1.0 / static_cast<double>(a.size()) : 1.0);
  for (std::size_t i = 0; i < a.size(); ++i)
    g[i] = pointwise_slope(l, a[i], t[i], param) * scale;
  return from_values(x.shape(), g);
}

namespace {

std::uint64_t splitmix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

Tensor ref_linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const Int in = x.shape().back(), K = weight.shape()[0];
  const Int rows = shape_numel(Shape(x.shape().begin(), x.shape().end() - 1));
  const auto a = as_f64(x), w = as_f64(weight);
  const auto b = bias.defined() ? as_f64(bias) : std::vector<double>(static_cast<std::size_t>(K));
  std::vector<double> y(static_cast<std::size_t>(rows * K));
  for (Int r = 0; r < rows; ++r)
    for (Int k = 0; k < K; ++k) {
      double s = b[static_cast<std::size_t>(k)];
      for (Int i = 0; i < in; ++i)
        s += a[static_cast<std::size_t>(r * in + i)] * w[static_cast<std::size_t>(k * in + i)];
      y[static_cast<std::size_t>(r * K + k)] = s;
    }
  Shape shape = x.shape();
  shape.back() = K;
  return from_values(shape, y);
}

RefLinearGrads ref_linear_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight) {
  const Int in = x.shape().back(), K = weight.shape()[0];
  const Int rows = shape_numel(Shape(x.shape().begin(), x.shape().end() - 1));
  const auto g = as_f64(grad_out), a = as_f64(x), w = as_f64(weight);
  std::vector<double> gx(a.size()), gw(w.size()), gb(static_cast<std::size_t>(K));
  for (Int r = 0; r < rows; ++r)
    for (Int k = 0; k < K; ++k) {
      const double gy = g[static_cast<std::size_t>(r * K + k)];
      gb[static_cast<std::size_t>(k)] += gy;
      for (Int i = 0; i < in; ++i) {
        gx[static_cast<std::size_t>(r * in + i)] += gy * w[static_cast<std::size_t>(k * in + i)];
        gw[static_cast<std::size_t>(k * in + i)] += gy * a[static_cast<std::size_t>(r * in + i)];
      }
    }
  return {from_values(x.shape(), gx), from_values(weight.shape(), gw), from_values({K}, gb)};
}

Tensor ref_dropout(const Tensor& x, double p, std::uint64_t seed, std::uint64_t stream) {
  constexpr std::uint64_t golden = 0x9E3779B97F4A7C15ull;
  const std::uint64_t key = splitmix64(seed ^ splitmix64(stream + golden));
  auto v = as_f64(x);
  const double scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::uint64_t bits = splitmix64(key + (static_cast<std::uint64_t>(i) + 1) * golden) >> 11;
    const bool keep = std::ldexp(static_cast<double>(bits), -53) >= p;
    v[i] = keep ? v[i] * scale : 0.0;
  }
  return from_values(x.shape(), v);
}

Tensor ref_softmax_dim1(const Tensor& x) {
  const ClassLayout l = class_layout(x.shape());
  auto v = as_f64(x);
  for (Int n = 0; n < l.N; ++n)
    for (Int i = 0; i < l.inner; ++i) {
      const auto at = [&](Int c) { return static_cast<std::size_t>((n * l.C + c) * l.inner + i); };
      double m = -INFINITY;
      for (Int c = 0; c < l.C; ++c)
        m = std::max(m, v[at(c)]);
      double z = 0;
      for (Int c = 0; c < l.C; ++c)
        z += std::exp(v[at(c)] - m);
      for (Int c = 0; c < l.C; ++c)
        v[at(c)] = std::exp(v[at(c)] - m) / z;
    }
  return from_values(x.shape(), v);
}

Tensor ref_cross_entropy(const Tensor& x, const Tensor& target, bool mean) {
  same_shape(x, target, "cross_entropy");
  const ClassLayout l = class_layout(x.shape());
  const auto a = as_f64(x), t = as_f64(target);
  double sum = 0;
  for (Int n = 0; n < l.N; ++n)
    for (Int i = 0; i < l.inner; ++i) {
      const auto at = [&](Int c) { return static_cast<std::size_t>((n * l.C + c) * l.inner + i); };
      double m = -INFINITY;
      for (Int c = 0; c < l.C; ++c)
        m = std::max(m, a[at(c)]);
      double z = 0;
      for (Int c = 0; c < l.C; ++c)
        z += std::exp(a[at(c)] - m);
      const double lse = m + std::log(z);
      for (Int c = 0; c < l.C; ++c)
        sum -= t[at(c)] * (a[at(c)] - lse);
    }
  if (mean) sum /= static_cast<double>(l.N * l.inner);
  return from_values(Shape{}, {sum});
}

Tensor ref_cross_entropy_grad_input(const Tensor& x, const Tensor& target, bool mean, double grad) {
  same_shape(x, target, "cross_entropy");
  const ClassLayout l = class_layout(x.shape());
  const auto t = as_f64(target);
  const auto sm = as_f64(ref_softmax_dim1(x));
  const double scale = grad * (mean ? 1.0 / static_cast<double>(l.N * l.inner) : 1.0);
  std::vector<double> g(t.size());
  for (Int n = 0; n < l.N; ++n)
    for (Int i = 0; i < l.inner; ++i) {
      const auto at = [&](Int c) { return static_cast<std::size_t>((n * l.C + c) * l.inner + i); };
      double tsum = 0;
      for (Int c = 0; c < l.C; ++c)
        tsum += t[at(c)];
      for (Int c = 0; c < l.C; ++c)
        g[at(c)] = (sm[at(c)] * tsum - t[at(c)]) * scale;
    }
  return from_values(x.shape(), g);
}

namespace {
// The class index of position (n, i), or -1 when it is ignore_index.
Int class_at(const Tensor& target, Int n, Int i, Int inner, Int C, std::int64_t ignore_index) {
  if (target.dtype() != DType::I64 || target.numel() != target.shape().at(0) * inner)
    throw std::invalid_argument("cross_entropy: class indices are an i64 [N, d1, ...] target");
  const std::int64_t c = target.contiguous().data<std::int64_t>()[n * inner + i];
  if (c == ignore_index) return -1;
  if (c < 0 || c >= C)
    throw std::invalid_argument("cross_entropy: target " + std::to_string(c) + " out of range");
  return c;
}
}  // namespace

Tensor ref_cross_entropy_indices(const Tensor& x, const Tensor& target, bool mean,
                                 std::int64_t ignore_index, double label_smoothing) {
  const ClassLayout l = class_layout(x.shape());
  const auto a = as_f64(x);
  const Tensor t = target.contiguous();
  const double s = label_smoothing;
  double sum = 0, counted = 0;
  for (Int n = 0; n < l.N; ++n)
    for (Int i = 0; i < l.inner; ++i) {
      const Int k = class_at(t, n, i, l.inner, l.C, ignore_index);
      if (k < 0) continue;
      const auto at = [&](Int c) { return static_cast<std::size_t>((n * l.C + c) * l.inner + i); };
      double m = -INFINITY;
      for (Int c = 0; c < l.C; ++c)
        m = std::max(m, a[at(c)]);
      double z = 0;
      for (Int c = 0; c < l.C; ++c)
        z += std::exp(a[at(c)] - m);
      const double lse = m + std::log(z);
      double smooth = 0;
      for (Int c = 0; c < l.C; ++c)
        smooth += lse - a[at(c)];
      sum += (1 - s) * (lse - a[at(k)]) + s / static_cast<double>(l.C) * smooth;
      counted += 1;
    }
  return from_values(Shape{}, {mean ? sum / counted : sum});
}

Tensor ref_cross_entropy_indices_grad_input(const Tensor& x, const Tensor& target, bool mean,
                                            std::int64_t ignore_index, double label_smoothing,
                                            double grad) {
  const ClassLayout l = class_layout(x.shape());
  const Tensor t = target.contiguous();
  const auto sm = as_f64(ref_softmax_dim1(x));
  const double s = label_smoothing;
  std::vector<double> g(sm.size(), 0.0);
  double counted = 0;
  for (Int n = 0; n < l.N; ++n)
    for (Int i = 0; i < l.inner; ++i) {
      const Int k = class_at(t, n, i, l.inner, l.C, ignore_index);
      if (k < 0) continue;
      counted += 1;
      for (Int c = 0; c < l.C; ++c) {
        const auto at = static_cast<std::size_t>((n * l.C + c) * l.inner + i);
        g[at] = grad * (sm[at] - (1 - s) * (c == k ? 1.0 : 0.0) - s / static_cast<double>(l.C));
      }
    }
  if (mean && counted > 0)
    for (double& v : g)
      v /= counted;
  return from_values(x.shape(), g);
}

}  // namespace dtensor::reference
