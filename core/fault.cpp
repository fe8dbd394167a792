#include "dtensor/core/fault.h"

#include "core/detail/fault_monitor.h"
#include "dtensor/core/logging.h"

namespace dtensor {

void abort(const std::string& reason) {
  if (auto m = detail::fault_monitor()) {
    m->fail_local(reason);
    return;
  }
  log::error("abort: {} (no multi-rank job to tell)", reason);
}

std::string dump_flight_recorder() {
  auto m = detail::fault_monitor();
  return m ? m->dump("requested") : "";
}

}  // namespace dtensor
