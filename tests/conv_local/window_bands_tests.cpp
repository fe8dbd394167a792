// The bands a window kernel runs on (dtensor/ops/window_bands.h), checked
// against what they promise, by brute force: random reads (monotone, as
// every window kind's are, with outputs that read nothing mixed in) and
// random tile edges. Then for_each_band over tiles of a random tensor: every
// piece holds exactly the positions its box reads (compared with the whole
// tensor narrowed), a box inside one tile is a view of that tile, and the
// last dim is never cut.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <vector>

#include "dtensor/ops/tiled_tensor.h"
#include "dtensor/ops/window_bands.h"
#include "tests/ops/kernel_oracle.h"

using namespace dtensor;

namespace {

using Int = std::int64_t;

// Monotone reads of `outputs` outputs over a window of `length`: each reads
// 1..4 consecutive positions (fewer at the end), a few read nothing.
OutputReads random_reads(std::mt19937& rng, Int outputs, Int length) {
  std::uniform_int_distribution<Int> step(0, 2), extent(0, 3), coin(0, 9);
  OutputReads r;
  Int first = 0;
  for (Int o = 0; o < outputs; ++o) {
    first = std::min(first + (o ? step(rng) : 0), length - 1);
    if (coin(rng) == 0) {
      r.first.push_back(0);
      r.last.push_back(-1);
      continue;
    }
    r.first.push_back(first);
    r.last.push_back(std::min(first + extent(rng), length - 1));
  }
  return r;
}

std::vector<Int> random_cuts(std::mt19937& rng, Int length) {
  std::uniform_int_distribution<Int> pos(0, length), count(0, 4);
  std::vector<Int> cuts{0, length};
  for (Int k = count(rng); k > 0; --k)
    cuts.push_back(pos(rng));
  std::shuffle(cuts.begin(), cuts.end(), rng);
  return cuts;
}

// The segment of x between the cuts: how many cuts are at or before it.
Int segment(const std::vector<Int>& cuts, Int x) {
  Int n = 0;
  std::vector<Int> sorted = cuts;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  for (Int c : sorted)
    n += c <= x;
  return n;
}

// Inside one segment: 2 * segment; across a cut: 2 * segment + 1.
Int kind(const std::vector<Int>& cuts, Int first, Int last) {
  const Int s = segment(cuts, first);
  return segment(cuts, last) == s ? 2 * s : 2 * s + 1;
}

}  // namespace

TEST_CASE("window bands: bands tile the outputs, read what they need, and split at tile edges",
          "[window]") {
  std::mt19937 rng(7);
  std::uniform_int_distribution<Int> outputs_of(0, 40), length_of(1, 50);
  for (int trial = 0; trial < 500; ++trial) {
    const Int n = outputs_of(rng), length = length_of(rng);
    const OutputReads reads = random_reads(rng, n, length);
    const std::vector<Int> cuts = random_cuts(rng, length);
    const std::vector<WindowBand> bands = window_bands(reads, cuts);
    INFO("trial " << trial << ", " << n << " outputs over " << length);
    if (n == 0) {
      REQUIRE(bands.empty());
      continue;
    }
    REQUIRE(!bands.empty());
    REQUIRE(bands.front().out_begin == 0);
    REQUIRE(bands.back().out_end == n);
    std::vector<Int> kinds;  // each band's kind, -1 when it reads nothing
    for (std::size_t b = 0; b < bands.size(); ++b) {
      const WindowBand& band = bands[b];
      REQUIRE(band.out_begin < band.out_end);
      if (b > 0) REQUIRE(band.out_begin == bands[b - 1].out_end);
      Int lo = 0, hi = 0, k = -1;
      bool any = false;
      for (Int o = band.out_begin; o < band.out_end; ++o) {
        const auto i = static_cast<std::size_t>(o);
        if (reads.first[i] > reads.last[i]) continue;
        const Int ko = kind(cuts, reads.first[i], reads.last[i]);
        if (any) REQUIRE(ko == k);  // one kind per band
        k = ko;
        lo = any ? std::min(lo, reads.first[i]) : reads.first[i];
        hi = any ? std::max(hi, reads.last[i] + 1) : reads.last[i] + 1;
        any = true;
      }
      // The window range is the union of the reads.
      REQUIRE(band.win_begin == (any ? lo : 0));
      REQUIRE(band.win_end == (any ? hi : 0));
      kinds.push_back(k);
    }
    // Maximal: neighbours differ in kind; a band reading nothing is the only band.
    for (std::size_t b = 1; b < kinds.size(); ++b) {
      REQUIRE(kinds[b] >= 0);
      REQUIRE(kinds[b - 1] >= 0);
      REQUIRE(kinds[b] != kinds[b - 1]);
    }
  }
}

