// The norms' statistics and backward sums merged across ranks, posted without blocking
// (norm::PendingMerge, which the halo chain's backward finishes after a
// convolution's weight gradient) and with the blocking all-gather: both
// against a naive f64 merge written here, on 2 and 3 ranks and on a 2x2
// mesh reduced over both dims, with means far from zero and an empty part.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "dtensor/core/device_mesh.h"
#include "dtensor/placement/dtensor.h"
#include "ops/norm/stat_reduction.h"
#include "tests/support/multiprocess.h"

using namespace dtensor;
using namespace dtensor::testing;

namespace {

constexpr std::int64_t kStats = 6, kWidth = 5;

// Rank r's records (count, mean, M2, sum(g), sum(g * (x - mean))): any rank
// can make any rank's. Statistic 2 is empty on rank 1 (a shard with none of it).
std::vector<double> records(int rank) {
  std::mt19937_64 rng(1000 + static_cast<std::uint64_t>(rank));
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> v;
  for (std::int64_t s = 0; s < kStats; ++s) {
    const double n = rank == 1 && s == 2 ? 0.0 : std::floor(1 + 50 * u(rng));
    v.push_back(n);
    v.push_back(n > 0 ? 1e3 * (s + 1) + u(rng) : 0.0);  // far from zero
    v.push_back(n > 0 ? n * u(rng) : 0.0);
    v.push_back(n > 0 ? u(rng) - 0.5 : 0.0);
    v.push_back(n > 0 ? u(rng) - 0.5 : 0.0);
  }
  return v;
}

// The merge by its definition: pooled count, mean and M2; g summed; each
// rank's h moved to the pooled mean, h_r + (m_r - M) g_r.
std::vector<double> naive_merge(int ranks) {
  std::vector<double> out;
  for (std::int64_t s = 0; s < kStats; ++s) {
    double n = 0, sum = 0;
    for (int r = 0; r < ranks; ++r) {
      const auto v = records(r);
      n += v[kWidth * s];
      sum += v[kWidth * s] * v[kWidth * s + 1];
    }
    const double mean = n > 0 ? sum / n : 0.0;
    double m2 = 0, g = 0, h = 0;
    for (int r = 0; r < ranks; ++r) {
      const auto v = records(r);
      const double* q = v.data() + kWidth * s;
      if (q[0] == 0) continue;
      m2 += q[2] + q[0] * (q[1] - mean) * (q[1] - mean);
      g += q[3];
      h += q[4] + (q[1] - mean) * q[3];
    }
    for (double x : {n, mean, m2, g, h})
      out.push_back(x);
  }
  return out;
}

Tensor packed_of(const std::vector<double>& v) {
  Tensor t = Tensor::empty({kStats, kWidth}, DType::F64);
  std::copy(v.begin(), v.end(), t.data<double>());
  return t;
}

void check_merged(const Tensor& got, const std::vector<double>& want, const char* how) {
  INFO(how);
  for (std::int64_t i = 0; i < kStats * kWidth; ++i) {
    INFO("statistic " << i / kWidth << " field " << i % kWidth);
    const double w = want[static_cast<std::size_t>(i)];
    CHECK(std::abs(got.data<double>()[i] - w) <= 1e-12 * std::max(1.0, std::abs(w)));
  }
}

// On a mesh of `shape` whose every dim shards H: both merges, twice in a row
// (the tags of the second must not meet the first's).
void check_on(const Shape& shape) {
  const DeviceMesh mesh(DeviceType::CPU, shape);
  Placements placements;
  for (std::size_t d = 0; d < shape.size(); ++d)
    placements.push_back(d == 0 ? Shard(2) : Shard(3));
  const DTensor x = distribute_tensor(Tensor::zeros({1, 1, 4, 4}, DType::F64), mesh, placements);
  OpCall call(OpSchema("stat_reduction_test", {x}));
  const auto plan = norm::plan_reduction(norm::NormKind::Group, mesh, placements);
  REQUIRE(plan.mesh_dims.size() == shape.size());
  const int ranks = static_cast<int>(shape_numel(shape));
  const int me = get_rank();
  const auto want = naive_merge(ranks);

  Tensor blocking = packed_of(records(me));
  norm::merge_moments_and_grad_sums(call, plan, blocking);
  check_merged(blocking, want, "merge_moments_and_grad_sums");
  for (int round = 0; round < 2; ++round) {
    norm::PendingMerge pending(call, plan, packed_of(records(me)),
                               norm::PendingMerge::Records::MomentsAndGradSums, 2);
    const Tensor& merged = pending.finish();
    check_merged(merged, want, "PendingMerge");
    // The same merge code: bitwise the blocking result.
    for (std::int64_t i = 0; i < kStats * kWidth; ++i)
      CHECK(merged.data<double>()[i] == blocking.data<double>()[i]);
  }

  // The forward's moments alone (the first three fields), blocking and
  // posted; the posted one merges a view of a larger tensor in place, as
  // the halo chain's forward merges one sample's statistics at a time.
  auto moments_of = [&](int rank) {
    Tensor t = Tensor::empty({kStats, 3}, DType::F64);
    const auto v = records(rank);
    for (std::int64_t i = 0; i < kStats * 3; ++i)
      t.data<double>()[i] = v[static_cast<std::size_t>(kWidth * (i / 3) + i % 3)];
    return t;
  };
  Tensor moments = moments_of(me);
  norm::merge_moments(call, plan, moments);
  Tensor rows = Tensor::zeros({kStats + 2, 3}, DType::F64);
  Tensor view = rows.narrow(0, 1, kStats);
  view.copy_(moments_of(me));
  norm::PendingMerge posted(call, plan, view, norm::PendingMerge::Records::Moments, 3);
  posted.finish();
  for (std::int64_t i = 0; i < kStats * 3; ++i) {
    INFO("moments: statistic " << i / 3 << " field " << i % 3);
    const double w = want[static_cast<std::size_t>(kWidth * (i / 3) + i % 3)];
    CHECK(std::abs(moments.data<double>()[i] - w) <= 1e-12 * std::max(1.0, std::abs(w)));
    CHECK(view.data<double>()[i] == moments.data<double>()[i]);
  }
  CHECK(rows.data<double>()[0] == 0.0);  // the rows around the view untouched
  CHECK(rows.data<double>()[3 * (kStats + 1)] == 0.0);
}

}  // namespace

TEST_CASE("norm backward sums posted without blocking equal the naive merge and the blocking one",
          "[norm][mp]") {
  run_ranks(2, [](RankContext&) { check_on({2}); });
  run_ranks(3, [](RankContext&) { check_on({3}); });
  run_ranks(4, [](RankContext&) { check_on({2, 2}); });
}
