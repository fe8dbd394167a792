// A rank that ends on an uncaught exception has an error to tell, and the
// other ranks should hear it ("rank 4 failed: uncaught exception: ...")
// rather than find its process gone with no reason given.
#pragma once

namespace dtensor::detail {

/// Installs (once) a std::terminate handler that publishes the uncaught
/// exception's message as this rank's failure through the fault monitor,
/// then calls the handler that was there before. Called by
/// init_process_group once the monitor runs.
void publish_uncaught_exceptions();

}  // namespace dtensor::detail
