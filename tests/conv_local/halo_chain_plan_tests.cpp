// The plan of a fused chain (ops/window/halo_chain_plan.h), checked by a
// single-process simulation against a naive oracle: a random 1-D chain of
// "same" stride-1 convolutions over a random signal, computed globally with
// zero padding, and again rank by rank the fused way (the window the chain
// reads as one sliding window, then each convolution over the plan's range
// with the plan's local padding). Every rank's range of every intermediate
// and its share of the output must equal the global ones exactly (the same
// products summed in the same order), over uneven and empty shards and
// halos several ranks wide. Strided chains, and chains that upsample
// (nearest and linear interpolation between the convolutions), likewise.
#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "dtensor/placement/chunk.h"
#include "ops/window/halo_chain_plan.h"

using namespace dtensor;
using detail::ChainWindowDim;

namespace {

struct Conv1d {
  ChainWindowDim dim;
  std::int64_t dilation = 1;
  std::vector<double> taps;  // kernel = taps.size()
};

// out[o] = sum_j in[o - pad_left + j d] * taps[j], reading zeros outside in.
std::vector<double> conv(const std::vector<double>& in, const Conv1d& c, std::int64_t pad_left,
                         std::int64_t out_length) {
  std::vector<double> out(static_cast<std::size_t>(out_length), 0.0);
  for (std::int64_t o = 0; o < out_length; ++o)
    for (std::size_t j = 0; j < c.taps.size(); ++j) {
      const std::int64_t i = o - pad_left + static_cast<std::int64_t>(j) * c.dilation;
      if (i >= 0 && i < static_cast<std::int64_t>(in.size()))
        out[static_cast<std::size_t>(o)] += in[static_cast<std::size_t>(i)] * c.taps[j];
    }
  return out;
}

// A random chain of up to `max_convs` convolutions (dilation up to
// `max_dilation`, 1-5 taps, any "same" padding) and its plan dims.
struct RandomChain {
  std::vector<Conv1d> convs;
  std::vector<ChainWindowDim> dims;
};
RandomChain random_chain(std::mt19937_64& rng, std::int64_t max_convs, std::int64_t max_dilation) {
  auto uni = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  std::uniform_real_distribution<double> value(-1.0, 1.0);
  RandomChain chain;
  chain.convs.resize(static_cast<std::size_t>(uni(1, max_convs)));
  for (auto& c : chain.convs) {
    c.dilation = uni(1, max_dilation);
    c.taps.resize(static_cast<std::size_t>(uni(1, 5)));
    for (auto& t : c.taps)
      t = value(rng);
    const std::int64_t extent = c.dilation * (static_cast<std::int64_t>(c.taps.size()) - 1) + 1;
    c.dim = {extent, uni(0, extent - 1)};
    chain.dims.push_back(c.dim);
  }
  return chain;
}

// Rank r's share of a chain's output of `out_length` cells (split as a
// DTensor splits it), the window of its input of L cells the exchange
// brings, and its plan.
struct RankPlan {
  Extent owned;
  std::int64_t wb = 0, we = 0;
  detail::ChainDimPlan plan;
};
RankPlan plan_rank(std::int64_t L, std::int64_t out_length, std::int64_t P, std::int64_t r,
                   const std::vector<ChainWindowDim>& dims) {
  RankPlan p;
  p.owned = chunk_extent(out_length, P, r);
  if (p.owned.length > 0) {
    const auto [first, last] = detail::chain_window(dims).reads(L, p.owned.offset, p.owned.end());
    p.wb = std::max<std::int64_t>(0, first);
    p.we = std::min<std::int64_t>(L, last + 1);
  }
  p.plan = detail::plan_chain_dim(L, p.owned.offset, p.owned.end(), p.wb, p.we, dims);
  return p;
}

std::vector<double> random_signal(std::mt19937_64& rng, std::int64_t length) {
  std::uniform_real_distribution<double> value(-1.0, 1.0);
  std::vector<double> x(static_cast<std::size_t>(length));
  for (auto& v : x)
    v = value(rng);
  return x;
}

}  // namespace

