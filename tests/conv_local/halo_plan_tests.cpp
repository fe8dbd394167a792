// The halo plan of docs/design.md §5, checked three ways: structural invariants over
// many random geometries, a full single-process simulation of the halo algorithm
// (forward, grad_input with the add-back, grad_weight/grad_bias partial sums)
// against the naive reference convolution, and named cases for defects 3-4 of
// PyTorch's _tp_conv.py (docs/design.md §2) and the edge geometries.
#include <catch2/catch.hpp>

#include <cmath>
#include <optional>
#include <random>
#include <vector>

#include "dtensor/ops/conv_params.h"
#include "ops/window/halo_plan.h"
#include "tools/reference/reference_conv.h"

using namespace dtensor;
using dtensor::reference::ref_conv_forward;
using dtensor::reference::ref_conv_grad_bias;
using dtensor::reference::ref_conv_grad_input;
using dtensor::reference::ref_conv_grad_weight;

namespace {

// A random 1-D geometry with at least one output. Lengths and padding are drawn
// so that narrow shards (multi-hop halos), empty trailing shards, strides larger
// than the kernel and windows wholly in the padding all occur.
HaloGeometry random_geometry(std::mt19937_64& rng, std::int64_t ranks) {
  auto uni = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  for (;;) {
    HaloGeometry g;
    g.ranks = ranks;
    g.length = uni(0, 1) ? uni(0, 12) : uni(0, 48);
    g.kernel = uni(1, 7);
    g.stride = uni(1, 4);
    g.dilation = uni(1, 3);
    const std::int64_t extent = g.dilation * (g.kernel - 1) + 1;
    const std::int64_t max_pad = uni(0, 3) == 0 ? 2 * extent : 4;
    g.pad_left = uni(0, max_pad);
    g.pad_right = uni(0, max_pad);
    if (conv_output_length(g.length, g.kernel, g.stride, g.dilation, g.pad_left, g.pad_right) >= 1)
      return g;
  }
}

ConvParams params_1d(std::int64_t s, std::int64_t d, std::int64_t pl, std::int64_t pr,
                     std::int64_t groups = 1) {
  ConvParams p;
  p.stride = {s};
  p.dilation = {d};
  p.padding = {{pl, pr}};
  p.groups = groups;
  return p;
}

std::optional<HaloTransfer> find_transfer(const std::vector<HaloTransfer>& v, std::int64_t peer) {
  for (const auto& t : v)
    if (t.peer == peer) return t;
  return std::nullopt;
}

// Receptive fields and window sizes: with (lp, rp), the local convolution over
// the window reads, for each output j, exactly the input positions the global
// convolution reads, and the window is exactly long enough for o1 - o0 outputs.
void check_windows(const HaloPlan& plan) {
  const HaloGeometry& g = plan.geometry();
  const std::int64_t E = plan.kernel_extent();
  std::int64_t covered_outputs = 0;
  std::int64_t expected_output_start = 0;
  for (const auto& p : plan.ranks()) {
    INFO("rank " << p.rank);
    // Owned ranges follow the chunk rule and tile [0, L) and [0, O) in order.
    CHECK(p.input == chunk_extent(g.length, g.ranks, p.rank));
    CHECK(p.output == chunk_extent(plan.output_length(), g.ranks, p.rank));
    CHECK(p.output.offset == expected_output_start);
    expected_output_start = p.output.end();
    covered_outputs += p.output.length;
    CHECK(p.has_output == (p.output.length > 0));
    if (!p.has_output) {
      CHECK(p.window.length == 0);
      CHECK(p.recv().empty());
      continue;
    }
    CHECK(p.pad_left >= 0);
    CHECK(p.pad_right >= 0);
    CHECK(p.window.offset >= 0);
    CHECK(p.window.end() <= g.length);
    // The local convolution yields exactly o1 - o0 outputs, and the division is exact.
    const std::int64_t span = p.window.length + p.pad_left + p.pad_right;
    CHECK((span - E) % g.stride == 0);
    CHECK(conv_output_length(p.window.length, g.kernel, g.stride, g.dilation, p.pad_left,
                             p.pad_right) == p.output.length);
    for (std::int64_t j = p.output.offset; j < p.output.end(); ++j) {
      const std::int64_t jl = j - p.output.offset;
      for (std::int64_t t = 0; t < g.kernel; ++t) {
        const std::int64_t global = j * g.stride - g.pad_left + t * g.dilation;
        const std::int64_t local = jl * g.stride - p.pad_left + t * g.dilation;
        const bool global_is_data = global >= 0 && global < g.length;
        const bool local_is_data = local >= 0 && local < p.window.length;
        INFO("output " << j << " tap " << t << " global " << global << " local " << local);
        REQUIRE(global_is_data == local_is_data);
        if (local_is_data) CHECK(p.window.offset + local == global);
      }
    }
    if (p.window_in_padding) {
      CHECK(p.window.length == 0);
      CHECK((p.need_first > g.length - 1 || p.need_last < 0));
    } else {
      // Tight: the window's first and last positions are read by some output.
      CHECK(p.window.offset == std::max<std::int64_t>(p.need_first, 0));
      CHECK(p.window.end() - 1 == std::min<std::int64_t>(p.need_last, g.length - 1));
    }
  }
  CHECK(covered_outputs == plan.output_length());
}

// Traffic: matched pairs, no self-sends, no wrap, and the window is tiled by the
// own part plus the receives, in order.
void check_transfers(const HaloPlan& plan) {
  const auto& ranks = plan.ranks();
  std::size_t n_send = 0, n_recv = 0;
  for (const auto& p : ranks) {
    INFO("rank " << p.rank);
    n_send += p.send().size();
    n_recv += p.recv().size();
    for (const auto& t : p.recv()) {
      CHECK(t.peer != p.rank);
      CHECK(t.lo < t.hi);
      const auto& q = ranks[static_cast<std::size_t>(t.peer)];
      CHECK(t.lo >= q.input.offset);
      CHECK(t.hi <= q.input.end());
      CHECK(t.lo >= p.window.offset);
      CHECK(t.hi <= p.window.end());
      const std::optional<HaloTransfer> s = find_transfer(q.send(), p.rank);
      REQUIRE(s.has_value());
      CHECK(s->lo == t.lo);
      CHECK(s->hi == t.hi);
    }
    for (const auto& t : p.send()) {
      CHECK(t.peer != p.rank);
      const auto& q = ranks[static_cast<std::size_t>(t.peer)];
      const std::optional<HaloTransfer> r = find_transfer(q.recv(), p.rank);
      REQUIRE(r.has_value());
      CHECK(*r == HaloTransfer{p.rank, t.lo, t.hi});
    }
    // Exactly the ranks whose owned range meets the window send to it (no wrap,
    // no empty messages).
    for (const auto& q : ranks) {
      if (q.rank == p.rank) continue;
      const bool meets =
          std::max(q.input.offset, p.window.offset) < std::min(q.input.end(), p.window.end());
      CHECK(meets == (find_transfer(p.recv(), q.rank).has_value()));
    }
    // Own part + receives tile the window.
    if (p.window.length > 0) {
      std::vector<std::pair<std::int64_t, std::int64_t>> pieces;
      for (const auto& t : p.recv())
        pieces.emplace_back(t.lo, t.hi);
      const Extent own = p.own_part();
      if (own.length > 0) pieces.emplace_back(own.offset, own.end());
      std::sort(pieces.begin(), pieces.end());
      std::int64_t at = p.window.offset;
      for (const auto& [lo, hi] : pieces) {
        CHECK(lo == at);
        at = hi;
      }
      CHECK(at == p.window.end());
    }
    CHECK(p.grad_send() == p.recv());
    CHECK(p.grad_recv() == p.send());
  }
  CHECK(n_send == n_recv);
  if (plan.geometry().ranks == 1) CHECK_FALSE(plan.needs_exchange());
}

// The whole halo algorithm in one process: each "rank" holds its shard, gathers
// its window from its own shard and the peers' sends, runs the reference on it,
// and the backward scatters the window gradient back and adds it up. Results
// must equal the global reference convolution.
void simulate(const HaloPlan& plan, std::int64_t batch, std::int64_t channels,
              std::int64_t out_channels, std::int64_t groups, std::uint64_t seed) {
  const HaloGeometry& g = plan.geometry();
  const ConvParams global_p = params_1d(g.stride, g.dilation, g.pad_left, g.pad_right, groups);
  const Tensor x = Tensor::rand({batch, channels, g.length}, DType::F64, seed);
  const Tensor w = Tensor::rand({out_channels, channels / groups, g.kernel}, DType::F64, seed + 1);
  const Tensor b = Tensor::rand({out_channels}, DType::F64, seed + 2);
  const Tensor gy = Tensor::rand({batch, out_channels, plan.output_length()}, DType::F64, seed + 3);
  const Tensor y_ref = ref_conv_forward(x, w, b, global_p);
  const Tensor gx_ref = ref_conv_grad_input(gy, w, x.shape(), global_p);
  const Tensor gw_ref = ref_conv_grad_weight(gy, x, w.shape(), global_p);
  const Tensor gb_ref = ref_conv_grad_bias(gy);
  REQUIRE(y_ref.size(2) == plan.output_length());

  const auto& ranks = plan.ranks();
  const std::size_t P = ranks.size();
  std::vector<Tensor> shard(P), window(P), grad_window(P);
  for (std::size_t r = 0; r < P; ++r)
    shard[r] = x.narrow(2, ranks[r].input.offset, ranks[r].input.length).clone();

  // Forward: assemble windows from the shards, only through planned transfers.
  Tensor y = Tensor::zeros(y_ref.shape(), DType::F64);
  Tensor gw = Tensor::zeros(w.shape(), DType::F64);
  Tensor gb = Tensor::zeros(b.shape(), DType::F64);
  for (std::size_t r = 0; r < P; ++r) {
    const HaloRankPlan& p = ranks[r];
    if (!p.has_output) continue;  // sends only
    Tensor win = Tensor::zeros({batch, channels, p.window.length}, DType::F64);
    const Extent own = p.own_part();
    if (own.length > 0)
      win.narrow(2, own.offset - p.window.offset, own.length)
          .copy_(shard[r].narrow(2, own.offset - p.input.offset, own.length));
    for (const auto& t : p.recv()) {
      const HaloRankPlan& q = ranks[static_cast<std::size_t>(t.peer)];
      const std::optional<HaloTransfer> s = find_transfer(q.send(), p.rank);
      REQUIRE(s.has_value());
      win.narrow(2, t.lo - p.window.offset, t.length())
          .copy_(shard[static_cast<std::size_t>(t.peer)].narrow(2, s->lo - q.input.offset,
                                                                s->length()));
    }
    window[r] = win;
    const ConvParams local_p = params_1d(g.stride, g.dilation, p.pad_left, p.pad_right, groups);
    const Tensor y_r = ref_conv_forward(win, w, b, local_p);
    REQUIRE(y_r.size(2) == p.output.length);
    y.narrow(2, p.output.offset, p.output.length).copy_(y_r);

    const Tensor gy_r = gy.narrow(2, p.output.offset, p.output.length).clone();
    grad_window[r] = ref_conv_grad_input(gy_r, w, win.shape(), local_p);
    gw.add_(ref_conv_grad_weight(gy_r, win, w.shape(), local_p));
    gb.add_(ref_conv_grad_bias(gy_r));
  }
  CHECK(max_abs_diff(y, y_ref) < 1e-12);

  // Backward: each rank keeps its own part of the window gradient and adds what
  // the peers send back (the reverse of the forward gather).
  Tensor gx = Tensor::zeros(x.shape(), DType::F64);
  for (std::size_t r = 0; r < P; ++r) {
    const HaloRankPlan& p = ranks[r];
    Tensor gx_r = Tensor::zeros({batch, channels, p.input.length}, DType::F64);
    const Extent own = p.own_part();
    if (p.has_output && own.length > 0) {
      gx_r.narrow(2, own.offset - p.input.offset, own.length)
          .add_(grad_window[r].narrow(2, own.offset - p.window.offset, own.length));
    }
    for (const auto& t : p.grad_recv()) {
      const HaloRankPlan& q = ranks[static_cast<std::size_t>(t.peer)];
      const std::optional<HaloTransfer> s = find_transfer(q.grad_send(), p.rank);
      REQUIRE(s.has_value());
      REQUIRE(*s == HaloTransfer{p.rank, t.lo, t.hi});
      gx_r.narrow(2, t.lo - p.input.offset, t.length())
          .add_(grad_window[static_cast<std::size_t>(t.peer)].narrow(2, s->lo - q.window.offset,
                                                                     s->length()));
    }
    gx.narrow(2, p.input.offset, p.input.length).copy_(gx_r);
  }
  CHECK(max_abs_diff(gx, gx_ref) < 1e-12);
  CHECK(max_abs_diff(gw, gw_ref) < 1e-11);
  CHECK(max_abs_diff(gb, gb_ref) < 1e-11);
}

void check_all(const HaloGeometry& g, std::uint64_t seed = 7) {
  const HaloPlan plan(g);
  INFO(plan.str());
  check_windows(plan);
  check_transfers(plan);
  simulate(plan, 2, 2, 3, 1, seed);
}

HaloGeometry geo(std::int64_t L, std::int64_t P, std::int64_t K, std::int64_t s, std::int64_t d,
                 std::int64_t pl, std::int64_t pr) {
  return HaloGeometry{L, P, K, s, d, pl, pr};
}

}  // namespace

