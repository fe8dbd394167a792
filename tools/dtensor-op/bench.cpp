#include "tools/dtensor-op/bench.h"

#include <chrono>
#include <functional>

#include "dtensor/core/distributed.h"
#include "dtensor/cuda.h"
#include "tools/dtensor-conv/bench.h"

namespace dtensor::op_cli {
namespace {

using Clock = std::chrono::steady_clock;

// Runs each of `fns` o.warmup + o.iters times, interleaved (iteration i runs
// fns[0], fns[1], ...), each started by all ranks after a barrier, so that the
// distributed and the local op see the same machine conditions. Returns per
// function the median over timed iterations of the slowest rank's time.
std::vector<double> interleaved_medians(const Options& o,
                                        const std::vector<std::function<void()>>& fns) {
  const bool cuda = o.device == DeviceType::CUDA;
  auto& pg = *world();
  const auto n = static_cast<std::int64_t>(fns.size());
  Tensor times = Tensor::zeros({n, static_cast<std::int64_t>(o.iters)}, DType::F64);
  for (int i = 0; i < o.warmup + o.iters; ++i)
    for (std::int64_t f = 0; f < n; ++f) {
      if (cuda) cuda::synchronize();
      pg.barrier();
      const auto t0 = Clock::now();
      fns[static_cast<std::size_t>(f)]();
      if (cuda) cuda::synchronize();
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (i >= o.warmup) times.data<double>()[f * o.iters + (i - o.warmup)] = ms;
    }
  pg.allreduce(times, ReduceOp::Max);
  std::vector<double> out;
  for (std::int64_t f = 0; f < n; ++f)
    out.push_back(conv_cli::median(std::vector<double>(times.data<double>() + f * o.iters,
                                                       times.data<double>() + (f + 1) * o.iters)));
  return out;
}

// Whether every rank says yes (a collective).
bool all_ranks(bool yes) {
  Tensor t = Tensor::full({1}, yes ? 1.0 : 0.0, DType::F64);
  world()->allreduce(t, ReduceOp::Min);
  return t.item({0}) == 1.0;
}

}  // namespace

BenchTimes run_bench(const Options& o, const DeviceMesh& mesh, const Operands& ops,
                     const Seeds& seeds) {
  BenchTimes r;
  // A mesh of this rank alone: only its member takes part in making it.
  const DeviceMesh own(mesh.device_type(), {1}, {get_rank()});
  const Operands local = local_operands(ops, own);

  // The local op may not apply to a shard (a kernel longer than the shard,
  // reflect padding >= its length): then no rank times it.
  std::optional<DTensor> y_local, gy_local;
  bool local_ok = true;
  try {
    y_local = run_forward(o, local).output;
    if (o.backward) {
      if (o.has_grad_output()) gy_local = make_grad_output(o, *y_local, seeds);
      run_backward(o, local, gy_local);
    }
  } catch (const Error&) {
    local_ok = false;
  }
  local_ok = all_ranks(local_ok);

  std::optional<DTensor> y;
  std::vector<std::function<void()>> fwd{[&] { y = run_forward(o, ops).output; }};
  if (local_ok) fwd.emplace_back([&] { run_forward(o, local); });
  const auto f = interleaved_medians(o, fwd);
  r.fwd_ms = f[0];
  if (local_ok) r.local_fwd_ms = f[1];
  if (o.backward) {
    std::optional<DTensor> gy;
    if (o.has_grad_output()) gy = make_grad_output(o, *y, seeds);
    std::vector<std::function<void()>> bwd{[&] { run_backward(o, ops, gy); }};
    if (local_ok) bwd.emplace_back([&] { run_backward(o, local, gy_local); });
    const auto b = interleaved_medians(o, bwd);
    r.bwd_ms = b[0];
    if (local_ok) r.local_bwd_ms = b[1];
  }
  return r;
}

}  // namespace dtensor::op_cli
