// Reference-counted device memory shared by all views of a tensor.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "dtensor/core/dtype.h"

namespace dtensor {

class Storage {
 public:
  /// CPU storage is 64-byte aligned (cache line, AVX-512 vector) and uninitialised.
  /// CUDA storage goes through the allocator the CUDA backend installs.
  static std::shared_ptr<Storage> allocate(std::size_t nbytes, Device device);
  /// Wraps memory owned elsewhere; `deleter` runs when the last view goes away.
  Storage(void* data, std::size_t nbytes, Device device, std::function<void(void*)> deleter);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  /// Allocator hook for non-CPU devices (set by the CUDA backend when it is built).
  using DeviceAllocator = std::function<std::shared_ptr<Storage>(std::size_t, Device)>;
  static void set_device_allocator(DeviceType type, DeviceAllocator alloc);

 private:
  static std::shared_ptr<Storage> allocate_uncounted(std::size_t nbytes, Device device);
  bool counted_ = false;  // made by allocate(): counted in memory_stats()
  void* data_;
  std::size_t nbytes_;
  Device device_;
  std::function<void(void*)> deleter_;
};

/// CPU buffers of 64 KiB or more freed by tensors are kept for reuse, up to
/// DTENSOR_CPU_CACHE_MB (default 512; 0 disables): a reused buffer skips the
/// page faults of fresh memory. A request takes the smallest kept buffer that
/// is at most an eighth larger; over the cap the largest go back first.
/// These return the cache to the system / report its size.
std::size_t release_cached_cpu_memory();
std::size_t cached_cpu_memory();

/// Memory of one device type, as torch.cuda.memory_stats() reports it.
struct MemoryStats {
  /// Bytes held by live tensors (every Storage::allocate not yet freed).
  std::size_t allocated_bytes = 0;
  /// The most allocated_bytes has been since the start or the last reset.
  std::size_t peak_allocated_bytes = 0;
  /// Freed bytes the allocator keeps for reuse: on the CPU the caching
  /// allocator's; on CUDA what the stream-ordered allocator's pools hold
  /// reserved but not in use, over the devices this process allocated on
  /// (torch's reserved minus allocated).
  std::size_t cached_bytes = 0;
};
MemoryStats memory_stats(DeviceType device = DeviceType::CPU);
/// Starts peak_allocated_bytes again from the current allocated_bytes.
void reset_peak_memory_stats(DeviceType device = DeviceType::CPU);

}  // namespace dtensor