TEST_CASE("chunk_extent follows torch.chunk, including empty trailing shards", "[chunk]") {
  auto lengths = [](std::int64_t L, std::int64_t P) {
    std::vector<std::int64_t> v;
    for (std::int64_t r = 0; r < P; ++r)
      v.push_back(chunk_extent(L, P, r).length);
    return v;
  };
  CHECK(lengths(10, 4) == std::vector<std::int64_t>{3, 3, 3, 1});
  CHECK(lengths(8, 5) == std::vector<std::int64_t>{2, 2, 2, 2, 0});
  CHECK(lengths(0, 3) == std::vector<std::int64_t>{0, 0, 0});
  CHECK(chunk_extent(8, 5, 4) == Extent{8, 0});
  CHECK(chunk_extent(10, 4, 3) == Extent{9, 1});
  CHECK_THROWS_AS(chunk_extent(4, 0, 0), InvalidArgument);
  CHECK_THROWS_AS(chunk_extent(4, 2, 2), InvalidArgument);
}

TEST_CASE(
    "halo plan: random geometries, P=1..6: receptive fields, window sizes, matched "
    "transfers, no self-sends, no wrap",
    "[halo]") {
  std::mt19937_64 rng(20240611);
  for (int iter = 0; iter < 400; ++iter) {
    for (std::int64_t P = 1; P <= 6; ++P) {
      const HaloGeometry g = random_geometry(rng, P);
      const HaloPlan plan(g);
      INFO("iteration " << iter << "\n" << plan.str());
      check_windows(plan);
      check_transfers(plan);
    }
  }
}

