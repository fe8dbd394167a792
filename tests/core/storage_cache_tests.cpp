// The CPU block cache (core/storage.cpp): buffers of 64 KiB and more are kept
// when freed and handed back for a request of the same size, so a pass that
// repeats does not fault fresh pages in; smaller ones go back to malloc.
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

TEST_CASE("storage cache: small buffers are not kept and large ones are 2 MiB aligned",
          "[core][storage]") {
  release_cached_cpu_memory();
  { auto small = Storage::allocate(60 << 10, Device::cpu()); }
  CHECK(cached_cpu_memory() == 0);
  auto large = Storage::allocate(std::size_t{5} << 20, Device::cpu());
  CHECK(reinterpret_cast<std::uintptr_t>(large->data()) % (std::size_t{2} << 20) == 0);
  auto medium = Storage::allocate(std::size_t{200} << 10, Device::cpu());
  CHECK(reinterpret_cast<std::uintptr_t>(medium->data()) % 4096 == 0);
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

TEST_CASE("memory_stats: allocated, peak and cached bytes; reset_peak_memory_stats",
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
  // The 3 MiB block is kept (rounded to 2 MiB units), the small one is not.
  CHECK(after.cached_bytes == (std::size_t{4} << 20));
  reset_peak_memory_stats(DeviceType::CPU);
  CHECK(memory_stats(DeviceType::CPU).peak_allocated_bytes == before.allocated_bytes);
  // Memory wrapped from elsewhere is not the allocator's: not counted.
  static char outside[64];
  { Storage wrapped(outside, sizeof outside, Device::cpu(), nullptr); }
  CHECK(memory_stats(DeviceType::CPU).allocated_bytes == before.allocated_bytes);
  release_cached_cpu_memory();
  CHECK(memory_stats(DeviceType::CPU).cached_bytes == 0);
}
