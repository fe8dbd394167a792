#include "ops/norm/norm_stats.h"

#include <cmath>

namespace dtensor::norm {

kernels::NormLayout layout_of(NormKind kind, const Shape& local, std::int64_t channels,
                              std::int64_t num_groups) {
  kernels::NormLayout L;
  L.n = local.at(0);
  L.c = local.at(1);
  L.s = 1;
  for (std::size_t d = 2; d < local.size(); ++d)
    L.s *= local[d];
  switch (kind) {
    case NormKind::Batch:
      break;  // one statistic per channel, shared by the samples
    case NormKind::Instance:
      L.stats_per_sample = L.c;
      break;
    case NormKind::Group:
      // Channel shards hold whole groups (norm_strategies.h).
      L.group_size = channels / num_groups;
      L.stats_per_sample = L.c / L.group_size;
      break;
    case NormKind::Layer:
      L.stats_per_sample = 1;
      L.group_size = L.c;
      L.elementwise_affine = true;
      break;
  }
  return L;
}

Stats stats_from_moments(const Tensor& moments, std::int64_t width, double eps) {
  const std::int64_t k = moments.size(0);
  const double* r = moments.data<double>();
  Stats st{Tensor::empty({k}, DType::F64), Tensor::empty({k}, DType::F64),
           Tensor::empty({k}, DType::F64)};
  for (std::int64_t i = 0; i < k; ++i) {
    const double n = r[width * i], var = n > 0 ? r[width * i + 2] / n : 0.0;
    st.count.data<double>()[i] = n;
    st.mean.data<double>()[i] = r[width * i + 1];
    st.invstd.data<double>()[i] = 1.0 / std::sqrt(var + eps);
  }
  return st;
}

Stats stats_from_running(const Tensor& mean, const Tensor& var, double eps) {
  const Tensor m = mean.to(Device::cpu()).to(DType::F64);
  const Tensor v = var.to(Device::cpu()).to(DType::F64);
  const std::int64_t k = m.numel();
  Stats st{m, Tensor::empty({k}, DType::F64), Tensor::zeros({k}, DType::F64)};
  for (std::int64_t i = 0; i < k; ++i)
    st.invstd.data<double>()[i] = 1.0 / std::sqrt(v.data<double>()[i] + eps);
  return st;
}

GradMeans grad_means(const Tensor& packed, const Stats& st) {
  const std::int64_t k = st.mean.numel();
  GradMeans out{Tensor::empty({k}, DType::F64), Tensor::empty({k}, DType::F64)};
  const double* count = st.count.data<double>();
  for (std::int64_t s = 0; s < k; ++s) {
    const double* r = packed.data<double>() + 5 * s;
    const double n = count[s] > 0 ? count[s] : 1.0;
    // sum(g * (x - mean)) around the statistics' mean, from the sum around
    // the row's own mean r[1].
    const double h = r[4] + (r[1] - st.mean.data<double>()[s]) * r[3];
    out.mean_g.data<double>()[s] = r[3] / n;
    out.mean_gxhat.data<double>()[s] = h * st.invstd.data<double>()[s] / n;
  }
  return out;
}

DTensor wrap_small(const Tensor& f64, const DTensorSpec& spec) {
  return DTensor(f64.view(spec.local_shape()).to(spec.dtype()).to(spec.mesh().device()), spec);
}

RunningStats updated_running_stats(const Tensor& mean, const Tensor& var, const Tensor& moments,
                                   std::int64_t width, double momentum) {
  RunningStats out{mean.to(Device::cpu()).to(DType::F64).clone(),
                   var.to(Device::cpu()).to(DType::F64).clone()};
  const double* r = moments.data<double>();
  for (std::int64_t ch = 0; ch < out.mean.numel(); ++ch) {
    const double n = r[width * ch];
    if (n == 0) continue;
    double& m = out.mean.data<double>()[ch];
    double& v = out.var.data<double>()[ch];
    m = (1 - momentum) * m + momentum * r[width * ch + 1];
    v = (1 - momentum) * v + momentum * r[width * ch + 2] / (n - 1);
  }
  return out;
}

}  // namespace dtensor::norm
