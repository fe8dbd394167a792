#include "ops/norm/norm_stats.h"

#include "dtensor/ops/kernels/norm_stats.h"

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
  const std::int64_t k = moments.numel() / width;
  Stats st{Tensor::empty({k}, DType::F64), Tensor::empty({k}, DType::F64),
           Tensor::empty({k}, DType::F64)};
  run_kernel(kernels::kNormStats, DeviceType::CPU, DType::F64,
             {moments, width, Tensor(), eps, st.count, st.mean, st.invstd});
  return st;
}

Stats stats_from_running(const Tensor& mean, const Tensor& var, double eps) {
  const Tensor m = mean.to(Device::cpu()).to(DType::F64);
  const Tensor v = var.to(Device::cpu()).to(DType::F64);
  const std::int64_t k = m.numel();
  Stats st{m, Tensor::empty({k}, DType::F64), Tensor::zeros({k}, DType::F64)};
  run_kernel(kernels::kNormStats, DeviceType::CPU, DType::F64,
             {Tensor(), 0, v, eps, Tensor(), Tensor(), st.invstd});
  return st;
}

GradMeans grad_means(const Tensor& packed, const Stats& st) {
  const std::int64_t k = st.mean.numel();
  GradMeans out{Tensor::empty({k}, DType::F64), Tensor::empty({k}, DType::F64)};
  run_kernel(kernels::kNormGradMeans, DeviceType::CPU, DType::F64,
             {packed, st.count, st.mean, st.invstd, out.mean_g, out.mean_gxhat});
  return out;
}

DTensor wrap_small(const Tensor& f64, const DTensorSpec& spec) {
  return DTensor(f64.view(spec.local_shape()).to(spec.dtype()).to(spec.mesh().device()), spec);
}

RunningStats updated_running_stats(const Tensor& mean, const Tensor& var, const Tensor& moments,
                                   std::int64_t width, double momentum) {
  RunningStats out{mean.to(Device::cpu()).to(DType::F64).clone(),
                   var.to(Device::cpu()).to(DType::F64).clone()};
  run_kernel(kernels::kNormRunningUpdate, DeviceType::CPU, DType::F64,
             {moments, width, momentum, out.mean, out.var});
  return out;
}

}  // namespace dtensor::norm
