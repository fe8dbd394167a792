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
  if (!once_.finished() && request_ != MPI_REQUEST_NULL) group_->park_unfinished(request_, tensor_);
}

void MpiP2PWork::wait(std::chrono::milliseconds timeout) {
  once_.run(
      [&] {
        const auto limit = timeout.count() < 0 ? group_->timeout() : timeout;
        MPI_Status status;
        group_->check_usable(what_);
        if (!wait_bounded(request_, limit, what_, &status)) throw_timeout(what_, limit);
        if (!is_send_) {
          // A shorter message than the buffer is an error, as under Gloo.
          int count = 0;
          MPI_Get_count(&status, MPI_BYTE, &count);
          if (static_cast<std::size_t>(count) != tensor_.nbytes())
            throw CommError("mpi", fmt::format("{}: received {} bytes into a buffer of {}", what_,
                                               count, tensor_.nbytes()));
        }
      },
      [&](const CommError& e) {
        // The request may still be pending: its memory goes with the group.
        if (request_ != MPI_REQUEST_NULL) group_->park_unfinished(request_, tensor_);
        request_ = MPI_REQUEST_NULL;
        group_->fail(e.what());
      },
      [&] {
        request_ = MPI_REQUEST_NULL;
        if (!is_send_) group_->counters().bytes_received += tensor_.nbytes();
      });
}

}  // namespace dtensor::mpi_backend
