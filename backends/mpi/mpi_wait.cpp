#include "backends/mpi/mpi_wait.h"

#include <algorithm>
#include <thread>

#include <fmt/format.h>

#include "backends/mpi/mpi_runtime.h"
#include "dtensor/core/errors.h"

namespace dtensor::mpi_backend {

void check_mpi(int rc, const std::string& op) {
  if (rc == MPI_SUCCESS) return;
  // A broken connection reaches us as a communication or process failure.
  throw CommError("mpi", fmt::format("{}: connection failed (a peer may have died): {}", op,
                                     mpi_error_string(rc)));
}

[[noreturn]] void throw_timeout(const std::string& op, std::chrono::milliseconds timeout) {
  throw TimeoutError("mpi", fmt::format("{}: timed out: no completion within {} ms (the timeout, "
                                        "DTENSOR_TIMEOUT; a peer may be stuck or dead)",
                                        op, timeout.count()));
}

bool wait_bounded(MPI_Request& request, std::chrono::milliseconds timeout, const std::string& op,
                  MPI_Status* status) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const auto deadline = start + timeout;
  // MPI moves a message on only inside MPI calls (OpenMPI has no progress
  // thread): a large message is hundreds of fragments, each needing a call.
  // So the first kSpin of a wait polls back to back, yielding the CPU
  // between polls as MPI_Wait does; only a longer wait (a peer that is late)
  // sleeps between polls, 10 us doubling up to 1 ms.
  constexpr auto kSpin = std::chrono::milliseconds(200);
  constexpr auto kMaxPause = std::chrono::microseconds(1000);
  auto pause = std::chrono::microseconds(10);
  for (;;) {
    int done = 0;
    MPI_Status st;
    {
      auto lock = mpi_lock();
      check_mpi(MPI_Test(&request, &done, &st), op);
    }
    if (done) {
      if (status) *status = st;
      return true;
    }
    const auto now = clock::now();
    if (now >= deadline) return false;
    if (now - start < kSpin) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(std::min<clock::duration>(
        pause, std::chrono::duration_cast<clock::duration>(deadline - now)));
    pause = std::min(pause * 2, kMaxPause);
  }
}

}  // namespace dtensor::mpi_backend
