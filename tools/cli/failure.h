// How dtensor-conv and dtensor-op end once their arguments have passed the
// checks and the run fails: one line naming the rank, then an immediate exit.
#pragma once

#include <string>
#include <string_view>

namespace dtensor::cli {

/// "TOOL: rank R: ", R the process group's rank once it is initialised, and
/// before that (init itself failing) the launcher's (DTENSOR_RANK, RANK,
/// OMPI_COMM_WORLD_RANK, ..., read as init_process_group reads them);
/// "TOOL: " when neither is known (only MPI knows it, or it is malformed).
std::string error_prefix(std::string_view tool);

/// The message for a std::bad_alloc out of the run: the sizes are the
/// user's (`sizes`, e.g. "--input 9,9,9,9"), so it names them.
std::string out_of_memory(std::string_view sizes);

/// Writes `line` to stderr and ends the process with `code` at once: a peer
/// may be stuck, and what runs at a normal exit could wait for it.
[[noreturn]] void fail_now(const std::string& line, int code);

}  // namespace dtensor::cli
