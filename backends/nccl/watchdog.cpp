#include "backends/nccl/watchdog.h"

#include <algorithm>
#include <thread>

#include <fmt/format.h>

#include "dtensor/core/errors.h"

namespace dtensor::nccl_backend {

void watch(std::string_view what, const std::function<Poll()>& poll,
           const std::function<void()>& abort, std::chrono::milliseconds timeout) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + timeout;
  std::chrono::microseconds sleep{20};
  for (;;) {
    Poll p = poll();
    if (p.status == PollStatus::Done) return;
    if (p.status == PollStatus::Failed) {
      abort();
      throw CommError("nccl", fmt::format("{}: {}", what, p.error));
    }
    if (clock::now() >= deadline) {
      // Aborting releases the GPU kernels still waiting for the peer, so the
      // stream (and the other groups on it) can make progress again.
      abort();
      throw TimeoutError("nccl", fmt::format("{}: no progress within {} ms; the communicator "
                                             "was aborted",
                                             what, timeout.count()));
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min<std::chrono::microseconds>(sleep * 2, std::chrono::milliseconds(1));
  }
}

}  // namespace dtensor::nccl_backend
