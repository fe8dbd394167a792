// The library's own threads carry names (top -H, gdb's "info threads", perf),
// so a user looking at a rank's threads can tell the monitor from the
// collective thread from the program's own. Linux keeps at most 15
// characters; a thread created later inherits its creator's name, which is
// how Gloo's event loop gets one (backends/gloo/event_loop_device.cpp).
#pragma once

#include <pthread.h>

namespace dtensor::detail {

/// Names the calling thread; `name` has at most 15 characters (a longer one
/// is refused, and the thread keeps its name). Best effort.
inline void name_this_thread(const char* name) {
  pthread_setname_np(pthread_self(), name);
}

}  // namespace dtensor::detail