TEST_CASE(
    "halo plan: simulated halo forward, grad_input add-back and grad_weight/grad_bias "
    "equal the global reference (random 1-D geometries, P=1..6, groups)",
    "[halo][simulation]") {
  std::mt19937_64 rng(99);
  for (int iter = 0; iter < 300; ++iter) {
    for (std::int64_t P = 1; P <= 6; ++P) {
      const HaloGeometry g = random_geometry(rng, P);
      const HaloPlan plan(g);
      const std::int64_t groups = std::uniform_int_distribution<std::int64_t>(1, 2)(rng);
      const std::int64_t batch = std::uniform_int_distribution<std::int64_t>(1, 2)(rng);
      INFO("iteration " << iter << " groups " << groups << "\n" << plan.str());
      simulate(plan, batch, 2 * groups, 2 * groups, groups,
               static_cast<std::uint64_t>(iter * 10 + P));
    }
  }
}

TEST_CASE(
    "halo plan: P=1 has no traffic and the right edge gets zero padding, not wrap "
    "(defect 3)",
    "[halo][defects]") {
  const HaloPlan plan(geo(5, 1, 3, 1, 1, 1, 1));
  const auto& p = plan.rank(0);
  CHECK(p.window == Extent{0, 5});
  CHECK(p.pad_left == 1);
  CHECK(p.pad_right == 1);
  CHECK(p.recv().empty());
  CHECK(p.send().empty());
  CHECK_FALSE(plan.needs_exchange());
  check_all(geo(5, 1, 3, 1, 1, 1, 1));
  // Edge ranks never talk to each other, whatever P.
  for (std::int64_t P = 2; P <= 6; ++P) {
    const HaloPlan pp(geo(24, P, 3, 1, 1, 1, 1));
    CHECK((P == 2 || !find_transfer(pp.rank(0).recv(), P - 1).has_value()));
    CHECK((!find_transfer(pp.rank(P - 1).recv(), 0).has_value() || P == 2));
    CHECK(pp.rank(0).pad_left == 1);
    CHECK(pp.rank(P - 1).pad_right == 1);
    check_all(geo(24, P, 3, 1, 1, 1, 1));
  }
}

