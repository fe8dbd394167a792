// Device backends as run-time modules: libdtensor.so links no CUDA library;
// the CUDA backends (kernels, cuDNN, NCCL) are the module libdtensor-cuda.so,
// opened with dlopen the first time a CUDA device is used or asked for
// (docs/architecture.md, "The CUDA module"). One installed package thus runs on
// GPU and CPU-only machines alike.
//
// A module exports two C functions: DTENSOR_DEVICE_MODULE_VERSION_FN, the
// libdtensor version it was built with (checked before anything runs), and
// DTENSOR_DEVICE_MODULE_REGISTER_FN, which registers its DeviceOps, allocator,
// kernels and process-group backends through the same registries the
// library's own backends and the plugins use.
#pragma once

#include <string>

#include "dtensor/core/dtype.h"

#define DTENSOR_DEVICE_MODULE_VERSION_FN dtensor_device_module_version
#define DTENSOR_DEVICE_MODULE_REGISTER_FN dtensor_device_module_register

namespace dtensor::detail {

/// Loads the module of `type` (CUDA: libdtensor-cuda.so) and runs its
/// registration, once per process: later calls return the first answer.
/// True when it is loaded; false (the reason in device_module_error) when it
/// is missing, fails to load, or `type` has no module. Throws only when the
/// configuration it reads (DTENSOR_CUDA_MODULE) is invalid: InvalidArgument
/// naming the variable, and the load is tried again on the next call.
bool load_device_module(DeviceType type);
/// Why the module of `type` is not loaded, naming the module and where it was
/// looked for; "" once it is loaded.
std::string device_module_error(DeviceType type);
/// The path the module was loaded from; "" when it is not loaded.
std::string device_module_path(DeviceType type);

/// Opens the module at `path` and checks that it is a device module built for
/// this libdtensor; does not register it. Returns the dlopen handle; throws
/// NotSupported naming the path and the cause (the loader's message, e.g. a
/// missing libcudnn, or the version mismatch).
void* open_device_module(const std::string& path);

}  // namespace dtensor::detail
