// Which of a rank's threads compute and which only help the communication.
// A backend that lets its own progress thread run before a send (the Gloo
// event loop, backends/gloo/event_loop_device.h) does so on computing threads
// only: a helper thread that posts sends for the rank, such as the simulated
// link's delivery, would hand its core to the computation instead, and its
// message would wait for the scheduler's next tick.
#pragma once

namespace dtensor::detail {

/// Marks the calling thread as a helper for the rest of its life.
void mark_helper_thread();

/// Whether mark_helper_thread() ran on the calling thread.
bool on_helper_thread();

}  // namespace dtensor::detail
