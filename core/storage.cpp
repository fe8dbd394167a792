#include "dtensor/core/storage.h"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <vector>

#include "core/detail/device_module.h"
#include "core/detail/device_ops.h"
#include "dtensor/core/config.h"
#include "dtensor/core/errors.h"

namespace dtensor {
namespace {

constexpr std::size_t kCpuAlignment = 64;
// Buffers from 64 KiB up are kept in a cache when freed. Fresh memory costs
// page faults as it is first written: a fresh 64 MiB buffer ~100 ms (an
// all-gather into a new buffer took 2.7x as long as into a reused one); the
// 393 KiB halo strip a depthwise 128-channel 256^2 forward sends, ~0.1-0.2 ms
// per pass, because glibc gave freed blocks of that size back to the system
// and every pass faulted them in again. Medium buffers are rounded to pages,
// large ones (from 1 MiB) to 2 MiB and aligned so the kernel can back them
// with huge pages. Small ones (the strips of a thin halo, statistics, a
// bias's gradient) are cached too, in power-of-two size classes: from
// glibc's heap they faulted ~30 fresh pages per U-Net step at P = 2, as
// glibc trimmed the heap's top after the step's frees and grew it again.
constexpr std::size_t kCachedBlock = std::size_t{64} << 10;
constexpr std::size_t kLargeBlock = std::size_t{1} << 20;
constexpr std::size_t kPage = 4096;
constexpr std::size_t kHugePage = std::size_t{2} << 20;

// Freed blocks by size. A request takes the smallest cached block that is
// at least as large and at most kSlack larger (a training step asks for the
// same sizes again, and for sizes a few pages apart: the shards of uneven
// splits, a window one halo larger), so most requests after the first step
// are served from here. Over the cap, the largest blocks go back to the
// system first: the cache keeps what is reused most, the many mid-size ones.
class BlockCache {
 public:
  struct Block {
    void* p = nullptr;
    std::size_t bytes = 0;
  };
  Block take(std::size_t bytes) {
    std::lock_guard lock(mutex_);
    auto it = free_.lower_bound(bytes);
    if (it == free_.end() || it->first > bytes + slack(bytes)) return {};
    Block b{it->second.back(), it->first};
    it->second.pop_back();
    if (it->second.empty()) free_.erase(it);
    cached_ -= b.bytes;
    return b;
  }
  // Keeps the block for reuse, making room under the cap by giving back the
  // largest blocks; a block larger than the cap itself is freed.
  void give(void* p, std::size_t bytes) {
    std::vector<void*> evicted;
    {
      std::lock_guard lock(mutex_);
      const std::size_t cap = cap_bytes();
      if (bytes > cap) {
        evicted.push_back(p);
      } else {
        while (cached_ + bytes > cap && !free_.empty()) {
          auto last = std::prev(free_.end());
          evicted.push_back(last->second.back());
          cached_ -= last->first;
          last->second.pop_back();
          if (last->second.empty()) free_.erase(last);
        }
        free_[bytes].push_back(p);
        cached_ += bytes;
      }
    }
    for (void* q : evicted)
      std::free(q);
  }
  std::size_t release() {
    std::lock_guard lock(mutex_);
    const std::size_t n = cached_;
    for (auto& [size, blocks] : free_)
      for (void* p : blocks)
        std::free(p);
    free_.clear();
    cached_ = 0;
    return n;
  }
  std::size_t cached() {
    std::lock_guard lock(mutex_);
    return cached_;
  }

