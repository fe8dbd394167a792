// The oneDNN passes' scratch stack (backends/onednn/scratch_arena.h): what is
// taken stays intact until released, released bytes are reused, and a fully
// released arena holds one chunk as large as all it had, and no more.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "backends/onednn/scratch_arena.h"

using dtensor::onednn::ScratchArena;

namespace {

// A byte pattern unique to buffer `id`, to find a buffer another one overwrote.
void fill(void* p, std::size_t n, int id) {
  std::memset(p, id & 0xff, n);
}
bool holds(const void* p, std::size_t n, int id) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i)
    if (b[i] != static_cast<unsigned char>(id & 0xff)) return false;
  return true;
}

}  // namespace

TEST_CASE("scratch arena: buffers taken are aligned, disjoint and intact until released",
          "[onednn][arena]") {
  ScratchArena a;
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::size_t> size(1, 700 * 1024);
  // Nested scopes as the passes make them: a mark, some buffers, an inner
  // scope released before the outer one goes on.
  for (int round = 0; round < 20; ++round) {
    const auto outer = a.mark();
    std::vector<std::pair<void*, std::size_t>> live;
    for (int i = 0; i < 6; ++i) {
      const std::size_t n = size(rng);
      void* p = a.take(n);
      REQUIRE(reinterpret_cast<std::uintptr_t>(p) % 4096 == 0);
      fill(p, n, static_cast<int>(live.size()) + 1);
      live.emplace_back(p, n);
      if (i == 2) {
        const auto inner = a.mark();
        void* q = a.take(size(rng));
        fill(q, 1, 0xee);
        a.release(inner);
      }
    }
    for (std::size_t i = 0; i < live.size(); ++i) {
      INFO("round " << round << " buffer " << i);
      CHECK(holds(live[i].first, live[i].second, static_cast<int>(i) + 1));
    }
    a.release(outer);
  }
}

TEST_CASE("scratch arena: released bytes are reused and a full release leaves one chunk",
          "[onednn][arena]") {
  ScratchArena a;
  CHECK(a.capacity() == 0);
  void* first = a.take(100 * 1024);
  a.release({});
  // The same request after a release gets the same bytes: nothing new mapped.
  const std::size_t cap = a.capacity();
  CHECK(a.take(100 * 1024) == first);
  CHECK(a.capacity() == cap);
  a.release({});

  // A pass that needs more than one chunk: a second one is mapped, and the
  // full release merges them, so the same pass then fits in one chunk.
  for (int i = 0; i < 3; ++i)
    a.take(cap);
  const std::size_t grown = a.capacity();
  CHECK(grown >= 3 * cap);
  a.release({});
  CHECK(a.capacity() == grown);
  void* p = a.take(cap);
  void* q = a.take(cap);
  void* r = a.take(cap);
  CHECK(static_cast<char*>(q) == static_cast<char*>(p) + cap);
  CHECK(static_cast<char*>(r) == static_cast<char*>(q) + cap);
  CHECK(a.capacity() == grown);  // it kept what the pass needed, no more
  a.release({});
}