TEST_CASE("halo chain plan: every rank's ranges of a fused chain equal the global chain's",
          "[halo][halo_chain]") {
  std::mt19937_64 rng(17);
  auto uni = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  for (int trial = 0; trial < 2000; ++trial) {
    const std::int64_t L = uni(1, 20), P = uni(1, 6);
    const auto [convs, dims] = random_chain(rng, 4, 3);
    const std::vector<double> x = random_signal(rng, L);
    // The global chain, every intermediate kept.
    std::vector<std::vector<double>> global{x};
    for (const auto& c : convs)
      global.push_back(conv(global.back(), c, c.dim.pad_left, L));
    const WindowDim window = detail::chain_window(dims);
    REQUIRE(window.output_length_for(L) == L);
    for (std::int64_t r = 0; r < P; ++r) {
      INFO("trial " << trial << " L " << L << " P " << P << " rank " << r);
      const auto [owned, wb, we, plan] = plan_rank(L, L, P, r, dims);
      REQUIRE(plan.steps.size() == convs.size());
      std::vector<double> held(x.begin() + wb, x.begin() + we);
      for (std::size_t k = 0; k < convs.size(); ++k) {
        const auto& s = plan.steps[k];
        REQUIRE(s.in_end - s.in_begin == static_cast<std::int64_t>(held.size()));
        // The local convolution: output i is global output out_begin + i.
        std::vector<double> out = conv(held, convs[k], s.pad_left, s.out_end - s.out_begin);
        REQUIRE(static_cast<std::int64_t>(out.size()) + convs[k].dim.extent - 1 ==
                static_cast<std::int64_t>(held.size()) + s.pad_left + s.pad_right);
        for (std::int64_t o = s.out_begin; o < s.out_end; ++o)
          REQUIRE(out[static_cast<std::size_t>(o - s.out_begin)] ==
                  global[k + 1][static_cast<std::size_t>(o)]);
        held = out;
      }
      // The last convolution gives exactly the rank's share.
      CHECK(plan.steps.back().out_begin == owned.offset);
      CHECK(plan.steps.back().out_end - plan.steps.back().out_begin == owned.length);
    }
  }
}

TEST_CASE(
    "halo chain plan: a step's interior reads no halo, and its pieces give the step's outputs",
    "[halo][halo_chain]") {
  // The same random chains; each rank's held input with its halo rows
  // poisoned (NaN): the interior outputs computed from it must be finite
  // and the global ones, and the pieces before, inside and after the
  // interior, each over what chain_sub_step says it reads, must give every
  // output of the step.
  std::mt19937_64 rng(23);
  auto uni = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  int interiors = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const std::int64_t L = uni(1, 24), P = uni(1, 5);
    const auto [convs, dims] = random_chain(rng, 3, 2);
    const std::vector<double> x = random_signal(rng, L);
    const std::vector<double> y = conv(x, convs[0], convs[0].dim.pad_left, L);
    const WindowDim window = detail::chain_window(dims);
    for (std::int64_t r = 0; r < P; ++r) {
      INFO("trial " << trial << " L " << L << " P " << P << " rank " << r);
      const Extent owned = chunk_extent(L, P, r);
      if (owned.length == 0) continue;
      const auto [first, last] = window.reads(L, owned.offset, owned.end());
      const std::int64_t wb = std::max<std::int64_t>(0, first),
                         we = std::min<std::int64_t>(L, last + 1);
      const auto plan = detail::plan_chain_dim(L, owned.offset, owned.end(), wb, we, dims);
      const auto& s = plan.steps[0];
      const std::int64_t extent = dims[0].extent, outputs = s.out_end - s.out_begin;
      const auto [a, b] = detail::chain_interior(s, extent, owned.offset, owned.end());
      REQUIRE((0 <= a && a <= b && b <= outputs));
      interiors += b > a;
      std::vector<double> held(x.begin() + wb, x.begin() + we), poisoned = held;
      for (std::int64_t i = wb; i < we; ++i)
        if (i < owned.offset || i >= owned.end()) poisoned[static_cast<std::size_t>(i - wb)] = nan;
      for (const auto& [lo, hi, from] :
           {std::tuple{std::int64_t{0}, a, &held}, std::tuple{a, b, &poisoned},
            std::tuple{b, outputs, &held}}) {
        const auto sub = detail::chain_sub_step(s, extent, lo, hi);
        if (hi <= lo) continue;
        REQUIRE((0 <= sub.in_a && sub.in_a <= sub.in_b && sub.in_b <= we - wb));
        REQUIRE((sub.pad_left >= 0 && sub.pad_right >= 0));
        const std::vector<double> in(from->begin() + sub.in_a, from->begin() + sub.in_b);
        const std::vector<double> out = conv(in, convs[0], sub.pad_left, hi - lo);
        REQUIRE(static_cast<std::int64_t>(in.size()) + sub.pad_left + sub.pad_right ==
                hi - lo + extent - 1);
        for (std::int64_t j = lo; j < hi; ++j)
          REQUIRE(out[static_cast<std::size_t>(j - lo)] ==
                  y[static_cast<std::size_t>(s.out_begin + j)]);
      }
    }
  }
  CHECK(interiors > 1000);  // the draw reaches the case it is about
}

