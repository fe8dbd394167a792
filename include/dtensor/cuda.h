// CUDA at run time: whether this build has it and whether a device is usable.
//
// Every function works in every build: a build without CUDA (DTENSOR_WITH_CUDA
// OFF, or AUTO without the toolkit) and a machine without a driver or GPU both
// answer "not available" / 0 instead of failing.
#pragma once

#include <string>

namespace dtensor::cuda {

/// Whether libdtensor was compiled with the CUDA, cuDNN and NCCL backends.
bool is_built();
/// Whether CUDA tensors can be used: built with CUDA and at least one device.
bool is_available();
/// Usable devices; 0 without a driver or device (never throws).
int device_count();
/// Why is_available() is false ("built without CUDA", the driver's error), or "".
std::string unavailable_reason();
/// The device new CUDA tensors of this thread default to (0 when none).
int current_device();
/// Makes `index` the current device (InvalidArgument when out of range).
void set_device(int index);
/// Waits until the library's work on the current device has finished.
void synchronize();

}  // namespace dtensor::cuda
