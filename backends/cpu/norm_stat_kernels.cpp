// CPU kernels of a normalisation's statistics (dtensor/ops/kernels/norm_stats.h):
// f64 host tensors of one row per statistic, whatever device the data is on.
#include <algorithm>
#include <cmath>

#include "dtensor/ops/kernels/norm.h"
#include "dtensor/ops/kernels/norm_stats.h"

namespace dtensor::cpu {
namespace {

using namespace kernels;

constexpr std::int64_t kGradSumsWidth = 5;

void merge_records(const NormMergeRecordsArgs& a) {
  const std::int64_t k = a.out.numel(), members = a.all.numel() / k, w = a.width;
  const double* in = a.all.data<double>();
  double* out = a.out.data<double>();
  for (std::int64_t s = 0; s < k / w; ++s) {
    double m[3] = {0, 0, 0};  // the moments first: the shift needs the merged mean
    for (std::int64_t q = 0; q < members; ++q)
      merge_moments_into(m, in + q * k + w * s);
    double* o = out + w * s;
    std::copy(m, m + 3, o);
    if (w < kGradSumsWidth) continue;
    double g = 0, h = 0;
    for (std::int64_t q = 0; q < members; ++q) {
      const double* r = in + q * k + w * s;
      g += r[3];
      h += r[4] + (r[1] - m[1]) * r[3];
    }
    o[3] = g;
    o[4] = h;
  }
}

void stats(const NormStatsArgs& a) {
  double* invstd = a.invstd.data<double>();
  if (!a.records.defined()) {
    const double* var = a.running_var.data<double>();
    for (std::int64_t i = 0; i < a.invstd.numel(); ++i)
      invstd[i] = 1.0 / std::sqrt(var[i] + a.eps);
    return;
  }
  const double* r = a.records.data<double>();
  double* count = a.count.data<double>();
  double* mean = a.mean.data<double>();
  for (std::int64_t i = 0; i < a.invstd.numel(); ++i) {
    const double n = r[a.width * i], var = n > 0 ? r[a.width * i + 2] / n : 0.0;
    count[i] = n;
    mean[i] = r[a.width * i + 1];
    invstd[i] = 1.0 / std::sqrt(var + a.eps);
  }
}

void grad_means(const NormGradMeansArgs& a) {
  const double* count = a.count.data<double>();
  const double* mean = a.mean.data<double>();
  const double* invstd = a.invstd.data<double>();
  double* mean_g = a.mean_g.data<double>();
  double* mean_gxhat = a.mean_gxhat.data<double>();
  for (std::int64_t s = 0; s < a.mean.numel(); ++s) {
    const double* r = a.records.data<double>() + kGradSumsWidth * s;
    const double n = count[s] > 0 ? count[s] : 1.0;
    // sum(g * (x - mean)) around the statistics' mean, from the sum around
    // the record's own mean r[1].
    const double h = r[4] + (r[1] - mean[s]) * r[3];
    mean_g[s] = r[3] / n;
    mean_gxhat[s] = h * invstd[s] / n;
  }
}

void running_update(const NormRunningUpdateArgs& a) {
  const double* r = a.records.data<double>();
  double* mean = a.mean.data<double>();
  double* var = a.var.data<double>();
  for (std::int64_t ch = 0; ch < a.mean.numel(); ++ch) {
    const double n = r[a.width * ch];
    if (n == 0) continue;
    mean[ch] = (1 - a.momentum) * mean[ch] + a.momentum * r[a.width * ch + 1];
    var[ch] = (1 - a.momentum) * var[ch] + a.momentum * r[a.width * ch + 2] / (n - 1);
  }
}

struct Registrar {
  Registrar() {
    register_kernel(kNormMergeRecords, DeviceType::CPU, DType::F64,
                    KernelFunction<NormMergeRecordsArgs>(merge_records));
    register_kernel(kNormStats, DeviceType::CPU, DType::F64, KernelFunction<NormStatsArgs>(stats));
    register_kernel(kNormGradMeans, DeviceType::CPU, DType::F64,
                    KernelFunction<NormGradMeansArgs>(grad_means));
    register_kernel(kNormRunningUpdate, DeviceType::CPU, DType::F64,
                    KernelFunction<NormRunningUpdateArgs>(running_update));
  }
};
const Registrar registrar;

}  // namespace
}  // namespace dtensor::cpu
