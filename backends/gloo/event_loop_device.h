// The Gloo TCP device, created so that its event-loop thread does not preempt
// the thread computing next to it (DTENSOR_GLOO_LOOP, docs/performance-p2-step.md).
#pragma once

#include <memory>

#include <gloo/transport/device.h>
#include <gloo/transport/tcp/attr.h>

namespace dtensor::gloo_backend {

/// ::gloo::transport::tcp::CreateDevice(attr), with the device's event-loop
/// thread under SCHED_BATCH unless DTENSOR_GLOO_LOOP=normal, and a way to
/// hurry its loop (EventLoopHurry). Rethrows what CreateDevice throws.
std::shared_ptr<::gloo::transport::Device> create_tcp_device(
    const ::gloo::transport::tcp::attr& attr);

/// Between start() and its end, the event loop of `device` (one from
/// create_tcp_device; null or another: nothing happens) turns at once
/// instead of sleeping in epoll_wait. Gloo's teardown waits for a turn of
/// the loop (closing a pair returns only after the loop's next turn), and
/// an idle loop turns every 10 ms: a group starts one before its
/// connections go and ends it after, and the device's own end, which joins
/// the loop, is hurried the same way: each process of a P = 2 job exits
/// ~15 ms sooner.
class EventLoopHurry {
 public:
  explicit EventLoopHurry(const std::shared_ptr<::gloo::transport::Device>& device);
  ~EventLoopHurry();
  EventLoopHurry(const EventLoopHurry&) = delete;
  EventLoopHurry& operator=(const EventLoopHurry&) = delete;

  void start();  // once; later calls do nothing

 private:
  const ::gloo::transport::Device* device_;
  bool started_ = false;
};

/// Called before a send is posted: lets the event loop handle what arrived
/// while this thread computed (see event_loop_device.cpp), by yielding the
/// CPU once, when the loop runs under SCHED_BATCH and this thread computes
/// (core/detail/helper_thread.h). Costs one system call when nothing waits.
void let_event_loop_catch_up();

}  // namespace dtensor::gloo_backend
