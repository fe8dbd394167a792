// MPI's process-wide state: initialisation at the thread level this backend
// needs, one lock around every MPI call, and the end of the job.
//
// Thread level: MPI_THREAD_SERIALIZED. libdtensor may call the process group
// from more than one thread (a Work waited on elsewhere), but every MPI call
// of this backend takes mpi_lock(), so no two run at once. An application
// that calls MPI itself while libdtensor communicates must serialise with it
// or initialise MPI with MPI_THREAD_MULTIPLE.
//
// End of the job: MPI cannot cancel a collective, so after a timeout or a
// failed peer the buffers of pending operations stay in MPI's hands and
// MPI_Finalize could wait for them for ever. The first failure is recorded;
// at exit the job is then ended with MPI_Abort (after the failure was raised
// to the caller and is printed once more here), otherwise MPI_Finalize runs.
// MPI_Abort stops the peers too, so it waits a grace first (the failed
// group's timeout, at most kMaxAbortGrace): peers stuck in the same operation
// time out within it and report their own error.
#pragma once

#include <mpi.h>

#include <chrono>
#include <mutex>
#include <string>

namespace dtensor::mpi_backend {

/// The thread level this backend needs from MPI_Init_thread.
constexpr int kRequiredThreadLevel = MPI_THREAD_SERIALIZED;
/// "MPI_THREAD_SERIALIZED", ...
const char* thread_level_name(int level);

/// Initialises MPI once (unless the application did), checks the thread
/// level, and arranges the end of the job at exit. NotSupported naming both
/// levels when MPI provides less than kRequiredThreadLevel.
void ensure_mpi_initialized();

/// Held around every MPI call (MPI_THREAD_SERIALIZED).
std::unique_lock<std::mutex> mpi_lock();

/// The longest wait at exit before MPI_Abort after a failure.
constexpr std::chrono::milliseconds kMaxAbortGrace{5000};

/// Records the first communication failure: the job will end with MPI_Abort,
/// after a grace of `timeout` (the failed group's), at most kMaxAbortGrace.
void record_job_failure(const std::string& reason, std::chrono::milliseconds timeout);

/// Whether MPI may still be called (initialised and not finalised).
bool mpi_usable();

/// MPI's text for an error code.
std::string mpi_error_string(int code);

}  // namespace dtensor::mpi_backend