TEST_CASE(
    "halo plan: even kernels, asymmetric padding and a zero-width left halo (d1 == 0) "
    "give chunk-consistent windows (defect 4)",
    "[halo][defects]") {
  // K=2 with 'same' padding (0, 1): only the right neighbour's first column is needed.
  {
    const HaloPlan plan(geo(8, 2, 2, 1, 1, 0, 1));
    CHECK(plan.output_length() == 8);
    CHECK(plan.rank(0).recv() == std::vector<HaloTransfer>{{1, 4, 5}});
    CHECK(plan.rank(1).recv().empty());
    CHECK(plan.rank(1).pad_right == 1);
    CHECK(plan.rank(0).pad_left == 0);
    check_all(geo(8, 2, 2, 1, 1, 0, 1));
  }
  // Causal K=3, padding (2, 0): traffic flows left to right only.
  {
    const HaloPlan plan(geo(9, 3, 3, 1, 1, 2, 0));
    CHECK(plan.rank(0).recv().empty());
    CHECK(plan.rank(0).pad_left == 2);
    CHECK(plan.rank(1).recv() == std::vector<HaloTransfer>{{0, 1, 3}});
    CHECK(plan.rank(2).recv() == std::vector<HaloTransfer>{{1, 4, 6}});
    CHECK(plan.rank(2).send().empty());
    check_all(geo(9, 3, 3, 1, 1, 2, 0));
  }
  // Even kernels, asymmetric padding, strides and dilations in a sweep.
  for (std::int64_t K : {2, 4, 6})
    for (std::int64_t pl = 0; pl <= 3; ++pl)
      for (std::int64_t pr = 0; pr <= 3; ++pr)
        for (std::int64_t s : {1, 2})
          for (std::int64_t d : {1, 2})
            for (std::int64_t P : {2, 3, 4})
              check_all(geo(17, P, K, s, d, pl, pr));
}