TEST_CASE(
    "halo chain plan: strided chains and padding that is not \"same\": every rank's ranges equal "
    "the global chain's, and its shares tile every intermediate inside what it computes",
    "[halo][halo_chain]") {
  std::mt19937_64 rng(29);
  auto uni = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  // out[o] = sum_j in[o s - pad_left + j d] taps[j], zeros outside in.
  auto strided = [](const std::vector<double>& in, const Conv1d& c, std::int64_t pad_left,
                    std::int64_t out_length) {
    std::vector<double> out(static_cast<std::size_t>(out_length), 0.0);
    for (std::int64_t o = 0; o < out_length; ++o)
      for (std::size_t j = 0; j < c.taps.size(); ++j) {
        const std::int64_t i =
            o * c.dim.stride - pad_left + static_cast<std::int64_t>(j) * c.dilation;
        if (i >= 0 && i < static_cast<std::int64_t>(in.size()))
          out[static_cast<std::size_t>(o)] += in[static_cast<std::size_t>(i)] * c.taps[j];
      }
    return out;
  };
  int statistics_checked = 0, skipping = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const std::int64_t L = uni(1, 40), P = uni(1, 6);
    auto [convs, dims] = random_chain(rng, 4, 2);
    // Strides and free padding; a layer that would leave no output ends the chain.
    std::vector<std::int64_t> lengths{L};
    std::size_t kept = 0;
    for (; kept < convs.size(); ++kept) {
      ChainWindowDim& d = convs[kept].dim;
      d.stride = uni(1, 3);
      d.right = uni(0, d.extent - 1);
      if (d.output_length(lengths.back()) < 1) break;
      dims[kept] = d;
      lengths.push_back(d.output_length(lengths.back()));
    }
    if (kept == 0) continue;
    convs.resize(kept);
    dims.resize(kept);
    const std::vector<double> x = random_signal(rng, L);
    std::vector<std::vector<double>> global{x};
    for (std::size_t k = 0; k < convs.size(); ++k)
      global.push_back(strided(global.back(), convs[k], convs[k].dim.pad_left, lengths[k + 1]));
    const WindowDim window = detail::chain_window(dims);
    REQUIRE(window.output_length_for(L) == lengths.back());
    // Per intermediate: which rank owns each cell.
    std::vector<std::vector<int>> owners(convs.size());
    for (std::size_t k = 0; k < convs.size(); ++k)
      owners[k].assign(static_cast<std::size_t>(lengths[k + 1]), 0);
    for (std::int64_t r = 0; r < P; ++r) {
      std::string layers;
      for (const auto& d : dims)
        layers += " [e" + std::to_string(d.extent) + " s" + std::to_string(d.stride) + " p" +
                  std::to_string(d.pad_left) + "," + std::to_string(d.pad_right()) + "]";
      INFO("trial " << trial << " L " << L << " P " << P << " rank " << r << layers);
      const auto [owned, wb, we, plan] = plan_rank(L, lengths.back(), P, r, dims);
      REQUIRE(plan.steps.size() == convs.size());
      if (owned.length == 0) continue;
      std::vector<double> held(x.begin() + wb, x.begin() + we);
      for (std::size_t k = 0; k < convs.size(); ++k) {
        const auto& s = plan.steps[k];
        REQUIRE(s.in_end - s.in_begin == static_cast<std::int64_t>(held.size()));
        REQUIRE((s.skip_left >= 0 && s.skip_right >= 0 &&
                 s.skip_left + s.skip_right <= static_cast<std::int64_t>(held.size())));
        skipping += s.skip_left + s.skip_right > 0;
        const std::vector<double> used(held.begin() + s.skip_left, held.end() - s.skip_right);
        const std::int64_t outputs = s.out_end - s.out_begin;
        // The local padding gives exactly the outputs (PyTorch's length rule).
        REQUIRE(dims[k].stride * (outputs - 1) + dims[k].extent ==
                static_cast<std::int64_t>(used.size()) + s.pad_left + s.pad_right);
        std::vector<double> out = strided(used, convs[k], s.pad_left, outputs);
        for (std::int64_t o = s.out_begin; o < s.out_end; ++o)
          REQUIRE(out[static_cast<std::size_t>(o - s.out_begin)] ==
                  global[k + 1][static_cast<std::size_t>(o)]);
        for (std::int64_t o = s.owned_begin; o < s.owned_end; ++o)
          ++owners[k][static_cast<std::size_t>(o)];
        // A norm here counts the share: it must be computed.
        if (!detail::chain_statistics_refusal(L, k + 1, dims)) {
          ++statistics_checked;
          REQUIRE((s.owned_begin >= s.out_begin && s.owned_end <= s.out_end));
        }
        held = out;
      }
      CHECK(plan.steps.back().out_begin == owned.offset);
      CHECK(plan.steps.back().out_end - plan.steps.back().out_begin == owned.length);
    }
    for (std::size_t k = 0; k < convs.size(); ++k)
      for (const int n : owners[k])
        REQUIRE(n == 1);  // the shares tile the intermediate
  }
  CHECK(statistics_checked > 1000);
  CHECK(skipping > 50);
}