 private:
  // How much larger than asked a reused block may be: an eighth, at least
  // one 2 MiB unit for large blocks (which are rounded to 2 MiB anyway).
  static std::size_t slack(std::size_t bytes) {
    return bytes >= kLargeBlock ? std::max(bytes / 8, kHugePage) : bytes / 8;
  }
  static std::size_t cap_bytes() {
    static const std::size_t cap = [] {
      try {
        return static_cast<std::size_t>(config().cpu_cache_mb) << 20;
      } catch (const Error&) {  // reported by init_process_group; allocation goes on
        return std::size_t{512} << 20;
      }
    }();
    return cap;
  }
  std::mutex mutex_;
  std::map<std::size_t, std::vector<void*>> free_;
  std::size_t cached_ = 0;
};

BlockCache& cached_blocks() {
  static auto* c = new BlockCache();  // never destroyed: storages may outlive statics
  return *c;
}

// A block's size class: small blocks the next power of two (so a class is
// reused exactly), medium ones whole pages, large ones whole huge pages.
struct SizeClass {
  std::size_t alignment, bytes;
};
SizeClass size_class(std::size_t nbytes) {
  if (nbytes < kCachedBlock) return {kCpuAlignment, std::max(kCpuAlignment, std::bit_ceil(nbytes))};
  const std::size_t unit = nbytes >= kLargeBlock ? kHugePage : kPage;
  return {unit, (nbytes + unit - 1) / unit * unit};
}

std::shared_ptr<Storage> allocate_cached_cpu(std::size_t nbytes, Device device) {
  const auto [unit, rounded] = size_class(nbytes);
  BlockCache::Block b = cached_blocks().take(rounded);
  if (!b.p) {
    b.bytes = rounded;
    b.p = std::aligned_alloc(unit, rounded);
    if (!b.p) {  // under pressure the cache goes back to the system first
      cached_blocks().release();
      b.p = std::aligned_alloc(unit, rounded);
    }
    if (!b.p) throw std::bad_alloc();
    // A hint, ignored where THP is off, and only for the huge pages this
    // buffer fills: advised, the partly used last one would be faulted in
    // whole (a 1.1 MiB buffer held 2 MiB resident).
    if (const std::size_t whole = nbytes / kHugePage * kHugePage; whole > 0)
      madvise(b.p, whole, MADV_HUGEPAGE);
  }
  return std::make_shared<Storage>(b.p, nbytes, device,
                                   [bytes = b.bytes](void* q) { cached_blocks().give(q, bytes); });
}

// Bytes held by live storages that Storage::allocate made, per device type.
struct Usage {
  std::atomic<std::size_t> current{0}, peak{0};
};
std::array<Usage, 2>& usage() {
  static std::array<Usage, 2> u;
  return u;
}
Usage& usage_of(DeviceType type) {
  return usage().at(static_cast<std::size_t>(type));
}

void count_allocation(DeviceType type, std::size_t bytes) {
  Usage& u = usage_of(type);
  const std::size_t now = u.current.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  std::size_t peak = u.peak.load(std::memory_order_relaxed);
  while (now > peak && !u.peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

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
  if (counted_) usage_of(device_.type).current.fetch_sub(nbytes_, std::memory_order_relaxed);
  if (deleter_) deleter_(data_);
}

std::shared_ptr<Storage> Storage::allocate(std::size_t nbytes, Device device) {
  std::shared_ptr<Storage> s = allocate_uncounted(nbytes, device);
  s->counted_ = true;
  count_allocation(device.type, nbytes);
  return s;
}

std::shared_ptr<Storage> Storage::allocate_uncounted(std::size_t nbytes, Device device) {
  if (device.is_cpu()) return allocate_cached_cpu(nbytes, device);
  auto find = [&] {
    std::lock_guard lock(allocator_mutex());
    auto it = allocators().find(device.type);
    return it == allocators().end() ? DeviceAllocator() : it->second;
  };
  DeviceAllocator alloc = find();
  // The first tensor on a device loads its module, which registers the
  // allocator (outside the allocators' lock, which registration takes).
  if (!alloc && detail::load_device_module(device.type)) alloc = find();
  if (!alloc)
    throw NotSupported("core", fmt::format("no allocator for device {}: {}", device.str(),
                                           detail::device_module_error(device.type)));
  return alloc(nbytes, device);
}

std::size_t release_cached_cpu_memory() {
  return cached_blocks().release();
}
std::size_t cached_cpu_memory() {
  return cached_blocks().cached();
}

MemoryStats memory_stats(DeviceType device) {
  MemoryStats m;
  const Usage& u = usage_of(device);
  m.allocated_bytes = u.current.load(std::memory_order_relaxed);
  m.peak_allocated_bytes = u.peak.load(std::memory_order_relaxed);
  if (device == DeviceType::CPU) {
    m.cached_bytes = cached_cpu_memory();
  } else if (const auto ops = detail::registered_device_ops(device)) {
    m.cached_bytes = ops->cached_bytes();  // never loads a module: nothing allocated without it
  }
  return m;
}

void reset_peak_memory_stats(DeviceType device) {
  Usage& u = usage_of(device);
  u.peak.store(u.current.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

void Storage::set_device_allocator(DeviceType type, DeviceAllocator alloc) {
  std::lock_guard lock(allocator_mutex());
  allocators()[type] = std::move(alloc);
}

}  // namespace dtensor
