#include "tools/reference/reference_conv.h"

#include <array>
#include <stdexcept>
#include <vector>

namespace dtensor::reference {
namespace {

// Every convolution is treated as 3-D: missing leading spatial dims get
// extent 1, kernel 1, stride 1, dilation 1 and no padding, which changes nothing.
struct Geometry {
  std::int64_t n = 0, c = 0, oc = 0, groups = 1, cg = 0, ocg = 0;
  std::array<std::int64_t, 3> in{1, 1, 1}, k{1, 1, 1}, out{1, 1, 1}, s{1, 1, 1}, d{1, 1, 1},
      pl{0, 0, 0}, pr{0, 0, 0};
};

std::int64_t pick(const std::vector<std::int64_t>& v, std::size_t i) {
  return v.size() == 1 ? v[0] : v.at(i);
}

Geometry geometry(const Shape& x, const Shape& w, const ConvParams& p) {
  if (x.size() < 3 || x.size() > 5 || w.size() != x.size())
    throw std::invalid_argument("reference conv: bad ranks");
  Geometry g;
  const std::size_t nsp = x.size() - 2, off = 3 - nsp;
  g.n = x[0];
  g.c = x[1];
  g.oc = w[0];
  g.groups = p.groups;
  g.cg = g.c / g.groups;
  g.ocg = g.oc / g.groups;
  if (w[1] != g.cg || g.c % g.groups != 0 || g.oc % g.groups != 0)
    throw std::invalid_argument("reference conv: bad channels/groups");
  for (std::size_t i = 0; i < nsp; ++i) {
    const std::size_t t = off + i;
    g.in[t] = x[2 + i];
    g.k[t] = w[2 + i];
    g.s[t] = p.stride.empty() ? 1 : pick(p.stride, i);
    g.d[t] = p.dilation.empty() ? 1 : pick(p.dilation, i);
    const auto pad = p.padding.empty()       ? std::pair<std::int64_t, std::int64_t>{0, 0}
                     : p.padding.size() == 1 ? p.padding[0]
                                             : p.padding.at(i);
    g.pl[t] = pad.first;
    g.pr[t] = pad.second;
    // Outputs are the positions j whose whole dilated kernel fits in the padded input.
    const std::int64_t span = g.d[t] * (g.k[t] - 1) + 1;
    std::int64_t o = 0;
    while (o * g.s[t] + span <= g.pl[t] + g.in[t] + g.pr[t])
      ++o;
    g.out[t] = o;
  }
  return g;
}

Shape out_shape(const Shape& x, const Geometry& g) {
  Shape s{g.n, g.oc};
  for (std::size_t i = 3 - (x.size() - 2); i < 3; ++i)
    s.push_back(g.out[i]);
  return s;
}

std::vector<double> as_f64(const Tensor& t) {
  const Tensor c = t.to(DType::F64);
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

}  // namespace

Tensor ref_conv_forward(const Tensor& x, const Tensor& w, const Tensor& b, const ConvParams& p) {
  const Geometry g = geometry(x.shape(), w.shape(), p);
  const auto X = as_f64(x), W = as_f64(w);
  const std::vector<double> B = b.defined() ? as_f64(b) : std::vector<double>(g.oc, 0.0);
  Tensor y = Tensor::zeros(out_shape(x.shape(), g), DType::F64);
  double* Y = y.data<double>();
  std::int64_t yi = 0;
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t oc = 0; oc < g.oc; ++oc)
      for (std::int64_t j0 = 0; j0 < g.out[0]; ++j0)
        for (std::int64_t j1 = 0; j1 < g.out[1]; ++j1)
          for (std::int64_t j2 = 0; j2 < g.out[2]; ++j2) {
            const std::int64_t grp = oc / g.ocg;
            double acc = B[oc];
            for (std::int64_t ci = 0; ci < g.cg; ++ci)
              for (std::int64_t k0 = 0; k0 < g.k[0]; ++k0)
                for (std::int64_t k1 = 0; k1 < g.k[1]; ++k1)
                  for (std::int64_t k2 = 0; k2 < g.k[2]; ++k2) {
                    const std::int64_t i0 = j0 * g.s[0] - g.pl[0] + k0 * g.d[0];
                    const std::int64_t i1 = j1 * g.s[1] - g.pl[1] + k1 * g.d[1];
                    const std::int64_t i2 = j2 * g.s[2] - g.pl[2] + k2 * g.d[2];
                    if (i0 < 0 || i0 >= g.in[0] || i1 < 0 || i1 >= g.in[1] || i2 < 0 ||
                        i2 >= g.in[2])
                      continue;  // zero padding
                    const std::int64_t c = grp * g.cg + ci;
                    const double xv =
                        X[(((n * g.c + c) * g.in[0] + i0) * g.in[1] + i1) * g.in[2] + i2];
                    const double wv =
                        W[(((oc * g.cg + ci) * g.k[0] + k0) * g.k[1] + k1) * g.k[2] + k2];
                    acc += xv * wv;
                  }
            Y[yi++] = acc;
          }
  return y;
}

Tensor ref_conv_grad_input(const Tensor& grad_out, const Tensor& w, const Shape& input_shape,
                           const ConvParams& p) {
  const Geometry g = geometry(input_shape, w.shape(), p);
  if (grad_out.shape() != out_shape(input_shape, g))
    throw std::invalid_argument("reference conv: grad_out shape");
  const auto GY = as_f64(grad_out), W = as_f64(w);
  Tensor gx = Tensor::zeros(input_shape, DType::F64);
  double* GX = gx.data<double>();
  // Gather form: input position i receives from output j and tap k exactly when
  // j*s - pl + k*d == i, i.e. j = (i + pl - k*d) / s when that divides evenly.
  auto tap = [&](std::int64_t t, std::int64_t i, std::int64_t k) -> std::int64_t {
    const std::int64_t num = i + g.pl[t] - k * g.d[t];
    if (num < 0 || num % g.s[t] != 0) return -1;
    const std::int64_t j = num / g.s[t];
    return j < g.out[t] ? j : -1;
  };
  std::int64_t xi = 0;
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t c = 0; c < g.c; ++c)
      for (std::int64_t i0 = 0; i0 < g.in[0]; ++i0)
        for (std::int64_t i1 = 0; i1 < g.in[1]; ++i1)
          for (std::int64_t i2 = 0; i2 < g.in[2]; ++i2) {
            const std::int64_t grp = c / g.cg, ci = c % g.cg;
            double acc = 0;
            for (std::int64_t oc = grp * g.ocg; oc < (grp + 1) * g.ocg; ++oc)
              for (std::int64_t k0 = 0; k0 < g.k[0]; ++k0) {
                const std::int64_t j0 = tap(0, i0, k0);
                if (j0 < 0) continue;
                for (std::int64_t k1 = 0; k1 < g.k[1]; ++k1) {
                  const std::int64_t j1 = tap(1, i1, k1);
                  if (j1 < 0) continue;
                  for (std::int64_t k2 = 0; k2 < g.k[2]; ++k2) {
                    const std::int64_t j2 = tap(2, i2, k2);
                    if (j2 < 0) continue;
                    const double gy =
                        GY[(((n * g.oc + oc) * g.out[0] + j0) * g.out[1] + j1) * g.out[2] + j2];
                    const double wv =
                        W[(((oc * g.cg + ci) * g.k[0] + k0) * g.k[1] + k1) * g.k[2] + k2];
                    acc += gy * wv;
                  }
                }
              }
            GX[xi++] = acc;
          }
  return gx;
}

