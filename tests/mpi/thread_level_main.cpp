// The thread level check at start-up: the application initialises MPI itself
// with MPI_THREAD_FUNNELED, below the MPI_THREAD_SERIALIZED the backend
// needs; init_process_group must refuse with a NotSupported naming both
// levels, and leave the application's MPI usable. Exit 0 when it does, 77
// when this MPI gives more than was asked for (nothing to check).
#include <mpi.h>

#include <cstdio>
#include <string>

#include "dtensor/core/distributed.h"
#include "dtensor/core/errors.h"

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  if (provided != MPI_THREAD_FUNNELED) {
    // Nothing to check: this MPI gives more than it was asked for.
    std::printf("SKIP: the MPI gave thread level %d for MPI_THREAD_FUNNELED\n", provided);
    MPI_Finalize();
    return 77;
  }
  int ok = 0;
  {
    try {
      dtensor::init_process_group();
      std::printf("FAIL: init_process_group accepted MPI_THREAD_FUNNELED\n");
    } catch (const dtensor::NotSupported& e) {
      const std::string msg = e.what();
      std::printf("%s\n", msg.c_str());
      ok = msg.find("[dtensor.mpi]") != std::string::npos &&
           msg.find("provides thread level MPI_THREAD_FUNNELED") != std::string::npos &&
           msg.find("needs MPI_THREAD_SERIALIZED") != std::string::npos;
      if (!ok) std::printf("FAIL: the message does not name both levels\n");
    }
  }
  // The application's MPI still works.
  int all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Finalize();
  return all ? 0 : 1;
}
