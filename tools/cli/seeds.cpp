#include "tools/cli/seeds.h"

namespace dtensor::cli {
namespace {

// splitmix64: decorrelates the per-tensor seeds (seed, seed+1, ... would give
// the tensors of run S and those of run S+1 shifted copies of each other).
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

Seeds Seeds::from(std::uint64_t seed) {
  const std::uint64_t base = mix(seed);
  return {mix(base + 1), mix(base + 2), mix(base + 3), mix(base + 4)};
}

}  // namespace dtensor::cli
