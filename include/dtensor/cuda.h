// CUDA at run time: whether the CUDA module is there and whether a device is usable.
//
// The CUDA backends live in the module libdtensor-cuda.so, which the first
// call here (or the first CUDA tensor) loads. Every function works in every
// build: a build without CUDA (DTENSOR_WITH_CUDA OFF, or AUTO without the
// toolkit), a missing module or CUDA library, and a machine without a driver
// or GPU all answer "not available" / 0 instead of failing.
#pragma once

#include <string>

namespace dtensor::cuda {

/// Whether the CUDA module (CUDA, cuDNN and NCCL backends) is installed and
/// loads; unavailable_reason() says why not.
bool is_built();
/// Whether CUDA tensors can be used: built with CUDA and at least one device.
bool is_available();
/// Usable devices; 0 without a driver or device (never throws).
int device_count();
/// Why is_available() is false (the module is missing or does not load, naming
/// it; "built without CUDA"; the driver's error), or "".
std::string unavailable_reason();
/// The device new CUDA tensors of this thread default to (0 when none).
int current_device();
/// Makes `index` the current device (InvalidArgument when out of range).
void set_device(int index);
/// Waits until the library's work on the current device has finished.
void synchronize();

}  // namespace dtensor::cuda
