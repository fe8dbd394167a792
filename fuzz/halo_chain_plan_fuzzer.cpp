// libFuzzer target: the plan of a fused chain (ops/window/halo_chain_plan.h)
// on random 1-D chains, lengths and rank counts, with every padding mode.
// A chain is either turned away by chain_boundary_refusal (then nothing more
// is asked of it) or planned on every rank without an exception, and then:
//   - convolution k's held input is convolution k-1's output range (the
//     window for the first), and the last one's output is exactly the
//     rank's share;
//   - every position an output reads is held, or lies outside [0, L) (not
//     in a ring) and is exactly the local padding (pad_left before the held
//     rows, pad_right after);
//   - a padding position's source under the convolution's mode (reflect:
//     -i -> i; replicate: the edge) is a held row: the rank can fill it;
//   - a ring (every convolution circular) has no local padding at all.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "dtensor/core/errors.h"
#include "dtensor/placement/chunk.h"
#include "ops/window/halo_chain_plan.h"

using namespace dtensor;
using detail::ChainWindowDim;

namespace {

// Reads bytes from the fuzzer's input (zeros once exhausted).
struct Reader {
  const std::uint8_t* p;
  std::size_t n;
  std::uint8_t u8() { return n ? (--n, *p++) : 0; }
};

std::string describe(std::int64_t L, std::int64_t P, std::int64_t r,
                     const std::vector<ChainWindowDim>& convs) {
  std::string s = "L " + std::to_string(L) + " P " + std::to_string(P) + " rank " +
                  std::to_string(r) + " convs";
  for (const auto& c : convs)
    s += " (extent " + std::to_string(c.extent) + " left " + std::to_string(c.pad_left) + " " +
         std::string(boundary_name(c.boundary)) + ")";
  return s;
}

#define FUZZ_CHECK(cond)                                                            \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "invariant failed: %s (line %d)\n%s\n", #cond, __LINE__, \
                   describe(L, P, r, convs).c_str());                               \
      std::abort();                                                                 \
    }                                                                               \
  } while (0)

// Where a position outside [0, L) reads under a padding mode (-1: a zero).
std::int64_t mode_source(std::int64_t i, std::int64_t L, Boundary b) {
  if (b == Boundary::Reflect) return i < 0 ? -i : 2 * (L - 1) - i;
  if (b == Boundary::Replicate) return i < 0 ? 0 : L - 1;
  return -1;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Reader in{data, size};
  const std::int64_t L = 1 + in.u8() % 40, P = 1 + in.u8() % 8;
  const bool ring = in.u8() % 4 == 0;
  std::vector<ChainWindowDim> convs(static_cast<std::size_t>(1 + in.u8() % 4));
  for (auto& c : convs) {
    c.extent = 1 + in.u8() % 9;
    c.pad_left = in.u8() % c.extent;
    const Boundary modes[] = {Boundary::Zeros, Boundary::Reflect, Boundary::Replicate};
    c.boundary = ring ? Boundary::Circular : modes[in.u8() % 3];
  }
  std::int64_t smallest = L, r = -1;
  for (std::int64_t q = 0; q < P; ++q)
    if (chunk_extent(L, P, q).length > 0)
      smallest = std::min(smallest, chunk_extent(L, P, q).length);
  if (detail::chain_boundary_refusal(L, smallest, convs)) return 0;
  const WindowDim window = detail::chain_window(convs);
  FUZZ_CHECK(window.output_length_for(L) == L);
  for (r = 0; r < P; ++r) {
    const Extent owned = chunk_extent(L, P, r);
    std::int64_t wb = 0, we = 0;
    if (owned.length > 0) {
      const auto [first, last] = window.reads(L, owned.offset, owned.end());
      wb = ring ? first : std::max<std::int64_t>(0, first);
      we = ring ? last + 1 : std::min<std::int64_t>(L, last + 1);
    }
    detail::ChainDimPlan plan;
    try {
      plan = detail::plan_chain_dim(L, owned.offset, owned.end(), wb, we, convs);
    } catch (const InvalidArgument& e) {
      std::fprintf(stderr, "a chain the refusal let through was not planned: %s\n", e.what());
      FUZZ_CHECK(false);
    }
    FUZZ_CHECK(plan.steps.size() == convs.size());
    if (owned.length == 0) continue;
    std::int64_t held_begin = wb, held_end = we;
    for (std::size_t k = 0; k < convs.size(); ++k) {
      const auto& s = plan.steps[k];
      const ChainWindowDim& c = convs[k];
      FUZZ_CHECK(s.in_begin == held_begin && s.in_end == held_end);
      if (ring) FUZZ_CHECK(s.pad_left == 0 && s.pad_right == 0);
      // What the outputs read: [out_begin - l, out_end - l + extent - 1).
      const std::int64_t lo = s.out_begin - c.pad_left;
      const std::int64_t hi = s.out_end - c.pad_left + c.extent - 1;
      FUZZ_CHECK(s.in_begin - lo == s.pad_left && hi - s.in_end == s.pad_right);
      for (std::int64_t i = lo; i < hi; ++i) {
        if (i >= s.in_begin && i < s.in_end) continue;
        FUZZ_CHECK(!ring && (i < 0 || i >= L));  // not held: the input's padding
        const std::int64_t from = mode_source(i, L, c.boundary);
        FUZZ_CHECK(from < 0 || (from >= s.in_begin && from < s.in_end));
      }
      held_begin = s.out_begin;
      held_end = s.out_end;
    }
    FUZZ_CHECK(held_begin == owned.offset && held_end == owned.end());
  }
  return 0;
}
