// Latency of one small collective (the agreement check's 24-byte all-gather)
// right after a stretch of computation, against right after other
// communication: on a VM whose vCPUs the host deschedules, a round trip that
// follows computation can stall for a scheduling tick, and every distributed
// pass pays that once per round trip while a local kernel never does.
//
//   dtensor-run -n 2 build/bin/dtensor-bench-latency [--reps 60]
//
// Prints percentiles of the all-gather time (microseconds) after 0, 1 and 20
// ms of spinning; the ranks start each repetition together (one instant on
// the shared clock), as `dtensor-conv --bench` does. Then the cost of one
// point-to-point exchange between ranks 0 and 1, back to back.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "dtensor/dtensor.h"

namespace {

using Clock = std::chrono::steady_clock;

double now_ns() {
  return std::chrono::duration<double, std::nano>(Clock::now().time_since_epoch()).count();
}

void spin_until(double ns) {
  while (now_ns() < ns) {
  }
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 60;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::max(2, std::atoi(argv[i + 1]));
  using namespace dtensor;
  init_process_group();
  auto pg = world();
  const int n = pg->size();
  Tensor mine = Tensor::zeros({3}, DType::F64);
  Tensor all = Tensor::zeros({std::int64_t{3} * n}, DType::F64);
  for (double spin_ms : {0.0, 1.0, 20.0}) {
    std::vector<double> us;
    for (int i = 0; i < reps; ++i) {
      pg->barrier();
      Tensor at = Tensor::full({1}, now_ns() + 5e6, DType::F64);  // a common start
      pg->broadcast(at, 0);
      spin_until(at.item({0}));
      spin_until(now_ns() + spin_ms * 1e6);  // the "computation"
      const auto t0 = Clock::now();
      pg->allgather(mine, all, std::vector<std::int64_t>(n, 3));
      us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    std::sort(us.begin(), us.end());
    auto pct = [&](double p) { return us[static_cast<std::size_t>(p * (us.size() - 1))]; };
    if (pg->rank() == 0)
      std::printf(
          "after %4.0f ms of compute: all-gather p10 %7.0f us  p50 %7.0f us  p90 %7.0f us\n",
          spin_ms, pct(0.1), pct(0.5), pct(0.9));
  }
  // What the library spends per message, back to back: rank 0 and rank 1
  // exchange 24 bytes (one send, one receive each, through every wrapping
  // group and the transport) as fast as they can. The best of 3 blocks of
  // 20000.
  if (n >= 2 && pg->rank() < 2) {
    const int peer = 1 - pg->rank();
    Tensor out = Tensor::zeros({3}, DType::F64), in = Tensor::zeros({3}, DType::F64);
    double best = 1e30;
    for (int block = 0; block < 3; ++block) {
      constexpr int kExchanges = 20000;
      const auto t0 = Clock::now();
      for (int i = 0; i < kExchanges; ++i) {
        auto works = pg->batch_isend_irecv({P2POp::send(out, peer, 1), P2POp::recv(in, peer, 1)});
        wait_all(works);
      }
      best = std::min(
          best, std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / kExchanges);
    }
    if (pg->rank() == 0)
      std::printf("point-to-point exchange of 24 bytes, back to back: %.2f us\n", best);
  }
  destroy_process_group();
  return 0;
}