TEST_CASE(
    "halo chain plan: chains that upsample (nearest and linear) give the global chain's ranges, "
    "and their shares tile every intermediate inside what the rank computes",
    "[halo][halo_chain]") {
  std::mt19937_64 rng(31);
  auto uni = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  // An upsample by an integer factor, as PyTorch's interpolate with that
  // scale factor computes it: nearest reads floor(o / f); linear
  // (align_corners off) max((o + 0.5) / f - 0.5, 0) and the next input.
  struct Upsample {
    std::int64_t factor = 1;
    bool linear = false;
  };
  auto taps = [](const Upsample& u, std::int64_t o, std::int64_t length) {
    if (!u.linear) return std::tuple{o / u.factor, o / u.factor, 1.0};
    const double src =
        std::max((static_cast<double>(o) + 0.5) / static_cast<double>(u.factor) - 0.5, 0.0);
    const auto i0 = static_cast<std::int64_t>(src);
    return std::tuple{i0, std::min(i0 + 1, length - 1), 1.0 - (src - static_cast<double>(i0))};
  };
  // Outputs [0, out.size()) of global positions from `first` on, reading
  // `in` whose element 0 is global position `in_begin` of `length`.
  auto upsample = [&](const std::vector<double>& in, std::int64_t in_begin, std::int64_t length,
                      const Upsample& u, std::int64_t first, std::int64_t count) {
    std::vector<double> out;
    for (std::int64_t o = first; o < first + count; ++o) {
      const auto [i0, i1, w0] = taps(u, o, length);
      REQUIRE((i0 >= in_begin && i1 < in_begin + static_cast<std::int64_t>(in.size())));
      out.push_back(w0 * in[static_cast<std::size_t>(i0 - in_begin)] +
                    (1.0 - w0) * in[static_cast<std::size_t>(i1 - in_begin)]);
    }
    return out;
  };
  int statistics_checked = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const std::int64_t L = uni(1, 16), P = uni(1, 6);
    auto [convs, dims] = random_chain(rng, 4, 2);
    // One or two upsamples among the convolutions (free padding on these).
    std::vector<std::optional<Upsample>> ups(convs.size() + 2);
    std::vector<Conv1d> layers;
    std::vector<ChainWindowDim> window;
    for (std::size_t k = 0, c = 0; c < convs.size(); ++k) {
      if (k > 0 && uni(0, 2) == 0 &&
          std::count_if(ups.begin(), ups.end(), [](auto& u) { return u.has_value(); }) < 2) {
        Upsample u{uni(1, 3), uni(0, 1) == 1};
        ups[window.size()] = u;
        layers.emplace_back();
        ChainWindowDim d{u.linear ? 3 * u.factor : u.factor, u.linear ? u.factor : 0};
        d.stride = u.factor;
        d.right = d.pad_left;
        d.transposed = true;
        window.push_back(d);
        continue;
      }
      convs[c].dim.right = uni(0, convs[c].dim.extent - 1);
      layers.push_back(convs[c]);
      window.push_back(convs[c].dim);
      ++c;
    }
    std::vector<std::int64_t> lengths{L};
    for (const auto& d : window)
      lengths.push_back(d.output_length(lengths.back()));
    if (std::any_of(lengths.begin(), lengths.end(), [](std::int64_t l) { return l < 1; }) ||
        !detail::chain_upsamples(window))
      continue;
    const std::vector<double> x = random_signal(rng, L);
    std::vector<std::vector<double>> global{x};
    for (std::size_t k = 0; k < window.size(); ++k)
      global.push_back(ups[k] ? upsample(global.back(), 0, lengths[k], *ups[k], 0, lengths[k + 1])
                              : conv(global.back(), layers[k], window[k].pad_left, lengths[k + 1]));
    REQUIRE(detail::chain_window(window).output_length_for(L) == lengths.back());
    std::vector<std::vector<int>> owners(window.size());
    for (std::size_t k = 0; k < window.size(); ++k)
      owners[k].assign(static_cast<std::size_t>(lengths[k + 1]), 0);
    for (std::int64_t r = 0; r < P; ++r) {
      std::string described;
      for (const auto& d : window)
        described += std::string(" [") + (d.transposed ? "up" : "") + "e" +
                     std::to_string(d.extent) + " s" + std::to_string(d.stride) + " p" +
                     std::to_string(d.pad_left) + "," + std::to_string(d.pad_right()) + "]";
      INFO("trial " << trial << " L " << L << " P " << P << " rank " << r << described);
      const auto [owned, wb, we, plan] = plan_rank(L, lengths.back(), P, r, window);
      if (owned.length == 0) continue;
      std::vector<double> held(x.begin() + wb, x.begin() + we);
      for (std::size_t k = 0; k < window.size(); ++k) {
        const auto& s = plan.steps[k];
        REQUIRE(s.in_end - s.in_begin == static_cast<std::int64_t>(held.size()));
        const std::int64_t outputs = s.out_end - s.out_begin;
        std::vector<double> out;
        if (ups[k]) {
          REQUIRE((s.pad_left == 0 && s.pad_right == 0));
          out = upsample(held, s.in_begin, lengths[k], *ups[k], s.out_begin, outputs);
        } else {
          const std::vector<double> used(held.begin() + s.skip_left, held.end() - s.skip_right);
          REQUIRE(outputs + window[k].extent - 1 ==
                  static_cast<std::int64_t>(used.size()) + s.pad_left + s.pad_right);
          out = conv(used, layers[k], s.pad_left, outputs);
        }
        for (std::int64_t o = s.out_begin; o < s.out_end; ++o)
          REQUIRE(out[static_cast<std::size_t>(o - s.out_begin)] ==
                  global[k + 1][static_cast<std::size_t>(o)]);
        for (std::int64_t o = s.owned_begin; o < s.owned_end; ++o)
          ++owners[k][static_cast<std::size_t>(o)];
        if (!detail::chain_statistics_refusal(L, k + 1, window)) {
          ++statistics_checked;
          REQUIRE((s.owned_begin >= s.out_begin && s.owned_end <= s.out_end));
        }
        held = out;
      }
      CHECK(plan.steps.back().out_begin == owned.offset);
      CHECK(plan.steps.back().out_end - plan.steps.back().out_begin == owned.length);
    }
    for (std::size_t k = 0; k < window.size(); ++k)
      for (const int n : owners[k])
        REQUIRE(n == 1);
  }
  CHECK(statistics_checked > 1000);
}

