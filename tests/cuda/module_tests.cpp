// The CUDA module (libdtensor-cuda.so) as libdtensor loads it: where it is
// looked for, the errors that name it, and, in a CUDA build, that it is loaded
// only when CUDA is first asked for and is what then answers.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "core/detail/device_module.h"
#include "core/detail/device_module_search.h"
#include "dtensor/dtensor.h"
#include "tests/support/mapped_files.h"
#include "tests/support/multiprocess.h"

using namespace dtensor;
using Catch::Contains;
using dtensor::testing::mapped_files;
using dtensor::testing::run_ranks;

namespace {

constexpr const char* kModule = "libdtensor-cuda.so";

}  // namespace

TEST_CASE("cuda module: looked for next to libdtensor.so, then in the libdir", "[cuda][module]") {
  using detail::device_module_candidates;
  CHECK(device_module_candidates(kModule, std::nullopt, "/opt/x/lib", "/usr/lib") ==
        std::vector<std::string>{"/opt/x/lib/libdtensor-cuda.so", "/usr/lib/libdtensor-cuda.so"});
  // The same directory twice is tried once; an unknown one not at all.
  CHECK(device_module_candidates(kModule, std::nullopt, "/usr/lib/", "/usr/lib") ==
        std::vector<std::string>{"/usr/lib/libdtensor-cuda.so"});
  CHECK(device_module_candidates(kModule, std::nullopt, "", "/usr/lib") ==
        std::vector<std::string>{"/usr/lib/libdtensor-cuda.so"});
  // A configured path is the only one: no other copy is picked behind it.
  CHECK(device_module_candidates(kModule, std::string("/p/m.so"), "/opt/x/lib", "/usr/lib") ==
        std::vector<std::string>{"/p/m.so"});
}

TEST_CASE("cuda module: the library's directory holds libdtensor.so", "[cuda][module]") {
  const std::string dir = detail::library_directory();
  REQUIRE_FALSE(dir.empty());
  CHECK(std::filesystem::exists(std::filesystem::path(dir) / "libdtensor.so"));
}

TEST_CASE("cuda module: a file that is not a loadable module is named with the cause",
          "[cuda][module]") {
  const auto missing = std::filesystem::temp_directory_path() / "no-such-dir" / kModule;
  CHECK_THROWS_WITH(detail::open_device_module(missing.string()),
                    Contains(missing.string()) && Contains("cannot load the CUDA module"));
  // Not an ELF file: the loader's own reason comes through.
  const auto junk = std::filesystem::temp_directory_path() /
                    ("dtensor-module-test-" + std::to_string(::getpid()) + ".so");
  std::ofstream(junk) << std::string(4096, 'x');  // long enough to have an ELF header
  CHECK_THROWS_WITH(detail::open_device_module(junk.string()),
                    Contains(junk.string()) && Contains("ELF"));
  std::filesystem::remove(junk);
  // A real shared library without the entry points.
  const auto lib = std::filesystem::path(detail::library_directory()) / "libdtensor.so";
  CHECK_THROWS_WITH(detail::open_device_module(lib.string()),
                    Contains("is not a libdtensor device module"));
}

TEST_CASE("cuda module: a configured path that does not exist is the error", "[cuda][module]") {
  testing::RunOptions o;
  o.env["DTENSOR_CUDA_MODULE"] = "/nonexistent/libdtensor-cuda.so";
  run_ranks(
      1,
      [](testing::RankContext&) {
        CHECK_FALSE(cuda::is_built());
        CHECK_FALSE(cuda::is_available());
        CHECK(cuda::device_count() == 0);
        const std::string why = cuda::unavailable_reason();
        CHECK_THAT(why,
                   Contains("/nonexistent/libdtensor-cuda.so") && Contains("DTENSOR_CUDA_MODULE"));
        CHECK_THROWS_WITH(Tensor::empty({2}, DType::F32, Device::cuda(0)),
                          Contains("/nonexistent/libdtensor-cuda.so"));
        CHECK_THROWS_AS(Tensor::zeros({2}, DType::F32).to(Device::cuda(0)), NotSupported);
      },
      o);
}

#ifdef DTENSOR_TEST_WITH_CUDA
TEST_CASE("cuda module: loaded from next to libdtensor.so when CUDA is first asked for",
          "[cuda][module]") {
  run_ranks(1, [](testing::RankContext&) {
    // A CPU-only job (the harness's process group is Gloo) has loaded no CUDA.
    const std::string before = mapped_files();
    CHECK_THAT(before, !Contains(kModule) && !Contains("libcudart") && !Contains("libnccl"));
    CHECK(cuda::is_built());
    const std::string after = mapped_files();
    CHECK_THAT(after, Contains(kModule) && Contains("libcudart") && Contains("libnccl"));
    CHECK(detail::device_module_path(DeviceType::CUDA) ==
          (std::filesystem::path(detail::library_directory()) / kModule).string());
    CHECK(detail::device_module_error(DeviceType::CUDA).empty());
    if (!cuda::is_available()) CHECK_FALSE(cuda::unavailable_reason().empty());
  });
}
#else
TEST_CASE("cuda module: a build without CUDA says so", "[cuda][module]") {
  CHECK_FALSE(cuda::is_built());
  CHECK_THAT(cuda::unavailable_reason(), Contains("built without CUDA") && Contains(kModule));
}
#endif
