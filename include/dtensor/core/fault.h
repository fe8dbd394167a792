// Failing a job on purpose, and what each rank was doing when it failed
// (docs/troubleshooting.md, "When one rank goes wrong").
#pragma once

#include <exception>
#include <string>

namespace dtensor {

/// Reports that this rank cannot go on. Within about a second every other
/// rank's pending and next communication throws CommError
/// "... rank R failed: <reason>", instead of waiting for DTENSOR_TIMEOUT;
/// this rank's own later communication throws too, and its flight recorder
/// is written. It does not end the process (the caller throws or exits).
/// Before init_process_group, and in a world of one, it only logs.
void abort(const std::string& reason);

/// Writes this rank's flight recorder (its last DTENSOR_FLIGHT_RECORDER_SIZE
/// communication calls) to DTENSOR_FLIGHT_RECORDER_DIR and returns the
/// file's path; "" when nothing was written (nothing recorded: before
/// init_process_group, or the recorder off).
/// SIGUSR1 does the same from the monitor thread.
std::string dump_flight_recorder();

namespace detail {
/// For entry points of the layers above core that run code which may throw
/// anything (dispatch runs handlers): an exception that is neither bad input
/// nor an unsupported request (InvalidArgument, NotSupported: raised alike on
/// every rank) nor a communication error (reported where it was raised) is
/// this rank's failure, published to the others. Never throws.
void report_failure(const std::exception& e);
}  // namespace detail

}  // namespace dtensor
