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
// from 1.6 to 0.8 ms a step (docs/performance-p2-step.md).
//
// Why the loop can be hurried (EventLoopHurry).
//
// Gloo's loop sleeps in epoll_wait for up to 10 ms when idle, and its
// teardown waits for the loop to turn: closing a pair takes its socket out of
// epoll and then waits for the loop's next turn (so that its handler is not
// called after it returns), and the device's end sets a flag and joins the
// loop thread. At the exit of a P = 2 job that was two idle turns, ~20 ms
// of a process's ~50 (strace: epoll_ctl DEL, then 8.7 ms in futex; the join
// 10.5 ms). Each device gets an eventfd in its loop whose handler does
// nothing and never reads it: while the eventfd holds a count, epoll_wait
// (level-triggered) returns at once and the loop turns back to back. Writing
// it hurries the loop; reading it back calms it, so a subgroup's teardown
// does not leave the world's loop spinning.
#include "backends/gloo/event_loop_device.h"

#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include <gloo/transport/tcp/device.h>

#include "core/detail/helper_thread.h"
#include "core/detail/thread_name.h"
#include "dtensor/core/config.h"
#include "dtensor/core/errors.h"
#include "dtensor/core/logging.h"

namespace dtensor::gloo_backend {
namespace {

// DTENSOR_GLOO_LOOP: "batch" (the default) or "normal".
bool batch_loop() {
  return config().gloo_loop == Config::GlooLoop::Batch;
}

// The eventfd in a device's loop (see the top of the file). Registered for
// the device's whole life; it must outlive the loop, whose last turns may
// still report it.
class LoopWaker final : public ::gloo::transport::tcp::Handler {
 public:
  explicit LoopWaker(::gloo::transport::tcp::Device& device)
      : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (fd_ >= 0) device.registerDescriptor(fd_, EPOLLIN, this);
  }
  ~LoopWaker() override {
    if (fd_ >= 0) close(fd_);
  }
  LoopWaker(const LoopWaker&) = delete;
  LoopWaker& operator=(const LoopWaker&) = delete;

  // Never reads: the count stays until calm() takes it.
  void handleEvents(int) override {}

  void hurry() {
    std::lock_guard lock(mutex_);
    if (fd_ < 0 || hurried_++ > 0) return;
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = write(fd_, &one, sizeof one);
  }
  void calm() {
    std::lock_guard lock(mutex_);
    if (fd_ < 0 || --hurried_ > 0) return;
    std::uint64_t count = 0;
    [[maybe_unused]] const ssize_t n = read(fd_, &count, sizeof count);
  }
  // Registered: unregistering waits for a turn of the loop.
  void unregister(::gloo::transport::tcp::Device& device) {
    if (fd_ >= 0) device.unregisterDescriptor(fd_, this);
  }

 private:
  const int fd_;
  std::mutex mutex_;
  int hurried_ = 0;
};

// The wakers by device, for EventLoopHurry (which is given the device).
// Never destroyed: a program that exits without destroy_process_group()
// ends its world group in the library's static destructors, which run in
// the reverse order of construction, and these were made after it (at the
// first device); a destroyed map there was a use after free at exit.
std::mutex& wakers_mutex() {
  static auto* m = new std::mutex;
  return *m;
}
std::map<const ::gloo::transport::Device*, LoopWaker*>& wakers() {
  static auto* w = new std::map<const ::gloo::transport::Device*, LoopWaker*>;
  return *w;
}
LoopWaker* waker_of(const ::gloo::transport::Device* device) {
  std::lock_guard lock(wakers_mutex());
  const auto it = wakers().find(device);
  return it == wakers().end() ? nullptr : it->second;
}

// What create_tcp_device hands out (through an aliasing pointer): the device
// and its waker, ended in that order with the loop hurried.
struct WakeableDevice {
  std::shared_ptr<::gloo::transport::tcp::Device> device;
  std::unique_ptr<LoopWaker> waker;

  ~WakeableDevice() {
    {
      std::lock_guard lock(wakers_mutex());
      wakers().erase(device.get());
    }
    waker->hurry();
    // The last owner (the groups' connections, which hold the device too,
    // are gone before the groups): the device ends here, joining a loop that
    // still turns on the waker. Otherwise the waker leaves the loop first.
    if (device.use_count() != 1) waker->unregister(*device);
    device.reset();
  }
};

}  // namespace

EventLoopHurry::EventLoopHurry(const std::shared_ptr<::gloo::transport::Device>& device)
    : device_(device.get()) {}

void EventLoopHurry::start() {
  if (started_) return;
  started_ = true;
  if (LoopWaker* w = waker_of(device_)) w->hurry();
}

EventLoopHurry::~EventLoopHurry() {
  if (!started_) return;
  if (LoopWaker* w = waker_of(device_)) w->calm();
}

std::shared_ptr<::gloo::transport::Device> create_tcp_device(
    const ::gloo::transport::tcp::attr& attr) {
  const bool batch = batch_loop();
  std::shared_ptr<::gloo::transport::Device> device;
  std::exception_ptr error;
  std::thread maker([&] {
    // Gloo's loop thread, started by CreateDevice, inherits this name.
    detail::name_this_thread("dtensor-gloo");
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
  auto tcp = std::dynamic_pointer_cast<::gloo::transport::tcp::Device>(device);
  if (!tcp) return device;
  auto owner = std::make_shared<WakeableDevice>();
  owner->device = std::move(tcp);
  owner->waker = std::make_unique<LoopWaker>(*owner->device);
  {
    std::lock_guard lock(wakers_mutex());
    wakers()[owner->device.get()] = owner->waker.get();
  }
  ::gloo::transport::Device* const raw = owner->device.get();
  return std::shared_ptr<::gloo::transport::Device>(std::move(owner), raw);
}

void let_event_loop_catch_up() {
  if (batch_loop() && !detail::on_helper_thread()) sched_yield();
}

}  // namespace dtensor::gloo_backend
