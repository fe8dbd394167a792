// What a run sent: the process groups' byte counters, read around a pass.
#pragma once

#include <cstdint>

#include "dtensor/core/device_mesh.h"

namespace dtensor::cli {

/// Bytes this rank has sent and received so far over the world group and
/// every group of `mesh` (each group keeps its own counters).
struct Traffic {
  std::uint64_t sent = 0, received = 0;
};
Traffic traffic(const DeviceMesh& mesh);

}  // namespace dtensor::cli
