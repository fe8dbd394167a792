#include "tools/cli/failure.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include <fmt/format.h>

#include "dtensor/core/distributed.h"
#include "dtensor/core/errors.h"

namespace dtensor::cli {

std::string error_prefix(std::string_view tool) {
  int rank = -1;
  if (dtensor::is_initialized()) {
    rank = dtensor::get_rank();
  } else {
    try {
      rank = dtensor::resolve_init_options({}).rank;
    } catch (const dtensor::Error&) {
      // A malformed launcher variable: the message that follows says so.
    }
  }
  return rank >= 0 ? fmt::format("{}: rank {}: ", tool, rank) : fmt::format("{}: ", tool);
}

std::string out_of_memory(std::string_view sizes) {
  return fmt::format("out of memory: the tensors of {} need more memory than this process can get",
                     sizes);
}

void fail_now(const std::string& line, int code) {
  std::cerr << line << std::endl;
  std::fflush(nullptr);
  std::_Exit(code);
}

}  // namespace dtensor::cli
