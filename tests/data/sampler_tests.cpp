// DistributedSampler against torch.utils.data.DistributedSampler: the
// indices below were printed by torch 1.13 for each case and every rank
// (DistributedSampler(range(n), num_replicas, rank, shuffle, seed,
// drop_last), then set_epoch(epoch)).
#include <catch2/catch.hpp>

#include <vector>

#include "dtensor/dtensor.h"

using namespace dtensor;

namespace {

struct TorchCase {
  std::int64_t n, replicas;
  bool shuffle, drop_last;
  std::uint64_t seed;
  std::int64_t epoch;
  std::vector<std::vector<std::int64_t>> per_rank;
};

// clang-format off
const std::vector<TorchCase> kTorch = {
{10,3,true,false,0,0,{{4,5,0,2},{1,3,8,4},{7,9,6,1}}},
{10,3,true,true,0,0,{{4,5,0},{1,3,8},{7,9,6}}},
{10,4,false,false,0,0,{{0,4,8},{1,5,9},{2,6,0},{3,7,1}}},
{10,4,false,true,0,0,{{0,4},{1,5},{2,6},{3,7}}},
{7,2,true,false,42,3,{{5,1,4,0},{3,2,6,5}}},
{13,4,true,true,7,1,{{3,11,1},{5,7,0},{8,2,9},{12,10,6}}},
{5,4,true,false,1,2,{{1,2},{0,1},{3,0},{4,3}}},
{2,4,false,false,0,0,{{0},{1},{0},{1}}},
{100,3,true,false,1234,5,{{19,38,9,93,79,40,54,90,67,43,70,72,96,39,45,13,97,82,12,10,68,52,71,42,53,11,66,61,44,51,1,4,26,33},{85,95,92,75,22,0,48,86,69,20,56,32,98,88,91,99,6,15,59,24,37,50,49,34,36,65,55,83,84,30,7,62,28,19},{89,81,29,60,94,27,35,78,87,47,74,63,14,25,41,16,18,23,2,5,8,21,80,77,76,58,73,64,46,57,17,31,3,85}}},
{1,4,true,false,9,0,{{0},{0},{0},{0}}},
{3,8,false,false,0,0,{{0},{1},{2},{0},{1},{2},{0},{1}}},
{3,8,true,true,0,0,{{},{},{},{},{},{},{},{}}},
};
// clang-format on

}  // namespace

TEST_CASE("the sampler draws torch's DistributedSampler indices", "[data]") {
  for (const auto& c : kTorch)
    for (std::int64_t r = 0; r < c.replicas; ++r) {
      INFO("n " << c.n << " replicas " << c.replicas << " rank " << r << " shuffle " << c.shuffle
                << " drop_last " << c.drop_last << " seed " << c.seed << " epoch " << c.epoch);
      data::DistributedSampler s(c.n, c.replicas, r,
                                 {.shuffle = c.shuffle, .seed = c.seed, .drop_last = c.drop_last});
      s.set_epoch(c.epoch);
      CHECK(s.num_samples() == static_cast<std::int64_t>(c.per_rank[r].size()));
      CHECK(s.indices() == c.per_rank[static_cast<std::size_t>(r)]);
    }
}

TEST_CASE("the sampler's epochs reshuffle and its replicas cover the dataset", "[data]") {
  data::DistributedSampler a(50, 4, 1, {.shuffle = true, .seed = 3});
  const auto first = a.indices();
  a.set_epoch(1);
  CHECK(a.indices() != first);
  a.set_epoch(0);
  CHECK(a.indices() == first);
  // Padded to 52: every sample at least once, two of them twice.
  std::vector<int> seen(50, 0);
  for (std::int64_t r = 0; r < 4; ++r)
    for (const auto i : data::DistributedSampler(50, 4, r, {.shuffle = true, .seed = 3}).indices())
      ++seen[static_cast<std::size_t>(i)];
  int twice = 0;
  for (const int k : seen) {
    CHECK((k == 1 || k == 2));
    twice += k == 2;
  }
  CHECK(twice == 2);
  CHECK(data::DistributedSampler(0, 2, 1).indices().empty());
  CHECK_THROWS_AS(data::DistributedSampler(5, 2, 2), InvalidArgument);
  CHECK_THROWS_AS(data::DistributedSampler(-1, 2, 0), InvalidArgument);
}
