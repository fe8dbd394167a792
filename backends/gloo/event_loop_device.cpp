// Why the event loop runs under SCHED_BATCH.
//
// Gloo's TCP pairs are driven by one event-loop thread per device, and that
// thread handles a socket's events only if it can take the pair's mutex at
// once (Pair::handleEvents uses try_to_lock); otherwise it returns to
// epoll_wait, which, level-triggered, reports the same event again: it spins
// until the mutex is free. The mutex is held by the rank's own thread while
// it posts a send or receive, and posting writes to a socket, which wakes the
// peer's loop thread. With both ranks posting at once on a 2-core machine,
// each woken loop thread preempted the other rank's thread in the middle of
// its post, still holding its mutex, and both loops spun on a mutex whose
// holder could not run until the next scheduler tick (4 ms at HZ=250). perf
// sched showed the loop threads "running" 3-7 ms without progress; the
// 24-byte all-gather after computation took p50 2-3 ms.
//
// SCHED_BATCH threads never preempt on wake-up; they run when a CPU is free
// (a rank waiting for its messages frees its own) or at the next tick. The
// same all-gather then took p50 39-54 us (dtensor-bench-latency, P = 2).
// Threads inherit the creating thread's policy, so the device is created on
// a short-lived thread set to SCHED_BATCH, leaving the caller's untouched.
// Unprivileged processes may choose SCHED_BATCH; if it is refused, the loop
// keeps the normal policy.
#include "backends/gloo/event_loop_device.h"

#include <sched.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <thread>

#include <gloo/transport/tcp/device.h>

#include "dtensor/core/config.h"
#include "dtensor/core/errors.h"
#include "dtensor/core/logging.h"

namespace dtensor::gloo_backend {
namespace {

// DTENSOR_GLOO_LOOP: "batch" (the default) or "normal".
bool batch_loop() {
  return config().gloo_loop == Config::GlooLoop::Batch;
}

}  // namespace

std::shared_ptr<::gloo::transport::Device> create_tcp_device(
    const ::gloo::transport::tcp::attr& attr) {
  const bool batch = batch_loop();
  std::shared_ptr<::gloo::transport::Device> device;
  std::exception_ptr error;
  std::thread maker([&] {
    if (batch) {
      sched_param none{};
      if (sched_setscheduler(0, SCHED_BATCH, &none) != 0)
        log::debug("gloo: SCHED_BATCH refused for the event loop ({})", std::strerror(errno));
    }
    try {
      device = ::gloo::transport::tcp::CreateDevice(attr);
    } catch (...) {
      error = std::current_exception();
    }
  });
  maker.join();
  if (error) std::rethrow_exception(error);
  return device;
}

}  // namespace dtensor::gloo_backend
