// libFuzzer target: the halo planner (ops/window/halo_plan.h) on random
// geometry and rank counts. A geometry is either rejected with
// InvalidArgument (never another exception, never a crash) or planned, and
// then the plan must satisfy docs/design.md §5:
//   - owned inputs and outputs tile [0, L) and [0, O) by the chunk rule;
//   - each rank's window, with its local padding, reproduces every one of its
//     outputs' receptive fields exactly (same global positions, in order), and
//     yields exactly o1 - o0 outputs;
//   - the window is covered exactly once: its own part plus the received
//     pieces are disjoint and their union is the window;
//   - every send has the matching receive and vice versa; no self-sends; no
//     wrap (a piece lies in its sender's owned range, inside [0, L)).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "dtensor/core/errors.h"
#include "dtensor/ops/conv_params.h"
#include "ops/window/halo_plan.h"

using namespace dtensor;

namespace {

#define FUZZ_CHECK(cond)                                                          \
  do {                                                                            \
    if (!(cond)) {                                                                \
      std::fprintf(stderr, "invariant failed: %s (line %d)\n%s", #cond, __LINE__, \
                   plan.str().c_str());                                           \
      std::abort();                                                               \
    }                                                                             \
  } while (0)

// Reads little-endian integers from the fuzzer's bytes (zeros once exhausted).
struct Reader {
  const std::uint8_t* p;
  std::size_t n;
  std::uint32_t u32() {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i)
      v |= static_cast<std::uint32_t>(n ? (--n, *p++) : 0) << (8 * i);
    return v;
  }
  std::uint8_t u8() { return n ? (--n, *p++) : 0; }
};

// Mostly small values (where the edge cases live), sometimes large or negative.
std::int64_t pick(Reader& r, std::int64_t small_max, std::int64_t large_max) {
  const std::uint8_t mode = r.u8();
  const std::uint32_t v = r.u32();
  if (mode < 200) return static_cast<std::int64_t>(v % static_cast<std::uint32_t>(small_max + 1));
  if (mode < 250) return static_cast<std::int64_t>(v % static_cast<std::uint32_t>(large_max + 1));
  return -static_cast<std::int64_t>(v % 4);  // invalid: must be rejected, not crash
}

