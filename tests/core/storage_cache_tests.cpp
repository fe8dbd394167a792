// The CPU block cache (core/storage.cpp): every buffer is kept when freed
// and handed back for a request of the same size, so a pass that repeats
// does not fault fresh pages in; small ones (under 64 KiB) in power-of-two
// size classes, larger ones rounded to pages or 2 MiB.
#include <catch2/catch.hpp>

#include <cstdint>

#include "dtensor/core/storage.h"

using namespace dtensor;

TEST_CASE("storage cache: a freed buffer of 64 KiB or more serves the next request of its size",
          "[core][storage]") {
  release_cached_cpu_memory();
  REQUIRE(cached_cpu_memory() == 0);
  for (const std::size_t n :
       {std::size_t{64} << 10, std::size_t{393} << 10, (std::size_t{3} << 20) + 5}) {
    INFO("bytes " << n);
    void* first = nullptr;
    {
      auto s = Storage::allocate(n, Device::cpu());
      first = s->data();
      CHECK(cached_cpu_memory() == 0);
    }
    // Kept, rounded up to pages (or to 2 MiB from 1 MiB up).
    const std::size_t kept = cached_cpu_memory();
    CHECK(kept >= n);
    CHECK(kept < n + (n >= (std::size_t{1} << 20) ? std::size_t{2} << 20 : 4096));
    {
      auto again = Storage::allocate(n, Device::cpu());
      CHECK(again->data() == first);
      CHECK(cached_cpu_memory() == 0);
    }
    CHECK(release_cached_cpu_memory() == kept);
    CHECK(cached_cpu_memory() == 0);
  }
}

TEST_CASE("storage cache: small buffers are kept by power-of-two class, large ones 2 MiB aligned",
          "[core][storage]") {
  release_cached_cpu_memory();
  void* first = nullptr;
  {
    auto small = Storage::allocate(40 << 10, Device::cpu());
    first = small->data();
  }
  CHECK(cached_cpu_memory() == (64 << 10));
  {
    // Another size of the same class (33..64 KiB) takes the same block.
    auto same_class = Storage::allocate(50 << 10, Device::cpu());
    CHECK(same_class->data() == first);
    // One of a smaller class does not.
    auto smaller = Storage::allocate(20 << 10, Device::cpu());
    CHECK(smaller->data() != first);
    CHECK(reinterpret_cast<std::uintptr_t>(smaller->data()) % 64 == 0);
  }
  CHECK(cached_cpu_memory() == (64 << 10) + (32 << 10));
  CHECK(release_cached_cpu_memory() == (64 << 10) + (32 << 10));
  auto large = Storage::allocate(std::size_t{5} << 20, Device::cpu());
  CHECK(reinterpret_cast<std::uintptr_t>(large->data()) % (std::size_t{2} << 20) == 0);
  auto medium = Storage::allocate(std::size_t{200} << 10, Device::cpu());
  CHECK(reinterpret_cast<std::uintptr_t>(medium->data()) % 4096 == 0);
  // A 0-byte tensor still has a distinct, non-null block.
  auto empty = Storage::allocate(0, Device::cpu());
  CHECK(empty->data() != nullptr);
}

TEST_CASE("storage cache: a request takes a kept block at most an eighth larger",
          "[core][storage]") {
  release_cached_cpu_memory();
  void* first = nullptr;
  { first = Storage::allocate(std::size_t{400} << 10, Device::cpu())->data(); }
  {
    // 380 KiB fits the 400 KiB block (within an eighth): reused.
    auto near = Storage::allocate(std::size_t{380} << 10, Device::cpu());
    CHECK(near->data() == first);
  }
  {
    // 200 KiB would waste half of it: a fresh block.
    auto far = Storage::allocate(std::size_t{200} << 10, Device::cpu());
    CHECK(far->data() != first);
  }
  release_cached_cpu_memory();
}

TEST_CASE("memory_stats: allocated, peak and cached bytes, reset_peak_memory_stats",
          "[core][storage]") {
  release_cached_cpu_memory();
  const MemoryStats before = memory_stats(DeviceType::CPU);
  reset_peak_memory_stats(DeviceType::CPU);
  CHECK(memory_stats(DeviceType::CPU).peak_allocated_bytes == before.allocated_bytes);
  {
    auto a = Storage::allocate(std::size_t{3} << 20, Device::cpu());
    auto b = Storage::allocate(1000, Device::cpu());
    const MemoryStats now = memory_stats(DeviceType::CPU);
    CHECK(now.allocated_bytes == before.allocated_bytes + (std::size_t{3} << 20) + 1000);
    CHECK(now.peak_allocated_bytes == now.allocated_bytes);
    CHECK(now.cached_bytes == 0);
  }
  const MemoryStats after = memory_stats(DeviceType::CPU);
  CHECK(after.allocated_bytes == before.allocated_bytes);
  CHECK(after.peak_allocated_bytes == before.allocated_bytes + (std::size_t{3} << 20) + 1000);
  // Both are kept: the 3 MiB block rounded to 2 MiB units, the 1000 bytes
  // in the 1 KiB class.
  CHECK(after.cached_bytes == (std::size_t{4} << 20) + 1024);
  reset_peak_memory_stats(DeviceType::CPU);
  CHECK(memory_stats(DeviceType::CPU).peak_allocated_bytes == before.allocated_bytes);
  // Memory wrapped from elsewhere is not the allocator's: not counted.
  static char outside[64];
  { Storage wrapped(outside, sizeof outside, Device::cpu(), nullptr); }
  CHECK(memory_stats(DeviceType::CPU).allocated_bytes == before.allocated_bytes);
  release_cached_cpu_memory();
  CHECK(memory_stats(DeviceType::CPU).cached_bytes == 0);
}
