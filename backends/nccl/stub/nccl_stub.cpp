// Backend "nccl" in a build without CUDA: registered so that asking for it
// says why it is missing (NotSupported) rather than "unknown backend".
#include "dtensor/core/distributed.h"
#include "dtensor/core/errors.h"

namespace dtensor::nccl_backend {
namespace {

const bool registered = [] {
  register_process_group_backend("nccl", [](const BackendInit&) -> std::shared_ptr<ProcessGroup> {
    throw NotSupported("nccl",
                       "backend nccl: libdtensor was built without CUDA (DTENSOR_WITH_CUDA=OFF "
                       "or the toolkit was not found); use backend cpu:gloo,cuda:gloo or gloo");
  });
  return true;
}();

}  // namespace
}  // namespace dtensor::nccl_backend
