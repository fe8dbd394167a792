#include "tools/cli/traffic.h"

#include <set>

#include "dtensor/core/distributed.h"

namespace dtensor::cli {

Traffic traffic(const DeviceMesh& mesh) {
  std::set<ProcessGroup*> groups{world().get()};
  if (mesh.contains_this_rank()) {
    for (std::int64_t d = 0; d < mesh.ndim(); ++d)
      groups.insert(mesh.get_group(d).get());
    groups.insert(mesh.get_mesh_group().get());
  }
  Traffic t;
  for (ProcessGroup* g : groups) {
    t.sent += g->counters().bytes_sent.load();
    t.received += g->counters().bytes_received.load();
  }
  return t;
}

}  // namespace dtensor::cli
