// Catch2's main for the suites that run as one job of ranks (under mpirun, or
// dtensor-run for the conformance suite against Gloo): every rank runs the same
// test cases in the same order, inside one world group that
// init_process_group chooses from the launcher's environment (under mpirun:
// backend mpi, no store). A failed check on one rank leaves the others waiting at their next
// collective; the group's timeout (DTENSOR_TIMEOUT, set short by the ctest
// entry) turns that into a TimeoutError there, so the job fails, never hangs.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "dtensor/core/distributed.h"

int main(int argc, char** argv) {
  dtensor::init_process_group();
  const int failed = Catch::Session().run(argc, argv);
  // Every rank's verdict: a rank whose tests passed fails the job too when
  // another's did not, so mpirun's exit status is the job's.
  dtensor::Tensor f = dtensor::Tensor::full({1}, static_cast<double>(failed), dtensor::DType::F64);
  dtensor::world()->allreduce(f, dtensor::ReduceOp::Max);
  dtensor::destroy_process_group();
  return f.data<double>()[0] > 0 ? 1 : 0;
}
