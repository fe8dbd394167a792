// The randomised differential suite: distributed convolution forward and
// backward against the naive f64 oracle over seeded random configurations
// (docs/design.md §6). Each ctest test runs a batch of configs in one job; the
// environment variable DTENSOR_CONV_SWEEP=K runs K times as many.
#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <cstdlib>

#include "tests/conv/conv_case.h"
#include "tests/support/multiprocess.h"
#include "tests/support/registration.h"
#include "tests/support/scoped_config.h"

using namespace dtensor;
using namespace dtensor::testing;

namespace {

int sweep_factor() {
  const char* v = std::getenv("DTENSOR_CONV_SWEEP");
  return v ? std::max(1, std::atoi(v)) : 1;
}

struct Batch {
  Shape mesh;
  DType dtype;
  int configs;  // per batch test
  int batches;
};

DTENSOR_TEST_REGISTRAR {
  const Batch batches[] = {
      // f64 on P=3 has two batches, not three, to pay for the f16 one.
      {{1}, DType::F64, 20, 2},    {{2}, DType::F64, 20, 3},    {{3}, DType::F64, 20, 2},
      {{4}, DType::F64, 20, 2},    {{5}, DType::F64, 20, 2},    {{2, 2}, DType::F64, 20, 2},
      {{2, 1}, DType::F64, 20, 1}, {{1, 3}, DType::F64, 20, 1}, {{2}, DType::F32, 20, 1},
      {{2, 2}, DType::F32, 20, 1}, {{3}, DType::BF16, 10, 1},   {{3}, DType::F16, 10, 1},
  };
  for (const auto& b : batches)
    for (int i = 0; i < b.batches; ++i) {
      std::string mesh;
      for (std::size_t k = 0; k < b.mesh.size(); ++k)
        mesh += (k ? "x" : "") + std::to_string(b.mesh[k]);
      std::int64_t world = 1;
      for (auto m : b.mesh)
        world *= m;
      const std::string name =
          fmt::format("conv differential {} mesh {} configs {}-{}", dtype_name(b.dtype), mesh,
                      i * b.configs, (i + 1) * b.configs - 1);
      register_test(name, "[conv][differential][mp]", [=] {
        RunOptions o;
        o.deadline = std::chrono::seconds(240);
        run_ranks(
            static_cast<int>(world),
            [=](RankContext&) {
              // Every rank draws the same configs from the same seed.
              std::mt19937_64 rng(std::hash<std::string>()(name));
              const int n = b.configs * sweep_factor();
              for (int k = 0; k < n; ++k) {
                ConvCase c = random_conv_case(rng, b.mesh, b.dtype);
                check_conv_case(c);
              }
            },
            o);
      });
    }

  // oneDNN's banded f32 path (backends/onednn/row_bands.h) under the halo
  // convolution: 16 channels so that oneDNN picks blocked layouts, and a
  // 1 KiB band budget so that these windows split into many bands, with
  // the halo tiles crossing band boundaries (H sharded: the band dim).
  register_test("conv differential f32 and bf16 banded oneDNN, H and W sharded, meshes 2 and 2x2",
                "[conv][differential][bands][mp]", [] {
                  RunOptions o;
                  o.deadline = std::chrono::seconds(240);
                  run_ranks(
                      4,
                      [](RankContext&) {
                        const testing::ScopedConfig budget([](Config& c) { c.onednn_band_kb = 1; });
                        auto params = [](Shape s, ConvParams::Padding p, Shape d) {
                          ConvParams q;
                          q.stride = std::move(s);
                          q.padding = std::move(p);
                          q.dilation = std::move(d);
                          return q;
                        };
                        const std::vector<ConvCase> cases = {
                            {{1, 16, 40, 24},
                             16,
                             {3, 3},
                             params({1, 1}, {{1, 1}, {1, 1}}, {1, 1}),
                             true,
                             {4},
                             {Shard(2)},
                             {},
                             DType::F32,
                             1},
                            {{2, 16, 37, 20},
                             32,
                             {4, 3},
                             params({2, 1}, {{2, 1}, {1, 1}}, {1, 2}),
                             true,
                             {4},
                             {Shard(3)},
                             {},
                             DType::F32,
                             2},
                            {{1, 16, 45, 12},
                             16,
                             {2, 3},
                             params({5, 1}, {{0, 0}, {1, 1}}, {1, 1}),
                             false,
                             {4},
                             {Shard(2)},
                             {},
                             DType::F32,
                             3},
                            {{1, 16, 36, 18},
                             16,
                             {3, 3},
                             params({1, 1}, {{2, 0}, {0, 2}}, {2, 1}),
                             true,
                             {2, 2},
                             {Shard(2), Shard(3)},
                             {},
                             DType::F32,
                             4},
                            {{1, 16, 26, 8, 8},
                             16,
                             {3, 3, 3},
                             params({1, 1, 1}, {{1, 1}, {1, 1}, {1, 1}}, {1, 1, 1}),
                             true,
                             {4},
                             {Shard(2)},
                             {},
                             DType::F32,
                             5},
                        };
                        for (auto c : cases) {
                          check_conv_case(c);
                          c.dtype = DType::BF16;  // band sums in f32, rounded once
                          check_conv_case(c);
                        }
                      },
                      o);
                });
}

}  // namespace
