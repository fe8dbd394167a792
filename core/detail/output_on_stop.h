// A rank's output must survive its end: when a launcher stops it (SIGTERM)
// or it dies of an uncaught exception, what it printf'ed into stdio's buffers
// is written out first (the default actions would drop it).
#pragma once

#include "dtensor/core/config.h"

namespace dtensor::detail {

/// Applied by init_process_group: stdout line-buffered per
/// Config::stdout_buffering; with Config::flush_on_stop, stdio flushed on
/// SIGTERM (only when the program left SIGTERM at its default; the process
/// still ends by SIGTERM) and on std::terminate. Idempotent.
void protect_output(const Config& cfg);

}  // namespace dtensor::detail