TEST_CASE("halo plan: shards narrower than the halo exchange over several hops", "[halo]") {
  const HaloPlan plan(geo(12, 6, 7, 1, 1, 3, 3));
  const auto& p = plan.rank(2);
  CHECK(p.need_first == 1);
  CHECK(p.need_last == 8);
  CHECK(p.recv() == std::vector<HaloTransfer>{{0, 1, 2}, {1, 2, 4}, {3, 6, 8}, {4, 8, 9}});
  check_all(geo(12, 6, 7, 1, 1, 3, 3));
  check_all(geo(10, 5, 5, 1, 3, 6, 6));  // dilation widens the halo to 12 columns
}

TEST_CASE("halo plan: empty trailing shards (L=8, P=5) and ranks that only send", "[halo]") {
  {
    const HaloPlan plan(geo(8, 5, 3, 1, 1, 1, 1));
    const auto& p4 = plan.rank(4);
    CHECK(p4.input.length == 0);
    CHECK_FALSE(p4.has_output);
    CHECK(p4.recv().empty());
    CHECK(p4.send().empty());
    check_all(geo(8, 5, 3, 1, 1, 1, 1));
  }
  {
    // Stride 2 shrinks the output: rank 3 owns input [9, 10) but no output, and
    // still sends its column to rank 2.
    const HaloPlan plan(geo(10, 4, 2, 2, 1, 0, 0));
    CHECK(plan.output_length() == 5);
    const auto& p3 = plan.rank(3);
    CHECK_FALSE(p3.has_output);
    CHECK(p3.send() == std::vector<HaloTransfer>{{2, 9, 10}});
    check_all(geo(10, 4, 2, 2, 1, 0, 0));
  }
}

