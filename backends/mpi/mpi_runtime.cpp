#include "backends/mpi/mpi_runtime.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <fmt/format.h>

#include "dtensor/core/errors.h"
#include "dtensor/core/logging.h"

namespace dtensor::mpi_backend {
namespace {

struct Runtime {
  std::mutex call_mutex;  // every MPI call (MPI_THREAD_SERIALIZED)
  std::mutex state_mutex;
  bool initialized_here = false;
  std::string failure;  // the first failure; empty while healthy
  std::chrono::milliseconds grace{0};
};

// Never destroyed: the exit handler runs after other statics may be gone.
Runtime& runtime() {
  static auto* r = new Runtime();
  return *r;
}

// libdtensor opens this module RTLD_LOCAL, which also keeps libmpi's symbols
// local; OpenMPI's components (its own dlopen'ed plugins) look those symbols
// up globally. Re-opening the libmpi already loaded with RTLD_GLOBAL makes
// them visible without loading anything new.
void make_libmpi_global() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&MPI_Init_thread), &info) == 0 || !info.dli_fname)
    return;
  if (!dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD))
    log::debug("mpi: could not make {} global: {}", info.dli_fname, dlerror());
}

void end_job_at_exit() {
  Runtime& r = runtime();
  std::string failure;
  std::chrono::milliseconds grace{0};
  {
    std::lock_guard lock(r.state_mutex);
    failure = r.failure;
    grace = r.grace;
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (!failure.empty()) {
    // Printed here too: the process may have swallowed the exception.
    std::fprintf(stderr,
                 "[dtensor.mpi] ending the MPI job with MPI_Abort in %lld ms after a "
                 "communication failure: %s\n",
                 static_cast<long long>(grace.count()), failure.c_str());
    std::fflush(stderr);
    // MPI_Abort stops every rank at once. The peers that waited on the same
    // operation reach their own timeout about now; the grace lets each of
    // them raise and print its own error before the job is ended.
    std::this_thread::sleep_for(grace);
    MPI_Abort(MPI_COMM_WORLD, 1);
    return;
  }
  if (r.initialized_here) MPI_Finalize();
}

}  // namespace

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
  }
  return "an unknown thread level";
}

void ensure_mpi_initialized() {
  Runtime& r = runtime();
  auto lock = mpi_lock();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized)
    throw NotSupported("mpi", "MPI was finalised in this process: it cannot be initialised again");
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (initialized) {
    MPI_Query_thread(&provided);
  } else {
    make_libmpi_global();
    const int rc = MPI_Init_thread(nullptr, nullptr, kRequiredThreadLevel, &provided);
    if (rc != MPI_SUCCESS)
      throw CommError("mpi", "MPI_Init_thread failed: " + mpi_error_string(rc));
    r.initialized_here = true;
    std::atexit(end_job_at_exit);
  }
  if (provided < kRequiredThreadLevel)
    throw NotSupported(
        "mpi", fmt::format("the MPI library provides thread level {}, the mpi backend needs {}{}",
                           thread_level_name(provided), thread_level_name(kRequiredThreadLevel),
                           initialized ? " (the application initialised MPI: call "
                                         "MPI_Init_thread with at least that level)"
                                       : ""));
  // Our communicators return errors instead of ending the job, so that a
  // failure is a typed exception first; the application's MPI_COMM_WORLD
  // keeps its handler unless we initialised MPI.
  if (r.initialized_here) MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

std::unique_lock<std::mutex> mpi_lock() {
  return std::unique_lock(runtime().call_mutex);
}

void record_job_failure(const std::string& reason, std::chrono::milliseconds timeout) {
  Runtime& r = runtime();
  std::lock_guard lock(r.state_mutex);
  if (!r.failure.empty()) return;
  r.failure = reason;
  r.grace = std::clamp(timeout, std::chrono::milliseconds(0), kMaxAbortGrace);
}

bool mpi_usable() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return fmt::format("MPI error {}", code);
  return std::string(text, static_cast<std::size_t>(len));
}

}  // namespace dtensor::mpi_backend
