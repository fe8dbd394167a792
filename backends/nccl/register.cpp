// Makes the NCCL process group available as backend "nccl" (CUDA tensors);
// init_process_group puts it behind the routing group with Gloo for CPU tensors.
#include "backends/nccl/nccl_process_group.h"

namespace dtensor::nccl_backend {
namespace {

// Registration only: no CUDA or NCCL call happens while the library loads.
const bool registered = [] {
  register_process_group_backend(
      "nccl", [](const BackendInit& init) { return NcclProcessGroup::create_world(init); });
  return true;
}();

}  // namespace
}  // namespace dtensor::nccl_backend
