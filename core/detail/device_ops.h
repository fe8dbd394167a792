// The hook through which the core reaches a device backend (CUDA) without
// including or linking it (docs/design.md §3): Tensor::copy_ / fill_ / add_ on
// device tensors, the public dtensor::cuda API, and picking this rank's device.
// A device backend lives in a module of its own (libdtensor-cuda.so) that
// registers one DeviceOps per device type when libdtensor loads it
// (core/detail/device_module.h); without the module the core reports why.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "dtensor/core/dtype.h"

namespace dtensor {
class Tensor;
}

namespace dtensor::detail {

class DeviceOps {
 public:
  virtual ~DeviceOps() = default;
  /// dst <- src (same shape; any strides and dtypes), where dst or src (or both)
  /// lives on this backend's device type and the other may be on the CPU.
  virtual void copy(const Tensor& dst, const Tensor& src) = 0;
  virtual void fill(const Tensor& dst, double value) = 0;
  /// dst += src; same shape, dtype and device.
  virtual void add(const Tensor& dst, const Tensor& src) = 0;
  /// Number of usable devices (0 when there is no driver or no device).
  virtual int device_count() = 0;
  /// Why device_count() is 0 (the driver's error), or "".
  virtual std::string unavailable_reason() = 0;
  /// The device this thread allocates on by default.
  virtual int current_device() = 0;
  /// Makes `index` the default device (InvalidArgument when out of range).
  virtual void set_device(int index) = 0;
  /// Waits until the library's work on the current device has finished.
  virtual void synchronize() = 0;
  /// Makes device `local_rank % device_count()` current; a no-op without devices.
  virtual void select_local_device(int local_rank) = 0;
  /// Bytes the device allocator holds for reuse (reserved, not in use), over
  /// every device this process has allocated on; 0 when it cannot tell.
  virtual std::size_t cached_bytes() { return 0; }
};

/// What a device module (or a test's fake device) calls to provide `type`.
void register_device_ops(DeviceType type, std::shared_ptr<DeviceOps> ops);
/// The registered ops, or nullptr; never loads a module.
std::shared_ptr<DeviceOps> registered_device_ops(DeviceType type);
/// The registered ops, loading the device's module on first ask; nullptr when
/// it cannot be loaded (device_module_error says why).
std::shared_ptr<DeviceOps> find_device_ops(DeviceType type);
/// find_device_ops, or NotSupported naming `what` and why the module is missing.
DeviceOps& device_ops(DeviceType type, const char* what);

/// Records this process's local rank (init_process_group): the registered
/// device backends pick their device from it now, a module loaded later on load.
void set_device_local_rank(int local_rank);

}  // namespace dtensor::detail
