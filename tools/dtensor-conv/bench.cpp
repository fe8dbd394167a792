#include "tools/dtensor-conv/bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>

#include "dtensor/core/distributed.h"
#include "dtensor/cuda.h"
#include "dtensor/ops/local_conv.h"
#include "tools/dtensor-conv/local_window.h"

namespace dtensor::conv_cli {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Times `fn` o.iters times after o.warmup untimed runs. With `together`, all
// ranks start each run after a barrier and the run's time is the slowest rank's.
// On CUDA the work is queued asynchronously: each run ends when the device has
// finished it (cuda::synchronize), else only the launches would be timed.
double timed_median(const Options& o, bool together, const std::function<void()>& fn) {
  const bool cuda = o.device == DeviceType::CUDA;
  auto& pg = *world();
  std::vector<double> times;
  for (int i = 0; i < o.warmup + o.iters; ++i) {
    if (together) pg.barrier();
    if (cuda) cuda::synchronize();  // earlier work is not this run's
    const auto t0 = Clock::now();
    fn();
    if (cuda) cuda::synchronize();
    if (i >= o.warmup) times.push_back(ms_since(t0));
  }
  if (together) {
    Tensor t = Tensor::empty({static_cast<std::int64_t>(times.size())}, DType::F64);
    std::copy(times.begin(), times.end(), t.data<double>());
    pg.allreduce(t, ReduceOp::Max);
    std::copy(t.data<double>(), t.data<double>() + t.numel(), times.begin());
  }
  return median(times);
}

double max_over_ranks(double v) {
  Tensor t = Tensor::full({1}, v, DType::F64);
  world()->allreduce(t, ReduceOp::Max);
  return t.item({0});
}

}  // namespace

double median(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

BenchTimes run_bench(const Options& o, const DeviceMesh& mesh, const Operands& ops,
                     const Seeds& seeds) {
  BenchTimes r;
  const ConvParams params = o.conv_params();
  std::optional<DTensor> y;
  r.fwd_ms =
      timed_median(o, true, [&] { y = convolution(ops.input, ops.weight, ops.bias, params); });
  if (o.backward) {
    const DTensor gy = make_grad_output(o, *y, seeds);
    const ConvOutputMask mask{true, true, o.bias};
    r.bwd_ms = timed_median(o, true,
                            [&] { convolution_backward(gy, ops.input, ops.weight, params, mask); });
  }

  // The local kernel alone, on this rank's window with its local padding.
  const LocalWindow win = local_window(o.input, o.weight_shape(), params, mesh.shape(),
                                       o.placements, *mesh.get_coordinate());
  double local_fwd = 0, local_bwd = 0;
  if (win.computes) {
    const auto kernels = local_conv_kernels(mesh.device(), o.dtype);
    const Tensor x = Tensor::rand(win.input, o.dtype, seeds.input).to(mesh.device());
    const Tensor& w = ops.weight.to_local();
    const Tensor b = ops.bias ? ops.bias->to_local() : Tensor();
    Tensor yl;
    local_fwd = timed_median(o, false, [&] { yl = kernels->forward(x, w, b, win.params); });
    if (o.backward) {
      const Tensor gy = Tensor::rand(yl.shape(), o.dtype, seeds.grad_output).to(mesh.device());
      local_bwd = timed_median(o, false, [&] {
        kernels->backward_data(gy, w, x.shape(), win.params);
        kernels->backward_weights(gy, x, w.shape(), win.params, o.bias);
      });
    }
  }
  r.local_fwd_ms = max_over_ranks(local_fwd);
  if (o.backward) r.local_bwd_ms = max_over_ranks(local_bwd);
  return r;
}

}  // namespace dtensor::conv_cli