void check_plan(const HaloPlan& plan) {
  const HaloGeometry& g = plan.geometry();
  const std::int64_t L = g.length, P = g.ranks, O = plan.output_length();
  const std::int64_t E = plan.kernel_extent();
  FUZZ_CHECK(O >= 1);
  FUZZ_CHECK(E == g.dilation * (g.kernel - 1) + 1);
  FUZZ_CHECK(static_cast<std::int64_t>(plan.ranks().size()) == P);
  std::int64_t next_in = 0, next_out = 0;
  for (const auto& p : plan.ranks()) {
    // Tiling by the chunk rule.
    FUZZ_CHECK(p.input == chunk_extent(L, P, p.rank));
    FUZZ_CHECK(p.output == chunk_extent(O, P, p.rank));
    FUZZ_CHECK(p.input.offset == std::min(next_in, L));
    FUZZ_CHECK(p.output.offset == std::min(next_out, O));
    next_in = p.input.end();
    next_out = p.output.end();
    FUZZ_CHECK(p.has_output == (p.output.length > 0));
    FUZZ_CHECK(p.window.offset >= 0 && p.window.length >= 0 && p.window.end() <= L);
    if (!p.has_output) {
      FUZZ_CHECK(p.window.length == 0 && p.recv().empty());
      continue;
    }
    const std::int64_t o0 = p.output.offset, o1 = p.output.end();
    // Exactly o1 - o0 local outputs from the window with (lp, rp).
    FUZZ_CHECK(p.pad_left >= 0 && p.pad_right >= 0);
    FUZZ_CHECK(conv_output_length(p.window.length, g.kernel, g.stride, g.dilation, p.pad_left,
                                  p.pad_right) == o1 - o0);
    // Receptive fields: output j reads global j*s - pl + k*d; locally it reads
    // window position (j - o0)*s - lp + k*d. They must name the same input
    // (or both be padding). Reads are monotonic in j, so the first and last
    // outputs bound everything in between; check those and one in the middle.
    for (std::int64_t j : {o0, o0 + (o1 - o0) / 2, o1 - 1}) {
      for (std::int64_t k = 0; k < g.kernel; ++k) {
        const std::int64_t global = j * g.stride - g.pad_left + k * g.dilation;
        const std::int64_t local = (j - o0) * g.stride - p.pad_left + k * g.dilation;
        const bool global_in = global >= 0 && global < L;
        const bool local_in = local >= 0 && local < p.window.length;
        FUZZ_CHECK(global_in == local_in);
        if (global_in) FUZZ_CHECK(p.window.offset + local == global);
      }
    }
    // The window is covered exactly once: own part + pieces, disjoint, in order.
    std::vector<std::pair<std::int64_t, std::int64_t>> pieces;
    const Extent own = p.own_part();
    if (own.length > 0) pieces.push_back({own.offset, own.end()});
    for (const auto& t : p.recv()) {
      FUZZ_CHECK(t.peer != p.rank);  // no self-sends
      FUZZ_CHECK(t.peer >= 0 && t.peer < P);
      FUZZ_CHECK(t.lo < t.hi);  // no empty messages
      const Extent& src = plan.ranks()[static_cast<std::size_t>(t.peer)].input;
      FUZZ_CHECK(t.lo >= src.offset && t.hi <= src.end());  // no wrap: the sender owns it
      pieces.push_back({t.lo, t.hi});
    }
    std::sort(pieces.begin(), pieces.end());
    std::int64_t at = p.window.offset;
    for (const auto& [lo, hi] : pieces) {
      FUZZ_CHECK(lo == at);  // no gap, no overlap
      at = hi;
    }
    FUZZ_CHECK(at == p.window.end());
  }
  FUZZ_CHECK(next_in == L || P == 0);
  FUZZ_CHECK(next_out == O);
  // Sends and receives match one to one.
  std::size_t sends = 0, recvs = 0;
  for (const auto& p : plan.ranks()) {
    recvs += p.recv().size();
    for (const auto& t : p.send()) {
      ++sends;
      FUZZ_CHECK(t.peer != p.rank);
      const auto& peer = plan.ranks()[static_cast<std::size_t>(t.peer)];
      bool found = false;
      for (const auto& u : peer.recv())
        found = found || (u.peer == p.rank && u.lo == t.lo && u.hi == t.hi);
      FUZZ_CHECK(found);
    }
  }
  FUZZ_CHECK(sends == recvs);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Reader r{data, size};
  HaloGeometry g;
  g.length = pick(r, 64, 5000);
  g.ranks = pick(r, 9, 300);
  g.kernel = pick(r, 9, 100);
  g.stride = pick(r, 5, 100);
  g.dilation = pick(r, 4, 40);
  g.pad_left = pick(r, 8, 400);
  g.pad_right = pick(r, 8, 400);
  try {
    const HaloPlan plan(g);
    check_plan(plan);
  } catch (const InvalidArgument& e) {
    // Rejected: must be a geometry that is invalid or has no output, and the
    // message must name the parameter ("input", "mesh", "stride", ...).
    const bool invalid =
        g.length < 0 || g.ranks < 1 || g.kernel < 1 || g.stride < 1 || g.dilation < 1 ||
        g.pad_left < 0 || g.pad_right < 0 ||
        conv_output_length(g.length, g.kernel, g.stride, g.dilation, g.pad_left, g.pad_right) < 1;
    if (!invalid) {
      std::fprintf(stderr, "valid geometry rejected: %s\n", e.what());
      std::abort();
    }
    const char* m = e.what();
    bool named = false;
    for (const char* name : {"input", "mesh", "weight", "kernel", "stride", "dilation", "padding"})
      named = named || std::strstr(m, name) != nullptr;
    if (!named) {
      std::fprintf(stderr, "message names no parameter: %s\n", m);
      std::abort();
    }
  }
  return 0;
}
