#include "dtensor/core/storage.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <new>

#include "dtensor/core/errors.h"

namespace dtensor {
namespace {

constexpr std::size_t kCpuAlignment = 64;

std::mutex& allocator_mutex() {
  static std::mutex m;
  return m;
}
std::map<DeviceType, Storage::DeviceAllocator>& allocators() {
  static std::map<DeviceType, Storage::DeviceAllocator> a;
  return a;
}

}  // namespace

Storage::Storage(void* data, std::size_t nbytes, Device device, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (deleter_) deleter_(data_);
}

std::shared_ptr<Storage> Storage::allocate(std::size_t nbytes, Device device) {
  if (device.is_cpu()) {
    // Round up: aligned_alloc wants a multiple of the alignment; keep 0-byte
    // tensors distinct and non-null.
    const std::size_t rounded = (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    void* p = std::aligned_alloc(kCpuAlignment, rounded == 0 ? kCpuAlignment : rounded);
    if (!p) throw std::bad_alloc();
    return std::make_shared<Storage>(p, nbytes, device, [](void* q) { std::free(q); });
  }
  DeviceAllocator alloc;
  {
    std::lock_guard lock(allocator_mutex());
    auto it = allocators().find(device.type);
    if (it != allocators().end()) alloc = it->second;
  }
  if (!alloc)
    throw NotSupported("core", fmt::format("no allocator for device {}: libdtensor was built "
                                           "without CUDA",
                                           device.str()));
  return alloc(nbytes, device);
}

void Storage::set_device_allocator(DeviceType type, DeviceAllocator alloc) {
  std::lock_guard lock(allocator_mutex());
  allocators()[type] = std::move(alloc);
}

}  // namespace dtensor