TEST_CASE(
    "window bands: each box's piece holds the positions it reads, a view inside one tile, "
    "written as tiles, each box adds where it reads",
    "[window]") {
  std::mt19937 rng(11);
  std::uniform_int_distribution<Int> size_of(1, 9), outputs_of(0, 6);
  int views = 0, assembled = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const Shape shape{2, 3, size_of(rng), size_of(rng)};
    const Tensor whole = Tensor::rand(shape, DType::F64, static_cast<std::uint64_t>(trial));
    // A grid of tiles, each a copy of its region (its own storage).
    std::vector<std::vector<Int>> edges;
    for (std::size_t d = 2; d < 4; ++d) {
      std::vector<Int> e = random_cuts(rng, shape[d]);
      std::sort(e.begin(), e.end());
      e.erase(std::unique(e.begin(), e.end()), e.end());
      edges.push_back(e);
    }
    TiledTensor tiles(shape, DType::F64, Device{});
    for (std::size_t a = 0; a + 1 < edges[0].size(); ++a)
      for (std::size_t b = 0; b + 1 < edges[1].size(); ++b)
        tiles.add(whole.narrow(2, edges[0][a], edges[0][a + 1] - edges[0][a])
                      .narrow(3, edges[1][b], edges[1][b + 1] - edges[1][b])
                      .clone(),
                  {0, 0, edges[0][a], edges[1][b]});
    REQUIRE(tiles.complete());
    const std::vector<OutputReads> reads{random_reads(rng, outputs_of(rng), shape[2]),
                                         random_reads(rng, outputs_of(rng), shape[3])};
    std::size_t boxes = 0;
    for_each_window_band(
        tiles, reads, [&](const Tensor& piece, const std::vector<WindowBand>& box) {
          ++boxes;
          REQUIRE(box.size() == 2);
          Tensor want = whole;
          for (std::size_t i = 0; i < 2; ++i)
            want = want.narrow(static_cast<Int>(i) + 2, box[i].win_begin,
                               box[i].win_end - box[i].win_begin);
          REQUIRE(piece.shape() == want.shape());
          REQUIRE(testing_kernels::values(piece) == testing_kernels::values(want));
          // Inside one tile of the grid: a view of it, no copy.
          bool inside = piece.numel() > 0;
          for (std::size_t i = 0; i < 2; ++i) {
            const auto& e = edges[i];
            const auto at = std::upper_bound(e.begin(), e.end(), box[i].win_begin) - 1;
            inside = inside && box[i].win_end <= *(at + 1);
          }
          if (inside) {
            bool shares = false;
            for (const auto& t : tiles.tiles())
              shares = shares || piece.shares_storage_with(t.data);
            REQUIRE(shares);
            ++views;
          } else if (piece.numel() > 0) {
            ++assembled;
          }
        });
    std::size_t want_boxes = 1;
    for (std::size_t i = 0; i < 2; ++i)
      want_boxes *= window_bands(reads[i], i == 0 ? tile_edges(tiles, 2)
                                                  : std::vector<Int>{})  // the last dim: uncut
                        .size();
    REQUIRE(boxes == want_boxes);

    // As destinations (a gradient's tiles): every box adds 1 over the
    // positions it reads, in place where its part is one tile, else through
    // a buffer and add_. Each position must count the boxes whose ranges
    // hold it, counted here by brute force.
    tiles.zero_();
    std::vector<double> count(static_cast<std::size_t>(shape_numel(shape)), 0.0);
    for_each_window_box(
        tiles, reads, [&](const TiledTensor& part, const std::vector<WindowBand>& box) {
          for (Int n = 0; n < shape[0]; ++n)
            for (Int c = 0; c < shape[1]; ++c)
              for (Int h = box[0].win_begin; h < box[0].win_end; ++h)
                for (Int w = box[1].win_begin; w < box[1].win_end; ++w)
                  count[static_cast<std::size_t>(((n * shape[1] + c) * shape[2] + h) * shape[3] +
                                                 w)] += 1.0;
          if (part.numel() == 0) return;
          if (part.is_whole()) {
            Tensor in_place = part.tiles().front().data;
            in_place.add_(Tensor::full(part.shape(), 1.0, DType::F64));
          } else {
            part.add_(Tensor::full(part.shape(), 1.0, DType::F64));
          }
        });
    REQUIRE(testing_kernels::values(tiles.assemble()) == count);
  }
  CHECK(views > 50);
  CHECK(assembled > 50);
}
