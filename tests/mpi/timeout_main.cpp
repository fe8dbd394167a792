// A job where one rank is stuck: rank 1 sleeps past the timeout before the
// allreduce every rank makes. The others must raise TimeoutError within the
// timeout, with the message the backend gives (printed, one line per rank,
// for tests/mpi/check_timeout.py to compare between MPI and Gloo), and the
// job must end (under MPI with MPI_Abort at exit), not hang.
// With SLEEP_MS "die", rank 1 dies instead (std::_Exit, no MPI_Finalize):
// the launcher must end the job long before the timeout.
// With a third argument "subgroup" the others create a subgroup with rank 1
// instead of the allreduce (communicator creation must be bounded too).
// Usage: dtensor-test-mpi-timeout TIMEOUT_MS SLEEP_MS|die [subgroup]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "dtensor/core/distributed.h"
#include "dtensor/core/errors.h"

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: %s TIMEOUT_MS SLEEP_MS|die [subgroup]\n", argv[0]);
    return 2;
  }
  dtensor::InitOptions o;
  o.timeout = std::chrono::milliseconds(std::atoi(argv[1]));
  auto pg = dtensor::init_process_group(o);
  if (pg->rank() == 1 && std::string(argv[2]) == "die") std::_Exit(3);
  if (pg->rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(argv[2])));
  dtensor::Tensor t = dtensor::Tensor::full({4}, 1.0, dtensor::DType::F32);
  const auto start = std::chrono::steady_clock::now();
  try {
    if (argc == 4) {
      std::vector<int> members(static_cast<std::size_t>(pg->size()));
      for (int r = 0; r < pg->size(); ++r)
        members[static_cast<std::size_t>(r)] = r;
      pg->new_subgroup(members);
    } else {
      pg->allreduce(t);
    }
    std::printf("rank %d: completed\n", pg->rank());
  } catch (const dtensor::TimeoutError& e) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
    std::printf("rank %d: TimeoutError after %lld ms: %s\n", pg->rank(), static_cast<long long>(ms),
                e.what());
  } catch (const dtensor::CommError& e) {
    std::printf("rank %d: CommError: %s\n", pg->rank(), e.what());
  }
  std::fflush(stdout);
  dtensor::destroy_process_group();
  return 0;
}
