#include "tools/dtensor-conv/bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include <unistd.h>

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
// fns[0], then fns[1], ..., each started by all ranks together
// (start_together). Returns, per function, the median over timed iterations of the
// slowest rank's time. Interleaving puts the distributed pass and the local
// kernel under the same conditions, so their ratio survives a machine whose
// load drifts during the run. On CUDA the work is queued asynchronously: each
// run ends when the device has finished it (cuda::synchronize), else only the
// launches would be timed.
// Whether every rank runs on this host: then steady_clock (CLOCK_MONOTONIC)
// is one clock for all of them.
bool one_host() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  const double h = static_cast<double>(std::hash<std::string>()(name) % (1ull << 52));
  Tensor lo = Tensor::full({1}, h, DType::F64), hi = Tensor::full({1}, h, DType::F64);
  world()->allreduce(lo, ReduceOp::Min);
  world()->allreduce(hi, ReduceOp::Max);
  return lo.item({0}) == hi.item({0});
}

// Starts all ranks at one instant. After a barrier the ranks leave at
// different times: the last message wakes the others, and on a VM whose
// vCPUs halt while waiting (the machine of docs/benchmarks.md) that wake-up
// took 0.1-4 ms, which the first collective of the timed pass would then
// absorb (a local kernel, which waits for nobody, would not). So rank 0 names an instant 20 ms ahead on the
// shared clock and every rank spins until then.
void start_together(ProcessGroup& pg, bool shared_clock) {
  pg.barrier();
  if (!shared_clock) return;
  using std::chrono::nanoseconds;
  const double now = static_cast<double>(
      std::chrono::duration_cast<nanoseconds>(Clock::now().time_since_epoch()).count());
  Tensor at = Tensor::full({1}, now + 20e6, DType::F64);
  pg.broadcast(at, 0);
  const Clock::time_point start{nanoseconds(static_cast<std::int64_t>(at.item({0})))};
  while (Clock::now() < start) {
  }
}

std::vector<double> interleaved_medians(const Options& o,
                                        const std::vector<std::function<void()>>& fns) {
  const bool cuda = o.device == DeviceType::CUDA;
  auto& pg = *world();
  const bool shared_clock = one_host();
  const auto n = static_cast<std::int64_t>(fns.size());
  Tensor times = Tensor::zeros({n, static_cast<std::int64_t>(o.iters)}, DType::F64);
  for (int i = 0; i < o.warmup + o.iters; ++i)
    for (std::int64_t f = 0; f < n; ++f) {
      if (cuda) cuda::synchronize();  // earlier work is not this run's
      start_together(pg, shared_clock);
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
