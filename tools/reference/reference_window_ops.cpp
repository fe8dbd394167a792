#include "tools/reference/reference_window_ops.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "tools/reference/reference_conv.h"

namespace dtensor::reference {
namespace {

using Int = std::int64_t;
using A3 = std::array<Int, 3>;

// Every operator is treated as 3-D: missing leading spatial dims get extent
// 1, kernel 1, stride 1, dilation 1 and no padding, which changes nothing.
// Spatial dim i of an input with `nsp` spatial dims is slot 3 - nsp + i.

[[noreturn]] void bad(const std::string& what) {
  throw std::invalid_argument("reference window ops: " + what);
}

std::size_t spatial_dims(const Shape& x) {
  if (x.size() < 3 || x.size() > 5)
    bad("input must be [N, C, spatial...] with 1 to 3 spatial dims");
  return x.size() - 2;
}

template <typename T>
T pick(const std::vector<T>& v, std::size_t i, std::size_t nsp, T fallback, const char* name) {
  if (v.empty()) return fallback;
  if (v.size() == 1) return v[0];
  if (v.size() != nsp) bad(std::string(name) + ": one entry or one per spatial dim");
  return v[i];
}

std::vector<double> as_f64(const Tensor& t) {
  const Tensor c = t.to(DType::F64);
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

Int flat3(const A3& e, Int a, Int b, Int c) {
  return (a * e[1] + b) * e[2] + c;
}

Int prod3(const A3& e) {
  return e[0] * e[1] * e[2];
}

// floor(a / b) and ceil(a / b) for b > 0 and any sign of a.
Int floor_div(Int a, Int b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}
Int ceil_div(Int a, Int b) {
  return -floor_div(-a, b);
}

// The input extents (3-D) of x and its planes N*C.
struct Planes {
  std::size_t nsp = 0;
  Int planes = 0;
  A3 in{1, 1, 1};
};

Planes planes_of(const Shape& x) {
  Planes p;
  p.nsp = spatial_dims(x);
  p.planes = x[0] * x[1];
  for (std::size_t i = 0; i < p.nsp; ++i)
    p.in[3 - p.nsp + i] = x[2 + i];
  return p;
}

Shape shape_with(const Shape& x, const A3& out) {
  Shape s{x[0], x[1]};
  for (std::size_t i = 3 - (x.size() - 2); i < 3; ++i)
    s.push_back(out[i]);
  return s;
}

// The input positions each output reads, per dim (slot) and output index, in
// kernel order; for the average pools also the divisor factor of each output.
struct Windows {
  A3 out{1, 1, 1};
  std::array<std::vector<std::vector<Int>>, 3> pos;  // [slot][o] -> positions
  std::array<std::vector<Int>, 3> pool_size;         // [slot][o] (avg_pool)
};

// Fills the trivial slots (extent 1, one window {0}).
void trivial_slots(Windows& w, std::size_t nsp) {
  for (std::size_t t = 0; t < 3 - nsp; ++t) {
    w.out[t] = 1;
    w.pos[t] = {{0}};
    w.pool_size[t] = {1};
  }
}

// The pool parameters of one spatial dim.
struct PoolDim {
  Int k = 1, s = 1, d = 1, pl = 0, pr = 0;
};

PoolDim pool_dim(const PoolParams& p, std::size_t i, std::size_t nsp) {
  PoolDim d;
  d.k = pick(p.kernel, i, nsp, Int{1}, "kernel");
  d.s = p.stride.empty() ? d.k : pick(p.stride, i, nsp, Int{1}, "stride");
  d.d = pick(p.dilation, i, nsp, Int{1}, "dilation");
  const auto pad = pick(p.padding, i, nsp, std::pair<Int, Int>{0, 0}, "padding");
  d.pl = pad.first;
  d.pr = pad.second;
  if (d.k < 1 || d.s < 1 || d.d < 1) bad("kernel, stride and dilation must be >= 1");
  return d;
}

Windows max_pool_windows(const Shape& x, const PoolParams& p) {
  const Planes pl = planes_of(x);
  Windows w;
  trivial_slots(w, pl.nsp);
  for (std::size_t i = 0; i < pl.nsp; ++i) {
    const std::size_t t = 3 - pl.nsp + i;
    const PoolDim g = pool_dim(p, i, pl.nsp);
    const Int L = pl.in[t];
    const Int O = ref_pool_length(L, g.k, g.s, g.d, g.pl, g.pr, p.ceil_mode);
    if (O < 0) bad("empty pool output");
    w.out[t] = O;
    w.pos[t].resize(static_cast<std::size_t>(O));
    w.pool_size[t].assign(static_cast<std::size_t>(O), 1);
    for (Int o = 0; o < O; ++o)
      for (Int j = 0; j < g.k; ++j) {
        const Int at = o * g.s - g.pl + j * g.d;
        if (at >= 0 && at < L) w.pos[t][static_cast<std::size_t>(o)].push_back(at);
      }
  }
  return w;
}

// Average pooling: clipped windows, and per output and dim the two candidate
// divisor factors: pool_size (window clipped to [-pl, L + pr)) and the count.
Windows avg_pool_windows(const Shape& x, const PoolParams& p) {
  const Planes pl = planes_of(x);
  Windows w;
  trivial_slots(w, pl.nsp);
  for (std::size_t i = 0; i < pl.nsp; ++i) {
    const std::size_t t = 3 - pl.nsp + i;
    const PoolDim g = pool_dim(p, i, pl.nsp);
    if (g.d != 1) bad("avg_pool has no dilation");
    const Int L = pl.in[t];
    const Int O = ref_pool_length(L, g.k, g.s, 1, g.pl, g.pr, p.ceil_mode);
    if (O < 0) bad("empty pool output");
    w.out[t] = O;
    w.pos[t].resize(static_cast<std::size_t>(O));
    w.pool_size[t].resize(static_cast<std::size_t>(O));
    for (Int o = 0; o < O; ++o) {
      Int start = o * g.s - g.pl;
      Int end = std::min(start + g.k, L + g.pr);
      w.pool_size[t][static_cast<std::size_t>(o)] = end - start;
      start = std::max<Int>(start, 0);
      end = std::min(end, L);
      for (Int at = start; at < end; ++at)
        w.pos[t][static_cast<std::size_t>(o)].push_back(at);
    }
  }
  return w;
}

Windows adaptive_windows(const Shape& x, const std::vector<Int>& output_size) {
  const Planes pl = planes_of(x);
  Windows w;
  trivial_slots(w, pl.nsp);
  for (std::size_t i = 0; i < pl.nsp; ++i) {
    const std::size_t t = 3 - pl.nsp + i;
    const Int L = pl.in[t];
    if (output_size.empty()) bad("output_size: empty");
    const Int O = pick(output_size, i, pl.nsp, Int{1}, "output_size");
    if (O < 0) bad("output_size must be >= 0");
    w.out[t] = O;
    w.pos[t].resize(static_cast<std::size_t>(O));
    w.pool_size[t].resize(static_cast<std::size_t>(O));
    for (Int o = 0; o < O; ++o) {
      const Int start = floor_div(o * L, O), end = ceil_div((o + 1) * L, O);
      for (Int at = start; at < end; ++at)
        w.pos[t][static_cast<std::size_t>(o)].push_back(at);
      w.pool_size[t][static_cast<std::size_t>(o)] = end - start;
    }
  }
  return w;
}

// The max of every window, and the flat (3-D, per plane) index it came from
// (-1: the window holds no input element).
void max_windows(const std::vector<double>& X, const Planes& pl, const Windows& w,
                 std::vector<double>& Y, std::vector<Int>& index) {
  const Int per_out = prod3(w.out);
  Y.assign(static_cast<std::size_t>(pl.planes * per_out), 0.0);
  index.assign(Y.size(), -1);
  std::size_t yi = 0;
  for (Int plane = 0; plane < pl.planes; ++plane) {
    const double* in = X.data() + plane * prod3(pl.in);
    for (Int o0 = 0; o0 < w.out[0]; ++o0)
      for (Int o1 = 0; o1 < w.out[1]; ++o1)
        for (Int o2 = 0; o2 < w.out[2]; ++o2) {
          double maxval = -std::numeric_limits<double>::infinity();
          Int maxindex = -1;
          for (Int i0 : w.pos[0][static_cast<std::size_t>(o0)])
            for (Int i1 : w.pos[1][static_cast<std::size_t>(o1)])
              for (Int i2 : w.pos[2][static_cast<std::size_t>(o2)]) {
                const Int at = flat3(pl.in, i0, i1, i2);
                const double v = in[at];
                if (maxindex < 0) maxindex = at;  // the first in-range element
                if (v > maxval || std::isnan(v)) {
                  maxval = v;
                  maxindex = at;
                }
              }
          Y[yi] = maxval;
          index[yi] = maxindex;
          ++yi;
        }
  }
}

Tensor max_forward(const Tensor& x, const Windows& w) {
  const Planes pl = planes_of(x.shape());
  std::vector<double> Y;
  std::vector<Int> index;
  max_windows(as_f64(x), pl, w, Y, index);
  Tensor y = Tensor::zeros(shape_with(x.shape(), w.out), DType::F64);
  std::copy(Y.begin(), Y.end(), y.data<double>());
  return y;
}

Tensor max_grad(const Tensor& grad_out, const Tensor& x, const Windows& w) {
  const Planes pl = planes_of(x.shape());
  if (grad_out.shape() != shape_with(x.shape(), w.out)) bad("grad_out shape");
  std::vector<double> Y;
  std::vector<Int> index;
  max_windows(as_f64(x), pl, w, Y, index);
  const auto GY = as_f64(grad_out);
  Tensor gx = Tensor::zeros(x.shape(), DType::F64);
  double* GX = gx.data<double>();
  const Int per_out = prod3(w.out), per_in = prod3(pl.in);
  for (Int plane = 0; plane < pl.planes; ++plane)
    for (Int o = 0; o < per_out; ++o) {
      const auto at = static_cast<std::size_t>(plane * per_out + o);
      if (index[at] >= 0) GX[plane * per_in + index[at]] += GY[at];
    }
  return gx;
}

// The divisor of output (o0, o1, o2): `kind` 0 = override, 1 = pool_size,
// 2 = clipped count.
double divisor(const Windows& w, Int o0, Int o1, Int o2, int kind, Int override_value) {
  if (kind == 0) return static_cast<double>(override_value);
  const std::array<Int, 3> o{o0, o1, o2};
  double d = 1;
  for (std::size_t t = 0; t < 3; ++t) {
    const auto at = static_cast<std::size_t>(o[t]);
    d *=
        static_cast<double>(kind == 1 ? w.pool_size[t][at] : static_cast<Int>(w.pos[t][at].size()));
  }
  return d;
}

// y = sum over the window / divisor; an empty window gives 0.
Tensor avg_forward(const Tensor& x, const Windows& w, int kind, Int override_value) {
  const Planes pl = planes_of(x.shape());
  const auto X = as_f64(x);
  Tensor y = Tensor::zeros(shape_with(x.shape(), w.out), DType::F64);
  double* Y = y.data<double>();
  std::size_t yi = 0;
  for (Int plane = 0; plane < pl.planes; ++plane) {
    const double* in = X.data() + plane * prod3(pl.in);
    for (Int o0 = 0; o0 < w.out[0]; ++o0)
      for (Int o1 = 0; o1 < w.out[1]; ++o1)
        for (Int o2 = 0; o2 < w.out[2]; ++o2) {
          double sum = 0;
          std::size_t count = 0;
          for (Int i0 : w.pos[0][static_cast<std::size_t>(o0)])
            for (Int i1 : w.pos[1][static_cast<std::size_t>(o1)])
              for (Int i2 : w.pos[2][static_cast<std::size_t>(o2)]) {
                sum += in[flat3(pl.in, i0, i1, i2)];
                ++count;
              }
          Y[yi++] = count == 0 ? 0.0 : sum / divisor(w, o0, o1, o2, kind, override_value);
        }
  }
  return y;
}

Tensor avg_grad(const Tensor& grad_out, const Shape& input_shape, const Windows& w, int kind,
                Int override_value) {
  const Planes pl = planes_of(input_shape);
  if (grad_out.shape() != shape_with(input_shape, w.out)) bad("grad_out shape");
  const auto GY = as_f64(grad_out);
  Tensor gx = Tensor::zeros(input_shape, DType::F64);
  double* GX = gx.data<double>();
  std::size_t yi = 0;
  for (Int plane = 0; plane < pl.planes; ++plane) {
    double* g = GX + plane * prod3(pl.in);
    for (Int o0 = 0; o0 < w.out[0]; ++o0)
      for (Int o1 = 0; o1 < w.out[1]; ++o1)
        for (Int o2 = 0; o2 < w.out[2]; ++o2) {
          const double share = GY[yi++] / divisor(w, o0, o1, o2, kind, override_value);
          for (Int i0 : w.pos[0][static_cast<std::size_t>(o0)])
            for (Int i1 : w.pos[1][static_cast<std::size_t>(o1)])
              for (Int i2 : w.pos[2][static_cast<std::size_t>(o2)])
                g[flat3(pl.in, i0, i1, i2)] += share;
        }
  }
  return gx;
}

int avg_kind(const PoolParams& p) {
  if (p.divisor_override) {
    if (*p.divisor_override == 0) bad("divisor_override must not be 0");
    return 0;
  }
  return p.count_include_pad ? 1 : 2;
}

// ---- padding ----

struct PadGeom {
  Planes in;
  A3 out{1, 1, 1}, pl{0, 0, 0};
};

PadGeom pad_geom(const Shape& x, const PadPairs& padding, PadMode mode) {
  PadGeom g;
  g.in = planes_of(x);
  for (std::size_t i = 0; i < g.in.nsp; ++i) {
    const std::size_t t = 3 - g.in.nsp + i;
    const auto [l, r] = pick(padding, i, g.in.nsp, std::pair<Int, Int>{0, 0}, "padding");
    const Int L = g.in.in[t];
    g.pl[t] = l;
    g.out[t] = L + l + r;
    if (g.out[t] < 0) bad("padding crops more than the input");
    if (mode != PadMode::Constant && (l < 0 || r < 0)) bad("negative padding needs constant mode");
    if (mode == PadMode::Reflect && (l >= L || r >= L)) bad("reflect padding must be < the length");
    if (mode == PadMode::Circular && (l > L || r > L))
      bad("circular padding must be <= the length");
    if (mode == PadMode::Replicate && L < 1 && g.out[t] > 0)
      bad("replicate needs a non-empty input");
  }
  return g;
}

// The input index output j of slot t reads; -1 for a constant padding value.
Int source(const PadGeom& g, std::size_t t, Int j, PadMode mode) {
  const Int L = g.in.in[t];
  Int i = j - g.pl[t];
  switch (mode) {
    case PadMode::Constant:
      return i >= 0 && i < L ? i : -1;
    case PadMode::Reflect:
      if (i < 0) i = -i;
      if (i >= L) i = 2 * (L - 1) - i;
      return i;
    case PadMode::Replicate:
      return std::min(std::max<Int>(i, 0), L - 1);
    case PadMode::Circular:
      return ((i % L) + L) % L;
  }
  return -1;
}

PadMode pad_mode_of(PaddingMode m) {
  switch (m) {
    case PaddingMode::Reflect:
      return PadMode::Reflect;
    case PaddingMode::Replicate:
      return PadMode::Replicate;
    case PaddingMode::Circular:
      return PadMode::Circular;
    case PaddingMode::Zeros:
      break;
  }
  return PadMode::Constant;
}

// A padding_mode convolution as (pad pairs, mode, the same conv unpadded).
struct ModeConv {
  PadPairs pads;
  PadMode mode;
  ConvParams unpadded;
};

ModeConv mode_conv(const ConvParams& p) {
  ModeConv m{p.padding, pad_mode_of(p.padding_mode), p};
  if (m.pads.empty()) m.pads = {{0, 0}};
  m.unpadded.padding = {{0, 0}};
  m.unpadded.padding_mode = PaddingMode::Zeros;
  return m;
}

// ---- transposed convolution ----

struct TGeom {
  Int n = 0, c = 0, oc = 0, groups = 1, cg = 0, ocg = 0;
  A3 in{1, 1, 1}, k{1, 1, 1}, out{1, 1, 1}, s{1, 1, 1}, d{1, 1, 1}, p{0, 0, 0};
};

TGeom t_geometry(const Shape& x, const Shape& w, const ConvTransposeParams& p) {
  const std::size_t nsp = spatial_dims(x);
  if (w.size() != x.size()) bad("conv_transpose: weight rank");
  TGeom g;
  g.n = x[0];
  g.c = x[1];
  g.groups = p.groups;
  if (g.groups < 1 || g.c % g.groups != 0 || w[0] != g.c) bad("conv_transpose: channels/groups");
  g.cg = g.c / g.groups;
  g.ocg = w[1];
  g.oc = g.ocg * g.groups;
  for (std::size_t i = 0; i < nsp; ++i) {
    const std::size_t t = 3 - nsp + i;
    g.in[t] = x[2 + i];
    g.k[t] = w[2 + i];
    g.s[t] = pick(p.stride, i, nsp, Int{1}, "stride");
    g.d[t] = pick(p.dilation, i, nsp, Int{1}, "dilation");
    g.p[t] = pick(p.padding, i, nsp, Int{0}, "padding");
    const Int op = pick(p.output_padding, i, nsp, Int{0}, "output_padding");
    g.out[t] = ref_conv_transpose_length(g.in[t], g.k[t], g.s[t], g.p[t], op, g.d[t]);
    if (g.out[t] < 0) bad("conv_transpose: empty output");
  }
  return g;
}

Shape t_out_shape(const Shape& x, const TGeom& g) {
  Shape s{g.n, g.oc};
  for (std::size_t i = 3 - (x.size() - 2); i < 3; ++i)
    s.push_back(g.out[i]);
  return s;
}

// Calls f(n, c, i0, i1, i2, o, k0, k1, k2, j0, j1, j2) for every (input
// element, output channel of its group, tap) whose output position j = i*s -
// p + k*d lies in the output: the terms of the transposed convolution.
template <typename F>
void for_each_term(const TGeom& g, F&& f) {
  for (Int n = 0; n < g.n; ++n)
    for (Int c = 0; c < g.c; ++c)
      for (Int i0 = 0; i0 < g.in[0]; ++i0)
        for (Int i1 = 0; i1 < g.in[1]; ++i1)
          for (Int i2 = 0; i2 < g.in[2]; ++i2)
            for (Int ol = 0; ol < g.ocg; ++ol)
              for (Int k0 = 0; k0 < g.k[0]; ++k0) {
                const Int j0 = i0 * g.s[0] - g.p[0] + k0 * g.d[0];
                if (j0 < 0 || j0 >= g.out[0]) continue;
                for (Int k1 = 0; k1 < g.k[1]; ++k1) {
                  const Int j1 = i1 * g.s[1] - g.p[1] + k1 * g.d[1];
                  if (j1 < 0 || j1 >= g.out[1]) continue;
                  for (Int k2 = 0; k2 < g.k[2]; ++k2) {
                    const Int j2 = i2 * g.s[2] - g.p[2] + k2 * g.d[2];
                    if (j2 < 0 || j2 >= g.out[2]) continue;
                    const Int o = (c / g.cg) * g.ocg + ol;
                    const Int xi = (n * g.c + c) * prod3(g.in) + flat3(g.in, i0, i1, i2);
                    const Int wi = (c * g.ocg + ol) * prod3(g.k) + flat3(g.k, k0, k1, k2);
                    const Int yi = (n * g.oc + o) * prod3(g.out) + flat3(g.out, j0, j1, j2);
                    f(xi, wi, yi);
                  }
                }
              }
}

}  // namespace

// ---- output lengths ----

Int ref_conv_transpose_length(Int length, Int kernel, Int stride, Int padding, Int output_padding,
                              Int dilation) {
  return (length - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1;
}

Int ref_pool_length(Int length, Int kernel, Int stride, Int dilation, Int pad_left, Int pad_right,
                    bool ceil_mode) {
  const Int span = length + pad_left + pad_right - dilation * (kernel - 1) - 1;
  Int out = (ceil_mode ? ceil_div(span, stride) : floor_div(span, stride)) + 1;
  // A last window that would start in the right padding is dropped.
  if (ceil_mode && out > 0 && (out - 1) * stride >= length + pad_left) --out;
  return out;
}

// ---- transposed convolution ----

Tensor ref_conv_transpose_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                                  const ConvTransposeParams& p) {
  const TGeom g = t_geometry(x.shape(), w.shape(), p);
  const auto X = as_f64(x), W = as_f64(w);
  Tensor y = Tensor::zeros(t_out_shape(x.shape(), g), DType::F64);
  double* Y = y.data<double>();
  for_each_term(g, [&](Int xi, Int wi, Int yi) { Y[yi] += X[xi] * W[wi]; });
  if (b.defined()) {
    const auto B = as_f64(b);
    if (static_cast<Int>(B.size()) != g.oc) bad("conv_transpose: bias shape");
    const Int inner = prod3(g.out);
    for (Int n = 0; n < g.n; ++n)
      for (Int o = 0; o < g.oc; ++o)
        for (Int j = 0; j < inner; ++j)
          Y[(n * g.oc + o) * inner + j] += B[o];
  }
  return y;
}

Tensor ref_conv_transpose_grad_input(const Tensor& grad_out, const Tensor& w,
                                     const Shape& input_shape, const ConvTransposeParams& p) {
  const TGeom g = t_geometry(input_shape, w.shape(), p);
  if (grad_out.shape() != t_out_shape(input_shape, g)) bad("conv_transpose: grad_out shape");
  const auto GY = as_f64(grad_out), W = as_f64(w);
  Tensor gx = Tensor::zeros(input_shape, DType::F64);
  double* GX = gx.data<double>();
  for_each_term(g, [&](Int xi, Int wi, Int yi) { GX[xi] += GY[yi] * W[wi]; });
  return gx;
}

Tensor ref_conv_transpose_grad_weight(const Tensor& grad_out, const Tensor& x,
                                      const Shape& weight_shape, const ConvTransposeParams& p) {
  const TGeom g = t_geometry(x.shape(), weight_shape, p);
  if (grad_out.shape() != t_out_shape(x.shape(), g)) bad("conv_transpose: grad_out shape");
  const auto GY = as_f64(grad_out), X = as_f64(x);
  Tensor gw = Tensor::zeros(weight_shape, DType::F64);
  double* GW = gw.data<double>();
  for_each_term(g, [&](Int xi, Int wi, Int yi) { GW[wi] += GY[yi] * X[xi]; });
  return gw;
}

Tensor ref_conv_transpose_grad_bias(const Tensor& grad_out) {
  return ref_conv_grad_bias(grad_out);
}

// ---- pooling ----

Tensor ref_max_pool_forward(const Tensor& x, const PoolParams& p) {
  return max_forward(x, max_pool_windows(x.shape(), p));
}

Tensor ref_max_pool_grad_input(const Tensor& grad_out, const Tensor& x, const PoolParams& p) {
  return max_grad(grad_out, x, max_pool_windows(x.shape(), p));
}

Tensor ref_avg_pool_forward(const Tensor& x, const PoolParams& p) {
  return avg_forward(x, avg_pool_windows(x.shape(), p), avg_kind(p),
                     p.divisor_override.value_or(1));
}

Tensor ref_avg_pool_grad_input(const Tensor& grad_out, const Shape& input_shape,
                               const PoolParams& p) {
  return avg_grad(grad_out, input_shape, avg_pool_windows(input_shape, p), avg_kind(p),
                  p.divisor_override.value_or(1));
}

Tensor ref_adaptive_avg_pool_forward(const Tensor& x, const std::vector<Int>& output_size) {
  return avg_forward(x, adaptive_windows(x.shape(), output_size), 2, 1);
}

Tensor ref_adaptive_avg_pool_grad_input(const Tensor& grad_out, const Shape& input_shape,
                                        const std::vector<Int>& output_size) {
  return avg_grad(grad_out, input_shape, adaptive_windows(input_shape, output_size), 2, 1);
}

Tensor ref_adaptive_max_pool_forward(const Tensor& x, const std::vector<Int>& output_size) {
  return max_forward(x, adaptive_windows(x.shape(), output_size));
}

Tensor ref_adaptive_max_pool_grad_input(const Tensor& grad_out, const Tensor& x,
                                        const std::vector<Int>& output_size) {
  return max_grad(grad_out, x, adaptive_windows(x.shape(), output_size));
}

// ---- padding ----

Tensor ref_pad_forward(const Tensor& x, const PadPairs& padding, PadMode mode, double value) {
  const PadGeom g = pad_geom(x.shape(), padding, mode);
  const auto X = as_f64(x);
  Tensor y = Tensor::zeros(shape_with(x.shape(), g.out), DType::F64);
  double* Y = y.data<double>();
  std::size_t yi = 0;
  for (Int plane = 0; plane < g.in.planes; ++plane)
    for (Int j0 = 0; j0 < g.out[0]; ++j0)
      for (Int j1 = 0; j1 < g.out[1]; ++j1)
        for (Int j2 = 0; j2 < g.out[2]; ++j2) {
          const Int i0 = source(g, 0, j0, mode), i1 = source(g, 1, j1, mode),
                    i2 = source(g, 2, j2, mode);
          Y[yi++] = i0 < 0 || i1 < 0 || i2 < 0
                        ? value
                        : X[static_cast<std::size_t>(plane * prod3(g.in.in) +
                                                     flat3(g.in.in, i0, i1, i2))];
        }
  return y;
}

Tensor ref_pad_grad_input(const Tensor& grad_out, const Shape& input_shape, const PadPairs& padding,
                          PadMode mode) {
  const PadGeom g = pad_geom(input_shape, padding, mode);
  if (grad_out.shape() != shape_with(input_shape, g.out)) bad("pad: grad_out shape");
  const auto GY = as_f64(grad_out);
  Tensor gx = Tensor::zeros(input_shape, DType::F64);
  double* GX = gx.data<double>();
  std::size_t yi = 0;
  for (Int plane = 0; plane < g.in.planes; ++plane)
    for (Int j0 = 0; j0 < g.out[0]; ++j0)
      for (Int j1 = 0; j1 < g.out[1]; ++j1)
        for (Int j2 = 0; j2 < g.out[2]; ++j2) {
          const Int i0 = source(g, 0, j0, mode), i1 = source(g, 1, j1, mode),
                    i2 = source(g, 2, j2, mode);
          const double gy = GY[yi++];
          if (i0 >= 0 && i1 >= 0 && i2 >= 0)
            GX[plane * prod3(g.in.in) + flat3(g.in.in, i0, i1, i2)] += gy;
        }
  return gx;
}

// ---- convolution with a padding_mode ----

Tensor ref_conv_padding_mode_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                                     const ConvParams& p) {
  if (p.padding_mode == PaddingMode::Zeros) return ref_conv_forward(x, w, b, p);
  const ModeConv m = mode_conv(p);
  return ref_conv_forward(ref_pad_forward(x, m.pads, m.mode), w, b, m.unpadded);
}

Tensor ref_conv_padding_mode_grad_input(const Tensor& grad_out, const Tensor& w,
                                        const Shape& input_shape, const ConvParams& p) {
  if (p.padding_mode == PaddingMode::Zeros) return ref_conv_grad_input(grad_out, w, input_shape, p);
  const ModeConv m = mode_conv(p);
  const PadGeom g = pad_geom(input_shape, m.pads, m.mode);
  const Shape padded = shape_with(input_shape, g.out);
  return ref_pad_grad_input(ref_conv_grad_input(grad_out, w, padded, m.unpadded), input_shape,
                            m.pads, m.mode);
}

Tensor ref_conv_padding_mode_grad_weight(const Tensor& grad_out, const Tensor& x,
                                         const Shape& weight_shape, const ConvParams& p) {
  if (p.padding_mode == PaddingMode::Zeros)
    return ref_conv_grad_weight(grad_out, x, weight_shape, p);
  const ModeConv m = mode_conv(p);
  return ref_conv_grad_weight(grad_out, ref_pad_forward(x, m.pads, m.mode), weight_shape,
                              m.unpadded);
}

}  // namespace dtensor::reference
