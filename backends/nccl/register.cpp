// Makes the NCCL process group available as backend "nccl" (CUDA tensors);
// init_process_group puts it behind the routing group with Gloo for CPU tensors.
#include "backends/cuda/module_registration.h"
#include "backends/nccl/nccl_process_group.h"

namespace dtensor::nccl_backend {

// Registration only: no CUDA or NCCL call happens while the module loads.
void register_nccl_backend() {
  register_process_group_backend(
      "nccl", [](const BackendInit& init) { return NcclProcessGroup::create_world(init); });
}

}  // namespace dtensor::nccl_backend
