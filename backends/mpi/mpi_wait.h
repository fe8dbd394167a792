// Bounded waits on MPI requests. MPI has no timeouts: a request is polled
// with MPI_Test until it completes or the deadline passes: back to back
// (yielding) for the first 200 ms, since MPI progresses a message only inside
// its calls, then sleeping between polls (10 us, doubling up to 1 ms) so that
// a rank waiting for a late peer leaves the CPU to the others. Failures become the typed errors the
// Gloo backend raises, with the same shape of message: "OP: timed out: ..." (TimeoutError) and "OP:
// connection failed (a peer may have died): ..." (CommError).
#pragma once

#include <mpi.h>

#include <chrono>
#include <string>

namespace dtensor::mpi_backend {

/// Waits until `request` completes (true; *status filled when given) or
/// `timeout` passes (false; the request is still pending). Throws CommError
/// naming `op` when MPI reports an error.
bool wait_bounded(MPI_Request& request, std::chrono::milliseconds timeout, const std::string& op,
                  MPI_Status* status = nullptr);

/// The TimeoutError of an operation `op` that did not complete in `timeout`.
[[noreturn]] void throw_timeout(const std::string& op, std::chrono::milliseconds timeout);

/// Throws CommError naming `op` unless `rc` is MPI_SUCCESS.
void check_mpi(int rc, const std::string& op);

}  // namespace dtensor::mpi_backend
