#include "ops/norm/norm_kernels.h"

#include <cmath>
#include <cstring>

namespace dtensor::norm {

LocalLayout LocalLayout::of(NormKind kind, const Shape& local, std::int64_t channels,
                            std::int64_t num_groups) {
  LocalLayout L;
  L.kind = kind;
  L.n = local[0];
  L.c = local[1];
  L.s = 1;
  for (std::size_t d = 2; d < local.size(); ++d)
    L.s *= local[d];
  if (kind == NormKind::Group) L.group_size = channels / num_groups;
  return L;
}

std::int64_t LocalLayout::stats() const {
  switch (kind) {
    case NormKind::Batch:
      return c;
    case NormKind::Instance:
      return n * c;
    case NormKind::Group:
      return n * (c / group_size);
    case NormKind::Layer:
      return n;
  }
  return 0;
}

std::vector<double> to_doubles(const Tensor& t) {
  std::vector<double> out(static_cast<std::size_t>(t.numel()));
  if (out.empty()) return out;
  const Tensor d = t.to(DType::F64);
  std::memcpy(out.data(), d.data<double>(), out.size() * sizeof(double));
  return out;
}

Tensor from_doubles(const std::vector<double>& v, const Shape& shape, DType dtype) {
  Tensor d = Tensor::empty(shape, DType::F64);
  if (!v.empty()) std::memcpy(d.data<double>(), v.data(), v.size() * sizeof(double));
  return dtype == DType::F64 ? d : d.to(dtype);
}

// Calls f(index, stat, param) for every element, in memory order.
template <typename F>
void for_each_element(const LocalLayout& L, F&& f) {
  std::int64_t at = 0;
  for (std::int64_t i = 0; i < L.n; ++i)
    for (std::int64_t ch = 0; ch < L.c; ++ch) {
      const std::int64_t st = L.stat(i, ch);
      for (std::int64_t sp = 0; sp < L.s; ++sp, ++at)
        f(at, st, L.param(ch, sp));
    }
}

Tensor local_moments(const std::vector<double>& x, const LocalLayout& L) {
  Tensor m = Tensor::zeros({L.stats(), 3}, DType::F64);
  double* r = m.data<double>();
  for_each_element(L, [&](std::int64_t at, std::int64_t st, std::int64_t) {
    r[3 * st] += 1;
    r[3 * st + 1] += x[at];
  });
  for (std::int64_t st = 0; st < L.stats(); ++st)
    if (r[3 * st] > 0) r[3 * st + 1] /= r[3 * st];
  for_each_element(L, [&](std::int64_t at, std::int64_t st, std::int64_t) {
    const double d = x[at] - r[3 * st + 1];
    r[3 * st + 2] += d * d;
  });
  return m;
}

Stats stats_from_moments(const Tensor& moments, double eps) {
  const std::int64_t k = moments.size(0);
  const double* r = moments.data<double>();
  Stats st;
  for (std::int64_t i = 0; i < k; ++i) {
    const double n = r[3 * i], var = n > 0 ? r[3 * i + 2] / n : 0.0;
    st.count.push_back(n);
    st.mean.push_back(r[3 * i + 1]);
    st.invstd.push_back(1.0 / std::sqrt(var + eps));
  }
  return st;
}

Stats stats_from_running(const std::vector<double>& mean, const std::vector<double>& var,
                         double eps) {
  Stats st;
  st.mean = mean;
  for (double v : var)
    st.invstd.push_back(1.0 / std::sqrt(v + eps));
  st.count.assign(mean.size(), 0.0);
  return st;
}

std::vector<double> normalize(const std::vector<double>& x, const LocalLayout& L, const Stats& st,
                              const std::vector<double>& weight, const std::vector<double>& bias) {
  std::vector<double> y(x.size());
  for_each_element(L, [&](std::int64_t at, std::int64_t s, std::int64_t p) {
    double v = (x[at] - st.mean[s]) * st.invstd[s];
    if (!weight.empty()) v *= weight[p];
    if (!bias.empty()) v += bias[p];
    y[at] = v;
  });
  return y;
}

void param_grads(const std::vector<double>& dy, const std::vector<double>& x, const LocalLayout& L,
                 const Stats& st, std::vector<double>* grad_weight,
                 std::vector<double>* grad_bias) {
  if (grad_weight) grad_weight->assign(static_cast<std::size_t>(L.params()), 0.0);
  if (grad_bias) grad_bias->assign(static_cast<std::size_t>(L.params()), 0.0);
  for_each_element(L, [&](std::int64_t at, std::int64_t s, std::int64_t p) {
    if (grad_weight) (*grad_weight)[p] += dy[at] * (x[at] - st.mean[s]) * st.invstd[s];
    if (grad_bias) (*grad_bias)[p] += dy[at];
  });
}

Tensor grad_sums(const std::vector<double>& dy, const std::vector<double>& x, const LocalLayout& L,
                 const Stats& st, const std::vector<double>& weight) {
  Tensor sums = Tensor::zeros({L.stats(), 2}, DType::F64);
  double* r = sums.data<double>();
  for_each_element(L, [&](std::int64_t at, std::int64_t s, std::int64_t p) {
    const double g = weight.empty() ? dy[at] : dy[at] * weight[p];
    r[2 * s] += g;
    r[2 * s + 1] += g * (x[at] - st.mean[s]) * st.invstd[s];
  });
  return sums;
}

std::vector<double> grad_input_batch_stats(const std::vector<double>& dy,
                                           const std::vector<double>& x, const LocalLayout& L,
                                           const Stats& st, const std::vector<double>& weight,
                                           const Tensor& sums) {
  const double* r = sums.data<double>();
  std::vector<double> gx(x.size());
  for_each_element(L, [&](std::int64_t at, std::int64_t s, std::int64_t p) {
    const double n = st.count[s];
    const double g = weight.empty() ? dy[at] : dy[at] * weight[p];
    const double xhat = (x[at] - st.mean[s]) * st.invstd[s];
    gx[at] = st.invstd[s] * (g - r[2 * s] / n - xhat * (r[2 * s + 1] / n));
  });
  return gx;
}

std::vector<double> grad_input_fixed_stats(const std::vector<double>& dy, const LocalLayout& L,
                                           const Stats& st, const std::vector<double>& weight) {
  std::vector<double> gx(dy.size());
  for_each_element(L, [&](std::int64_t at, std::int64_t s, std::int64_t p) {
    gx[at] = st.invstd[s] * (weight.empty() ? dy[at] : dy[at] * weight[p]);
  });
  return gx;
}

}  // namespace dtensor::norm
