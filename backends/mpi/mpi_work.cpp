#include "backends/mpi/mpi_work.h"

#include <fmt/format.h>

#include "backends/mpi/mpi_process_group.h"
#include "backends/mpi/mpi_wait.h"
#include "dtensor/core/errors.h"

namespace dtensor::mpi_backend {

MpiP2PWork::MpiP2PWork(std::shared_ptr<MpiProcessGroup> group, bool is_send, Tensor tensor,
                       MPI_Request request, std::string what)
    : group_(std::move(group)),
      is_send_(is_send),
      tensor_(std::move(tensor)),
      request_(request),
      what_(std::move(what)) {}

MpiP2PWork::~MpiP2PWork() {
  if (!finished_ && request_ != MPI_REQUEST_NULL) group_->park_unfinished(request_, tensor_);
}

void MpiP2PWork::wait(std::chrono::milliseconds timeout) {
  std::lock_guard lock(mutex_);
  if (finished_) {
    if (error_) std::rethrow_exception(error_);
    return;
  }
  if (timeout.count() < 0) timeout = group_->timeout();
  MPI_Status status;
  try {
    group_->check_usable(what_);
    if (!wait_bounded(request_, timeout, what_, &status)) throw_timeout(what_, timeout);
    if (!is_send_) {
      // A shorter message than the buffer is an error, as under Gloo.
      int count = 0;
      MPI_Get_count(&status, MPI_BYTE, &count);
      if (static_cast<std::size_t>(count) != tensor_.nbytes())
        throw CommError("mpi", fmt::format("{}: received {} bytes into a buffer of {}", what_,
                                           count, tensor_.nbytes()));
    }
  } catch (const CommError& e) {
    finished_ = true;
    error_ = std::current_exception();
    // The request may still be pending: its memory goes with the group.
    if (request_ != MPI_REQUEST_NULL) group_->park_unfinished(request_, tensor_);
    request_ = MPI_REQUEST_NULL;
    group_->fail(e.what());
    throw;
  }
  finished_ = true;
  request_ = MPI_REQUEST_NULL;
  if (!is_send_) group_->counters().bytes_received += tensor_.nbytes();
}

}  // namespace dtensor::mpi_backend