namespace {

// The input position a padding mode reads for position `i` of an input of
// `length` (PyTorch's padding modes); -1: a zero.
std::int64_t mode_source(std::int64_t i, std::int64_t length, Boundary boundary) {
  if (i >= 0 && i < length) return i;
  switch (boundary) {
    case Boundary::Zeros:
      return -1;
    case Boundary::Reflect:
      return i < 0 ? -i : 2 * (length - 1) - i;
    case Boundary::Replicate:
      return i < 0 ? 0 : length - 1;
    case Boundary::Circular:
      return ((i % length) + length) % length;
  }
  return -1;
}

// The global convolution with the convolution's padding mode.
std::vector<double> conv_with_mode(const std::vector<double>& in, const Conv1d& c) {
  const auto length = static_cast<std::int64_t>(in.size());
  std::vector<double> padded;
  for (std::int64_t i = -c.dim.pad_left; i < length + c.dim.pad_right(); ++i) {
    const std::int64_t from = mode_source(i, length, c.dim.boundary);
    REQUIRE(from < length);
    padded.push_back(from < 0 ? 0.0 : in[static_cast<std::size_t>(from)]);
  }
  return conv(padded, c, 0, length);
}

std::int64_t smallest_shard(std::int64_t L, std::int64_t P) {
  std::int64_t smallest = L;
  for (std::int64_t r = 0; r < P; ++r)
    if (chunk_extent(L, P, r).length > 0)
      smallest = std::min(smallest, chunk_extent(L, P, r).length);
  return smallest;
}

}  // namespace

