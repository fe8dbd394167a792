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
//
// Why a send first yields the CPU (let_event_loop_catch_up).
//
// Gloo's point-to-point messages meet in a rendezvous: the receiver sends a
// "ready to receive" notice, and a send goes out at once, from the posting
// thread, only if the sender's event loop has already read that notice.
// Otherwise Gloo queues the data for the loop, which sends it when it next
// runs. Under SCHED_BATCH that is when this rank's thread blocks, so after
// computation, with both ranks of an exchange posting at about the same time,
// neither had read the other's notice: each rank's data left only when it
// waited, and the waits took a round trip of loop wake-ups. Yielding once
// before a send lets the loop read the notices that came in meanwhile (it
// runs only if it has something to do), so the later of the two ranks sends
// directly. At P = 2 on 2x8x128x128 the rank's time blocked in receives fell
// from 1.6 to 0.8 ms a step (docs/performance.md).
#include "backends/gloo/event_loop_device.h"

#include <sched.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <thread>

#include <gloo/transport/tcp/device.h>

#include "core/detail/helper_thread.h"
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

void let_event_loop_catch_up() {
  if (batch_loop() && !detail::on_helper_thread()) sched_yield();
}

}  // namespace dtensor::gloo_backend
