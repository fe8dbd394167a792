#include "tools/dtensor-op/bench.h"

#include <functional>

#include "dtensor/core/distributed.h"
#include "tools/cli/timing.h"

namespace dtensor::op_cli {
namespace {

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
  const auto f = cli::interleaved_medians(o.device, o.iters, o.warmup, fwd);
  r.fwd_ms = f[0];
  if (local_ok) r.local_fwd_ms = f[1];
  if (o.backward) {
    std::optional<DTensor> gy;
    if (o.has_grad_output()) gy = make_grad_output(o, *y, seeds);
    std::vector<std::function<void()>> bwd{[&] { run_backward(o, ops, gy); }};
    if (local_ok) bwd.emplace_back([&] { run_backward(o, local, gy_local); });
    const auto b = cli::interleaved_medians(o.device, o.iters, o.warmup, bwd);
    r.bwd_ms = b[0];
    if (local_ok) r.local_bwd_ms = b[1];
  }
  return r;
}

}  // namespace dtensor::op_cli