TEST_CASE("halo plan: stride == K with shards aligned to the stride needs no exchange", "[halo]") {
  for (auto g : {geo(12, 3, 2, 2, 1, 0, 0), geo(16, 4, 4, 4, 1, 0, 0), geo(18, 3, 3, 3, 1, 0, 0)}) {
    const HaloPlan plan(g);
    INFO(plan.str());
    CHECK_FALSE(plan.needs_exchange());
    CHECK(plan.exchanged_elements() == 0);
    check_all(g);
  }
  // Misaligned shards do exchange.
  CHECK(HaloPlan(geo(9, 3, 2, 2, 1, 0, 0)).needs_exchange());
}

TEST_CASE("halo plan: windows wholly in the padding read nothing and give the bias alone",
          "[halo]") {
  {
    const HaloPlan plan(geo(2, 3, 1, 1, 1, 0, 6));
    CHECK(plan.output_length() == 8);
    CHECK_FALSE(plan.rank(0).window_in_padding);
    CHECK(plan.rank(0).recv() == std::vector<HaloTransfer>{{1, 1, 2}});
    CHECK(plan.rank(1).window_in_padding);
    CHECK(plan.rank(2).window_in_padding);
    CHECK(plan.rank(1).window.length == 0);
    CHECK(plan.rank(1).recv().empty());
    check_all(geo(2, 3, 1, 1, 1, 0, 6));
  }
  {
    const HaloPlan plan(geo(2, 2, 1, 1, 1, 6, 0));
    CHECK(plan.rank(0).window_in_padding);
    check_all(geo(2, 2, 1, 1, 1, 6, 0));
  }
  check_all(geo(0, 2, 3, 1, 1, 2, 2));  // no input at all: every window is padding
}

TEST_CASE("halo plan: invalid geometries are rejected naming the parameter", "[halo]") {
  CHECK_THROWS_WITH(HaloPlan(geo(8, 2, 3, 0, 1, 0, 0)), Catch::Contains("stride"));
  CHECK_THROWS_WITH(HaloPlan(geo(8, 2, 3, 1, 0, 0, 0)), Catch::Contains("dilation"));
  CHECK_THROWS_WITH(HaloPlan(geo(8, 2, 3, 1, 1, -1, 0)), Catch::Contains("padding"));
  CHECK_THROWS_WITH(HaloPlan(geo(2, 2, 5, 1, 1, 0, 0)), Catch::Contains("input"));
  CHECK_THROWS_AS(HaloPlan(geo(8, 0, 3, 1, 1, 0, 0)), InvalidArgument);
}

