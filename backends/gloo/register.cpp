// Makes the Gloo process group available as backend "gloo". The library is
// one shared object, so this registrar runs when it is loaded.
#include "backends/gloo/gloo_process_group.h"
#include "dtensor/core/distributed.h"

namespace dtensor::gloo_backend {
namespace {

const bool registered = [] {
  register_process_group_backend("gloo",
                                 [](const BackendInit& init) -> std::shared_ptr<ProcessGroup> {
                                   return GlooProcessGroup::create_world(init);
                                 });
  return true;
}();

}  // namespace
}  // namespace dtensor::gloo_backend
