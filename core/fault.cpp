#include "dtensor/core/fault.h"

#include "core/detail/fault_monitor.h"
#include "core/detail/flight_recorder.h"
#include "dtensor/core/config.h"
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
  if (auto m = detail::fault_monitor()) return m->dump("requested");
  // A job without a monitor (backend mpi without a store, a world of one)
  // records all the same; before init_process_group nothing is recorded.
  return detail::FlightRecorder::write_to(config().flight_recorder_dir);
}

}  // namespace dtensor