TEST_CASE("halo chain plan: reflect, replicate and circular chains give the global chain's ranges",
          "[halo][halo_chain]") {
  // As above with padding modes: a chain of zeros, reflect and replicate
  // convolutions (any mix) or of circular ones (a ring). Each rank fills its
  // local padding from the rows it holds, as the mode says (a REQUIRE when
  // a row it reads is not held), or, in a ring, holds the wrapped window.
  // What chain_boundary_refusal refuses is skipped; what it lets through
  // must be exact on every rank.
  std::mt19937_64 rng(29);
  auto uni = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  int fused = 0, refused = 0, rings = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const std::int64_t L = uni(1, 20), P = uni(1, 6);
    auto [convs, dims] = random_chain(rng, 4, 2);
    const bool ring = uni(0, 3) == 0;
    for (std::size_t k = 0; k < convs.size(); ++k) {
      const Boundary modes[] = {Boundary::Zeros, Boundary::Reflect, Boundary::Replicate};
      dims[k].boundary = convs[k].dim.boundary =
          ring ? Boundary::Circular : modes[static_cast<std::size_t>(uni(0, 2))];
    }
    if (const auto why = detail::chain_boundary_refusal(L, smallest_shard(L, P), dims)) {
      ++refused;
      continue;
    }
    ++fused;
    rings += ring;
    const std::vector<double> x = random_signal(rng, L);
    std::vector<std::vector<double>> global{x};
    for (const auto& c : convs)
      global.push_back(conv_with_mode(global.back(), c));
    const WindowDim window = detail::chain_window(dims);
    REQUIRE((window.boundary == Boundary::Circular) == ring);
    for (std::int64_t r = 0; r < P; ++r) {
      INFO("trial " << trial << " L " << L << " P " << P << " rank " << r << " ring " << ring);
      const Extent owned = chunk_extent(L, P, r);
      std::int64_t wb = 0, we = 0;
      if (owned.length > 0) {
        const auto [first, last] = window.reads(L, owned.offset, owned.end());
        wb = ring ? first : std::max<std::int64_t>(0, first);
        we = ring ? last + 1 : std::min<std::int64_t>(L, last + 1);
      }
      const auto plan = detail::plan_chain_dim(L, owned.offset, owned.end(), wb, we, dims);
      // The window: a ring's wraps around (what the exchange brings).
      std::vector<double> held;
      for (std::int64_t i = wb; i < we; ++i)
        held.push_back(x[static_cast<std::size_t>(mode_source(i, L, Boundary::Circular))]);
      if (owned.length == 0) continue;
      for (std::size_t k = 0; k < convs.size(); ++k) {
        const auto& s = plan.steps[k];
        REQUIRE(s.in_end - s.in_begin == static_cast<std::int64_t>(held.size()));
        if (ring) REQUIRE((s.pad_left == 0 && s.pad_right == 0));
        // The local padding, filled from held rows as the mode says (a
        // ring's held positions may be virtual: below 0 or from L on).
        std::vector<double> padded;
        for (std::int64_t i = s.in_begin - s.pad_left; i < s.in_end + s.pad_right; ++i) {
          const std::int64_t from =
              i >= s.in_begin && i < s.in_end ? i : mode_source(i, L, convs[k].dim.boundary);
          if (from == -1 && !(i >= s.in_begin && i < s.in_end)) {
            padded.push_back(0.0);
            continue;
          }
          REQUIRE((from >= s.in_begin && from < s.in_end));  // a held row
          padded.push_back(held[static_cast<std::size_t>(from - s.in_begin)]);
        }
        std::vector<double> out = conv(padded, convs[k], 0, s.out_end - s.out_begin);
        for (std::int64_t o = s.out_begin; o < s.out_end; ++o)
          REQUIRE(out[static_cast<std::size_t>(o - s.out_begin)] ==
                  global[k + 1][static_cast<std::size_t>(mode_source(o, L, Boundary::Circular))]);
        held = out;
      }
      CHECK(plan.steps.back().out_begin == owned.offset);
      CHECK(plan.steps.back().out_end - plan.steps.back().out_begin == owned.length);
    }
  }
  // The draw reaches every kind, and the refusal leaves most chains fused.
  CHECK(rings > 200);
  CHECK(fused > 3 * refused);
}
