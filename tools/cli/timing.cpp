#include "tools/cli/timing.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <string>

#include <unistd.h>

#include "dtensor/core/distributed.h"
#include "dtensor/cuda.h"

namespace dtensor::cli {
namespace {

using Clock = std::chrono::steady_clock;

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
// absorb (a local kernel, which waits for nobody, would not). So rank 0
// names an instant 20 ms ahead on the shared clock and every rank spins
// until then.
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

}  // namespace

double median(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

std::vector<double> interleaved_medians(DeviceType device, int iters, int warmup,
                                        const std::vector<std::function<void()>>& fns) {
  const bool cuda = device == DeviceType::CUDA;
  auto& pg = *world();
  const bool shared_clock = one_host();
  const auto n = static_cast<std::int64_t>(fns.size());
  Tensor times = Tensor::zeros({n, static_cast<std::int64_t>(iters)}, DType::F64);
  for (int i = 0; i < warmup + iters; ++i)
    for (std::int64_t f = 0; f < n; ++f) {
      if (cuda) cuda::synchronize();  // earlier work is not this run's
      start_together(pg, shared_clock);
      const auto t0 = Clock::now();
      fns[static_cast<std::size_t>(f)]();
      if (cuda) cuda::synchronize();
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (i >= warmup) times.data<double>()[f * iters + (i - warmup)] = ms;
    }
  pg.allreduce(times, ReduceOp::Max);
  std::vector<double> out;
  for (std::int64_t f = 0; f < n; ++f)
    out.push_back(median(std::vector<double>(times.data<double>() + f * iters,
                                             times.data<double>() + (f + 1) * iters)));
  return out;
}

}  // namespace dtensor::cli
