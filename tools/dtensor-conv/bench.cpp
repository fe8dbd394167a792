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

// Runs each of `fns` o.warmup + o.iters times, interleaved: iteration i runs
// fns[0], then fns[1], ..., each started by all ranks together after a
// barrier. Returns, per function, the median over timed iterations of the
// slowest rank's time. Interleaving puts the distributed pass and the local
// kernel under the same conditions, so their ratio survives a machine whose
// load drifts during the run. On CUDA the work is queued asynchronously: each
// run ends when the device has finished it (cuda::synchronize), else only the
// launches would be timed.
std::vector<double> interleaved_medians(const Options& o,
                                        const std::vector<std::function<void()>>& fns) {
  const bool cuda = o.device == DeviceType::CUDA;
  auto& pg = *world();
  const auto n = static_cast<std::int64_t>(fns.size());
  Tensor times = Tensor::zeros({n, static_cast<std::int64_t>(o.iters)}, DType::F64);
  for (int i = 0; i < o.warmup + o.iters; ++i)
    for (std::int64_t f = 0; f < n; ++f) {
      pg.barrier();
      if (cuda) cuda::synchronize();  // earlier work is not this run's
      const auto t0 = Clock::now();
      fns[static_cast<std::size_t>(f)]();
      if (cuda) cuda::synchronize();
      if (i >= o.warmup) times.data<double>()[f * o.iters + (i - o.warmup)] = ms_since(t0);
    }
  pg.allreduce(times, ReduceOp::Max);
  std::vector<double> out;
  for (std::int64_t f = 0; f < n; ++f)
    out.push_back(median(std::vector<double>(times.data<double>() + f * o.iters,
                                             times.data<double>() + (f + 1) * o.iters)));
  return out;
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
  // The local kernel alone, on this rank's window with its local padding; a
  // rank without output times nothing (0 ms) but still takes part.
  const LocalWindow win = local_window(o.input, o.weight_shape(), params, mesh.shape(),
                                       o.placements, *mesh.get_coordinate());
  const auto kernels = local_conv_kernels(mesh.device(), o.dtype);
  const Tensor& w = ops.weight.to_local();
  const Tensor b = ops.bias ? ops.bias->to_local() : Tensor();
  const Tensor x =
      win.computes ? Tensor::rand(win.input, o.dtype, seeds.input).to(mesh.device()) : Tensor();

  std::optional<DTensor> y;
  Tensor yl;
  const auto fwd =
      interleaved_medians(o, {[&] { y = convolution(ops.input, ops.weight, ops.bias, params); },
                              [&] {
                                if (win.computes) yl = kernels->forward(x, w, b, win.params);
                              }});
  r.fwd_ms = fwd[0];
  r.local_fwd_ms = fwd[1];
  if (o.backward) {
    const DTensor gy = make_grad_output(o, *y, seeds);
    const ConvOutputMask mask{true, true, o.bias};
    const Tensor gyl = win.computes
                           ? Tensor::rand(yl.shape(), o.dtype, seeds.grad_output).to(mesh.device())
                           : Tensor();
    const auto bwd = interleaved_medians(
        o, {[&] { convolution_backward(gy, ops.input, ops.weight, params, mask); },
            [&] {
              if (!win.computes) return;
              kernels->backward_data(gyl, w, x.shape(), win.params);
              kernels->backward_weights(gyl, x, w.shape(), win.params, o.bias);
            }});
    r.bwd_ms = bwd[0];
    r.local_bwd_ms = bwd[1];
  }
  return r;
}

}  // namespace dtensor::conv_cli
