// The entry points of libdtensor-mpi.so (core/detail/device_module.h): the
// libdtensor version it was built with, checked before anything runs, and the
// registration of backend "mpi". Registration makes no MPI call: MPI is
// initialised when the first world group is created.
#include "backends/mpi/mpi_process_group.h"
#include "core/detail/device_module.h"
#include "dtensor/core/distributed.h"

#define DTENSOR_MODULE_EXPORT extern "C" __attribute__((visibility("default")))

DTENSOR_MODULE_EXPORT const char* DTENSOR_DEVICE_MODULE_VERSION_FN() {
  return DTENSOR_VERSION_STRING;
}

DTENSOR_MODULE_EXPORT void DTENSOR_DEVICE_MODULE_REGISTER_FN() {
  dtensor::register_process_group_backend(
      "mpi", [](const dtensor::BackendInit& init) -> std::shared_ptr<dtensor::ProcessGroup> {
        return dtensor::mpi_backend::MpiProcessGroup::create_world(init);
      });
}
