// The handle of one point-to-point transfer: an MPI request over the
// tensor's memory, waited on once (core/detail/wait_once.h) with the bounded
// wait of mpi_wait.h.
#pragma once

#include <mpi.h>

#include <chrono>
#include <memory>
#include <string>

#include "core/detail/wait_once.h"
#include "dtensor/core/process_group.h"

namespace dtensor::mpi_backend {

class MpiProcessGroup;

class MpiP2PWork : public Work {
 public:
  MpiP2PWork(std::shared_ptr<MpiProcessGroup> group, bool is_send, Tensor tensor,
             MPI_Request request, std::string what);
  /// A transfer dropped unfinished keeps its memory with the group: MPI may
  /// still write into it.
  ~MpiP2PWork() override;
  void wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(-1)) override;

 private:
  std::shared_ptr<MpiProcessGroup> group_;
  const bool is_send_;
  Tensor tensor_;
  MPI_Request request_;
  const std::string what_;  // "send to rank 1 tag 3", for messages
  detail::WaitOnce once_;
};

}  // namespace dtensor::mpi_backend
