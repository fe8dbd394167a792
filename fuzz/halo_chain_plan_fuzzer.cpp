// libFuzzer target: the plan of a fused chain (ops/window/halo_chain_plan.h)
// on random 1-D chains, lengths and rank counts, with every padding mode,
// zero-padded chains that resample (strides 1-3, any right padding), and
// zero-padded chains that upsample (transposed windows of strides 1-3, any
// padding, among sliding layers of stride 1).
// A chain is either turned away by chain_boundary_refusal (then nothing more
// is asked of it) or planned on every rank without an exception, and then:
//   - convolution k's held input is convolution k-1's output range (the
//     window for the first), and the last one's output is exactly the
//     rank's share;
//   - every position an output reads is held (less the rows the step skips),
//     or lies outside [0, L_k) (not in a ring) and is exactly the local
//     padding (pad_left before the held rows, pad_right after);
//   - a padding position's source under the convolution's mode (reflect:
//     -i -> i; replicate: the edge) is a held row: the rank can fill it;
//   - a ring (every convolution circular) has no local padding at all; a
//     transposed window none either (its reach beyond the input reads
//     nothing), and every input it reads inside the input is held;
//   - every output range lies inside [0, L_k+1), and the ranks' shares of
//     every intermediate tile it, each inside what its rank computes
//     wherever a norm there would be accepted (chain_statistics_refusal).
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
    s += " (extent " + std::to_string(c.extent) + " left " + std::to_string(c.pad_left) +
         " right " + std::to_string(c.pad_right()) + " stride " + std::to_string(c.stride) +
         (c.transposed ? " transposed " : " ") + std::string(boundary_name(c.boundary)) + ")";
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
  const std::uint8_t kind_byte = in.u8();
  const std::uint8_t kind = kind_byte % 4;
  // Resampling and upsampling: zeros only. (Upsampling is kind 3's byte 7
  // mod 8: older seeds keep their meaning.)
  const bool ring = kind == 0, upsampling = kind_byte % 8 == 7,
             resampling = kind == 3 && !upsampling;
  std::vector<ChainWindowDim> convs(static_cast<std::size_t>(1 + in.u8() % 4));
  // Each layer's input's length, then the output's.
  std::vector<std::int64_t> lengths{L};
  for (std::size_t k = 0; k < convs.size(); ++k) {
    ChainWindowDim& c = convs[k];
    c.extent = 1 + in.u8() % 9;
    c.pad_left = in.u8() % c.extent;
    const Boundary modes[] = {Boundary::Zeros, Boundary::Reflect, Boundary::Replicate};
    c.boundary = ring                       ? Boundary::Circular
                 : resampling || upsampling ? Boundary::Zeros
                                            : modes[in.u8() % 3];
    if (resampling) {
      c.stride = 1 + in.u8() % 3;
      c.right = in.u8() % c.extent;
    }
    if (upsampling) {
      c.right = in.u8() % c.extent;
      if (in.u8() % 2 == 0) {  // a transposed window (an upsample's footprint: any)
        c.transposed = true;
        c.stride = 1 + in.u8() % 3;
      }
    }
    if (c.output_length(lengths.back()) < 1) {  // no output: the chain ends before it
      convs.resize(k);
      break;
    }
    lengths.push_back(c.output_length(lengths.back()));
  }
  if (convs.empty()) return 0;
  const std::int64_t out_length = lengths.back();
  std::int64_t smallest = L, r = -1;
  for (std::int64_t q = 0; q < P; ++q)
    if (chunk_extent(L, P, q).length > 0)
      smallest = std::min(smallest, chunk_extent(L, P, q).length);
  if (detail::chain_boundary_refusal(L, smallest, convs)) return 0;
  const WindowDim window = detail::chain_window(convs);
  FUZZ_CHECK(window.output_length_for(L) == out_length);
  // Per intermediate (each layer's output): how many ranks' shares hold each cell.
  std::vector<std::vector<int>> owners(convs.size());
  for (std::size_t k = 0; k < convs.size(); ++k)
    owners[k].assign(static_cast<std::size_t>(lengths[k + 1]), 0);
  for (r = 0; r < P; ++r) {
    const Extent owned = chunk_extent(out_length, P, r);
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
      FUZZ_CHECK(s.skip_left >= 0 && s.skip_right >= 0 &&
                 s.skip_left + s.skip_right <= s.in_end - s.in_begin);
      if (ring) FUZZ_CHECK(s.pad_left == 0 && s.pad_right == 0);
      if (!ring) FUZZ_CHECK(s.out_begin >= 0 && s.out_end <= lengths[k + 1]);
      FUZZ_CHECK(s.out_begin <= s.out_end);
      // What the outputs read, and what of the held input is read (a
      // transposed window's reach beyond the input reads nothing).
      auto [lo, hi] = c.reads(s.out_begin, s.out_end);
      if (c.transposed && s.out_begin < s.out_end) {
        lo = std::max<std::int64_t>(lo, 0);
        hi = std::min(hi, lengths[k]);
      }
      const std::int64_t used_begin = s.in_begin + s.skip_left, used_end = s.in_end - s.skip_right;
      FUZZ_CHECK(used_begin - lo == s.pad_left && hi - used_end == s.pad_right);
      for (std::int64_t i = lo; i < hi; ++i) {
        if (i >= used_begin && i < used_end) continue;
        FUZZ_CHECK(!ring && (i < 0 || i >= lengths[k]));  // not held: the input's padding
        const std::int64_t from = mode_source(i, lengths[k], c.boundary);
        FUZZ_CHECK(from < 0 || (from >= used_begin && from < used_end));
      }
      if (!ring) {
        FUZZ_CHECK(s.owned_begin <= s.owned_end && s.owned_begin >= 0 &&
                   s.owned_end <= lengths[k + 1]);
        for (std::int64_t o = s.owned_begin; o < s.owned_end; ++o)
          ++owners[k][static_cast<std::size_t>(o)];
        // A norm here counts the share: the rank must compute it.
        if (!detail::chain_statistics_refusal(L, k + 1, convs))
          FUZZ_CHECK(s.owned_begin == s.owned_end ||
                     (s.owned_begin >= s.out_begin && s.owned_end <= s.out_end));
      }
      held_begin = s.out_begin;
      held_end = s.out_end;
    }
    FUZZ_CHECK(held_begin == owned.offset && held_end == owned.end());
  }
  r = -1;
  if (!ring)
    for (std::size_t k = 0; k < convs.size(); ++k)
      for (const int n : owners[k])
        FUZZ_CHECK(n == 1);  // the shares tile the intermediate
  return 0;
}
