// The Gloo TCP device, created so that its event-loop thread does not preempt
// the thread computing next to it (DTENSOR_GLOO_LOOP, docs/performance.md).
#pragma once

#include <memory>

#include <gloo/transport/device.h>
#include <gloo/transport/tcp/attr.h>

namespace dtensor::gloo_backend {

/// ::gloo::transport::tcp::CreateDevice(attr), with the device's event-loop
/// thread under SCHED_BATCH unless DTENSOR_GLOO_LOOP=normal. Rethrows what
/// CreateDevice throws.
std::shared_ptr<::gloo::transport::Device> create_tcp_device(
    const ::gloo::transport::tcp::attr& attr);

/// Called before a send is posted: lets the event loop handle what arrived
/// while this thread computed (see event_loop_device.cpp), by yielding the
/// CPU once, when the loop runs under SCHED_BATCH and this thread computes
/// (core/detail/helper_thread.h). Costs one system call when nothing waits.
void let_event_loop_catch_up();

}  // namespace dtensor::gloo_backend
