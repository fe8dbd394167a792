// The MPI module (libdtensor-mpi.so) as libdtensor loads it, without mpirun:
// a program on Gloo never maps it nor libmpi; asked for, it is loaded from
// next to libdtensor.so through the loader of the CUDA module; a configured
// path that does not exist is the error, naming it.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include "core/detail/device_module.h"
#include "core/detail/device_module_search.h"
#include "dtensor/dtensor.h"
#include "tests/support/mapped_files.h"
#include "tests/support/multiprocess.h"

using namespace dtensor;
using Catch::Contains;
using dtensor::testing::mapped_files;
using dtensor::testing::run_ranks;

TEST_CASE("mpi module: loaded from next to libdtensor.so only when asked for", "[mpi][module]") {
  run_ranks(1, [](testing::RankContext&) {
    // The harness's job runs on Gloo: no MPI anywhere in the process.
    CHECK_THAT(mapped_files(), !Contains("libdtensor-mpi.so") && !Contains("libmpi"));
    REQUIRE(detail::load_module(detail::Module::Mpi));
    CHECK_THAT(mapped_files(), Contains("libdtensor-mpi.so") && Contains("libmpi"));
    CHECK(detail::module_path(detail::Module::Mpi) ==
          (std::filesystem::path(detail::library_directory()) / "libdtensor-mpi.so").string());
    CHECK(detail::module_error(detail::Module::Mpi).empty());
    // Loading registers, and makes no MPI call: MPI starts with a world group.
    CHECK(detail::load_module(detail::Module::Mpi));
  });
}

TEST_CASE("mpi module: a configured path that does not exist is the error", "[mpi][module]") {
  testing::RunOptions o;
  o.env["DTENSOR_MPI_MODULE"] = "/nonexistent/libdtensor-mpi.so";
  run_ranks(
      1,
      [](testing::RankContext&) {
        CHECK_FALSE(detail::load_module(detail::Module::Mpi));
        CHECK_THAT(detail::module_error(detail::Module::Mpi),
                   Contains("the MPI module libdtensor-mpi.so was not found") &&
                       Contains("/nonexistent/libdtensor-mpi.so") &&
                       Contains("DTENSOR_MPI_MODULE names a file that does not exist"));
        CHECK_THAT(mapped_files(), !Contains("libmpi"));
      },
      o);
}