// ---- the window engine's general plan: every kind and boundary ----------------

namespace {

// Where virtual position v reads from, written from F.pad's definitions
// (independently of the plan's segment maths); -1: nothing (zero padding).
std::int64_t source_of(std::int64_t v, std::int64_t L, dtensor::Boundary b) {
  if (v >= 0 && v < L) return v;
  switch (b) {
    case dtensor::Boundary::Zeros:
      return -1;
    case dtensor::Boundary::Reflect:
      return v < 0 ? -v : 2 * (L - 1) - v;
    case dtensor::Boundary::Replicate:
      return v < 0 ? 0 : L - 1;
    case dtensor::Boundary::Circular:
      return ((v % L) + L) % L;
  }
  return -1;
}

}  // namespace

TEST_CASE(
    "window plan: runs rebuild every rank's window from its owners, for every window kind "
    "and boundary mode (random geometries)",
    "[halo][window]") {
  using dtensor::Boundary;
  using dtensor::WindowDim;
  std::mt19937_64 rng(20261201);
  auto uni = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  int checked = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    const std::int64_t L = uni(1, 30), P = uni(1, 7);
    WindowDim d;
    switch (uni(0, 4)) {
      case 0:
        d = WindowDim::adaptive(uni(1, L + 3));
        break;
      case 4: {  // interpolation: by size, or by a (non-integer) scale factor
        const bool linear = uni(0, 1) == 1, by_scale = uni(0, 1) == 1;
        const double sf = 0.3 + static_cast<double>(uni(0, 40)) / 11.0;
        const std::int64_t O =
            by_scale ? static_cast<std::int64_t>(std::floor(static_cast<double>(L) * sf))
                     : uni(1, 3 * L + 2);
        if (O < 1) continue;
        d = WindowDim::resample(O, linear, uni(0, 1) == 1, by_scale ? sf : 0.0);
        break;
      }
      case 1: {
        const std::int64_t k = uni(1, 5), s = uni(1, 3), dil = uni(1, 2), p = uni(0, 3);
        const std::int64_t op = uni(0, std::max(s, dil) - 1);
        d = WindowDim::transposed(k, s, dil, p, op);
        if ((L - 1) * s - 2 * p + dil * (k - 1) + op + 1 < 1) continue;
        break;
      }
      default: {
        const auto b = static_cast<Boundary>(uni(0, 3));
        const std::int64_t cap = b == Boundary::Reflect ? L - 1 : b == Boundary::Circular ? L : 6;
        d = WindowDim::sliding(uni(1, 5), uni(1, 3), uni(1, 2), uni(0, cap), uni(0, cap), b);
        if (L + d.pad_left + d.pad_right < d.extent()) continue;
      }
    }
    const dtensor::HaloPlan plan(L, P, d);
    INFO(plan.str());
    for (const auto& me : plan.ranks()) {
      if (!me.has_output) {
        CHECK(me.runs.empty());
        continue;
      }
      // Fill the window from the runs; every position exactly once.
      std::vector<std::int64_t> filled(static_cast<std::size_t>(me.window.length), -2);
      for (const auto& r : me.runs) {
        const auto& owner = plan.rank(r.peer).input;
        REQUIRE(r.lo >= owner.offset);
        REQUIRE(r.hi <= owner.end());
        for (std::int64_t t = 0; t < r.count; ++t) {
          const std::int64_t src = r.order == dtensor::WindowRun::Order::Forward    ? r.lo + t
                                   : r.order == dtensor::WindowRun::Order::Reversed ? r.hi - 1 - t
                                                                                    : r.lo;
          auto& slot = filled.at(static_cast<std::size_t>(r.dst + t));
          REQUIRE(slot == -2);
          slot = src;
        }
      }
      for (std::int64_t i = 0; i < me.window.length; ++i)
        REQUIRE(filled[static_cast<std::size_t>(i)] ==
                source_of(me.window.offset + i, L, d.boundary));
      // The window holds everything the outputs read (zeros: inside [0, L)).
      const auto [a, b] = d.reads(L, me.output.offset, me.output.end());
      if (d.kind == WindowDim::Kind::Resample)
        for (std::int64_t o = me.output.offset; o < me.output.end(); ++o) {
          const auto t = d.resample_source(L, o);
          REQUIRE(t.i0 >= a);
          REQUIRE(t.i1 <= b);
          REQUIRE(t.i0 <= t.i1);
          REQUIRE(b < L);
        }
      if (d.boundary != Boundary::Zeros) {
        CHECK(me.window.offset == a);
        CHECK(me.window.end() == b + 1);
      } else if (a <= b && b >= 0 && a < L) {
        CHECK(me.window.offset == std::max<std::int64_t>(a, 0));
        CHECK(me.window.end() == std::min(b + 1, L));
      }
      // What each peer sends is what this rank's runs ask of it, in order.
      for (const auto& peer : plan.ranks()) {
        if (peer.rank == me.rank) continue;
        std::vector<dtensor::WindowRun> asked, sent;
        for (auto r : me.runs)
          if (r.peer == peer.rank) asked.push_back(r);
        for (auto r : peer.run_sends)
          if (r.peer == me.rank) {
            r.peer = peer.rank;
            sent.push_back(r);
          }
        CHECK(asked == sent);
      }
    }
    ++checked;
  }
  CHECK(checked > 1500);
}

