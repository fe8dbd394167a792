// Backends as run-time modules: libdtensor.so links no CUDA and no MPI
// library. The CUDA backends (kernels, cuDNN, NCCL) are the module
// libdtensor-cuda.so, opened with dlopen the first time a CUDA device is used
// or asked for; the MPI process group is libdtensor-mpi.so, opened when
// init_process_group chooses backend "mpi" (docs/architecture.md, "Run-time
// modules"). One installed package thus runs on GPU and CPU-only machines, with
// or without an MPI, alike. One loader serves every module.
//
// A module exports two C functions: DTENSOR_DEVICE_MODULE_VERSION_FN, the
// libdtensor version it was built with (checked before anything runs), and
// DTENSOR_DEVICE_MODULE_REGISTER_FN, which registers what it provides
// (DeviceOps, allocator, kernels, process-group backends) through the same
// registries the library's own backends and the plugins use.
#pragma once

#include <string>

#include "dtensor/core/dtype.h"

#define DTENSOR_DEVICE_MODULE_VERSION_FN dtensor_device_module_version
#define DTENSOR_DEVICE_MODULE_REGISTER_FN dtensor_device_module_register

namespace dtensor::detail {

/// The run-time modules libdtensor knows.
enum class Module {
  Cuda,  // libdtensor-cuda.so: CUDA tensors, cuDNN, backend "nccl"
  Mpi,   // libdtensor-mpi.so: backend "mpi"
};

/// Loads `module` and runs its registration, once per process: later calls
/// return the first answer. True when it is loaded; false (the reason in
/// module_error) when it is missing or fails to load. Throws only for a bad
/// DTENSOR_CUDA_MODULE / DTENSOR_MPI_MODULE value (InvalidArgument from the
/// configuration).
bool load_module(Module module);
/// Why `module` is not loaded, naming the module and where it was looked for;
/// "" once it is loaded.
std::string module_error(Module module);
/// The path `module` was loaded from; "" when it is not loaded.
std::string module_path(Module module);

/// The module that provides `type` tensors (CUDA: libdtensor-cuda.so); false,
/// or an error saying that no module provides them, for any other type.
bool load_device_module(DeviceType type);
std::string device_module_error(DeviceType type);
std::string device_module_path(DeviceType type);

/// Opens the module at `path` and checks that it is a module built for this
/// libdtensor; does not register it. Returns the dlopen handle; throws
/// NotSupported naming the module (`name`, e.g. "CUDA"), the path and the
/// cause (the loader's message, e.g. a missing libcudnn, or the version mismatch).
void* open_device_module(const std::string& path, const std::string& name = "CUDA");

}  // namespace dtensor::detail
