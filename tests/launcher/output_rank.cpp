// A libdtensor rank for the launcher's output test, in the situation where
// output used to be lost: rank 0 printf's N lines (no fflush; stdout is a
// pipe) and is busy when rank 1 fails; rank 2, waiting on rank 1, fails with
// its own error. Every line must reach dtensor-run's output, whole.
//   output_rank N        the scenario above
//   output_rank throw N  one rank: N lines printf'ed, then an uncaught exception
//   output_rank outside-mesh  3 ranks, a mesh of ranks 0 and 1 that rank 2
//                        uses anyway; ranks 0 and 1 then wait for rank 2
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

#include "dtensor/core/distributed.h"
#include "dtensor/core/errors.h"
#include "dtensor/core/tensor.h"
#include "dtensor/placement/dtensor.h"

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "outside-mesh") {
    auto pg = dtensor::init_process_group();
    const dtensor::DeviceMesh mesh(dtensor::DeviceType::CPU, {2});
    // Uncaught on rank 2, which is not in the mesh.
    dtensor::distribute_tensor(dtensor::Tensor::zeros({4}, dtensor::DType::F32), mesh,
                               {dtensor::Shard(0)});
    pg->barrier();  // ranks 0 and 1 wait here for rank 2
    dtensor::destroy_process_group();
    return 0;
  }
  const bool throws = argc > 1 && std::string(argv[1]) == "throw";
  const int lines = argc > 1 + throws ? std::atoi(argv[1 + throws]) : 18;
  auto pg = dtensor::init_process_group();
  if (throws) {
    for (int i = 1; i <= lines; ++i)
      std::printf("line %d of %d before the exception\n", i, lines);
    throw dtensor::InvalidArgument("output_rank", "the uncaught exception");
  }
  pg->barrier();
  switch (pg->rank()) {
    case 0:
      for (int i = 1; i <= lines; ++i)
        std::printf("rank 0 line %d of %d\n", i, lines);
      std::printf("rank 0 partial line without newline");
      std::this_thread::sleep_for(std::chrono::seconds(30));  // busy; stopped by the launcher
      return 0;
    case 1:
      // In pieces, as an error report often is: each piece is a write().
      std::cerr << "rank 1 error: "
                << "the simulated failure of rank 1"
                << ", reported in "
                << "several pieces"
                << " -- end of rank 1 error" << std::endl;
      return 3;
    default: {
      dtensor::Tensor t = dtensor::Tensor::zeros({4}, dtensor::DType::F32);
      try {
        pg->irecv(t, 1)->wait();
        std::cerr << "rank 2 error: the receive returned" << std::endl;
      } catch (const dtensor::CommError& e) {
        std::cerr << "rank 2 error: " << e.what() << " -- end of rank 2 error" << std::endl;
      }
      // Rank 1's exit is the job's first failure; on a loaded machine the
      // launcher could otherwise reap this rank first and report it instead.
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      return 2;
    }
  }
}