TEST_CASE("shared_halo_plan: one plan per distinct window, each the plan built directly",
          "[halo][plan]") {
  // Every field of the window changed in turn: a field the cache's key left
  // out would hand back the first plan for the second window.
  std::vector<std::pair<std::int64_t, WindowDim>> windows;
  const WindowDim base = WindowDim::sliding(3, 1, 1, 1, 1);
  windows.emplace_back(17, base);
  windows.emplace_back(18, base);  // length
  auto with = [&](auto change) {
    WindowDim d = base;
    change(d);
    windows.emplace_back(17, d);
  };
  with([](WindowDim& d) { d.kernel = 5; });
  with([](WindowDim& d) { d.stride = 2; });
  with([](WindowDim& d) { d.dilation = 2; });
  with([](WindowDim& d) { d.pad_left = 2; });
  with([](WindowDim& d) { d.pad_right = 0; });
  with([](WindowDim& d) { d.output_length = 16; });
  with([](WindowDim& d) { d.boundary = Boundary::Reflect; });
  windows.emplace_back(17, WindowDim::transposed(3, 1, 1, 1, 0));
  windows.emplace_back(17, WindowDim::adaptive(5));
  windows.emplace_back(17, WindowDim::resample(34, true));
  windows.emplace_back(17, WindowDim::resample(34, true, true));
  windows.emplace_back(17, WindowDim::resample(34, true, false, 2.0));
  for (const std::int64_t ranks : {2, 3}) {
    for (const auto& [length, dim] : windows) {
      const auto shared = shared_halo_plan(length, ranks, dim);
      INFO("length " << length << ", ranks " << ranks << "\n" << shared->str());
      CHECK(shared->str() == HaloPlan(length, ranks, dim).str());
      CHECK(shared->output_length() == HaloPlan(length, ranks, dim).output_length());
      CHECK(shared_halo_plan(length, ranks, dim) == shared);  // built once
    }
  }
  // A window with no output is refused as the constructor refuses it, and
  // nothing is kept.
  const WindowDim too_wide = WindowDim::sliding(9);
  CHECK_THROWS_AS(shared_halo_plan(4, 2, too_wide), InvalidArgument);
  CHECK_THROWS_AS(shared_halo_plan(4, 2, too_wide), InvalidArgument);
}
