// Which kernels a piece of code looks up: a scoped log of every (name,
// device, dtype) the kernel table is asked for, found or not. What it serves:
// a test runs a workload on one device (the trainer's step on the CPU) and
// checks that another device's backend registers the same kernels, so a
// missing CUDA kernel is found on a machine without a GPU. And the whole
// table's keys, to compare what two devices' backends register.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <tuple>

#include "dtensor/core/dtype.h"

namespace dtensor::detail {

using KernelKey = std::tuple<std::string, DeviceType, DType>;

/// While one lives, every kernel lookup of the process is added to its set.
/// One log at a time: a second one throws InvalidArgument.
class KernelLookupLog {
 public:
  KernelLookupLog();
  ~KernelLookupLog();
  KernelLookupLog(const KernelLookupLog&) = delete;
  KernelLookupLog& operator=(const KernelLookupLog&) = delete;
  /// The keys looked up so far.
  std::set<KernelKey> keys() const;

 private:
  std::unique_ptr<std::set<KernelKey>> keys_;
};

/// Every (name, device, dtype) that has a kernel now.
std::set<KernelKey> registered_kernel_keys();

}  // namespace dtensor::detail