Tensor ref_conv_grad_weight(const Tensor& grad_out, const Tensor& x, const Shape& weight_shape,
                            const ConvParams& p) {
  const Geometry g = geometry(x.shape(), weight_shape, p);
  if (grad_out.shape() != out_shape(x.shape(), g))
    throw std::invalid_argument("reference conv: grad_out shape");
  const auto GY = as_f64(grad_out), X = as_f64(x);
  Tensor gw = Tensor::zeros(weight_shape, DType::F64);
  double* GW = gw.data<double>();
  std::int64_t wi = 0;
  for (std::int64_t oc = 0; oc < g.oc; ++oc)
    for (std::int64_t ci = 0; ci < g.cg; ++ci)
      for (std::int64_t k0 = 0; k0 < g.k[0]; ++k0)
        for (std::int64_t k1 = 0; k1 < g.k[1]; ++k1)
          for (std::int64_t k2 = 0; k2 < g.k[2]; ++k2) {
            const std::int64_t c = (oc / g.ocg) * g.cg + ci;
            double acc = 0;
            for (std::int64_t n = 0; n < g.n; ++n)
              for (std::int64_t j0 = 0; j0 < g.out[0]; ++j0)
                for (std::int64_t j1 = 0; j1 < g.out[1]; ++j1)
                  for (std::int64_t j2 = 0; j2 < g.out[2]; ++j2) {
                    const std::int64_t i0 = j0 * g.s[0] - g.pl[0] + k0 * g.d[0];
                    const std::int64_t i1 = j1 * g.s[1] - g.pl[1] + k1 * g.d[1];
                    const std::int64_t i2 = j2 * g.s[2] - g.pl[2] + k2 * g.d[2];
                    if (i0 < 0 || i0 >= g.in[0] || i1 < 0 || i1 >= g.in[1] || i2 < 0 ||
                        i2 >= g.in[2])
                      continue;
                    acc += GY[(((n * g.oc + oc) * g.out[0] + j0) * g.out[1] + j1) * g.out[2] + j2] *
                           X[(((n * g.c + c) * g.in[0] + i0) * g.in[1] + i1) * g.in[2] + i2];
                  }
            GW[wi++] = acc;
          }
  return gw;
}

Tensor ref_conv_grad_bias(const Tensor& grad_out) {
  const auto GY = as_f64(grad_out);
  const std::int64_t n = grad_out.size(0), oc = grad_out.size(1);
  const std::int64_t inner = n * oc == 0 ? 0 : grad_out.numel() / (n * oc);
  Tensor gb = Tensor::zeros({oc}, DType::F64);
  double* GB = gb.data<double>();
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t c = 0; c < oc; ++c)
      for (std::int64_t k = 0; k < inner; ++k)
        GB[c] += GY[(i * oc + c) * inner + k];
  return gb;
}

}  // namespace dtensor::reference
