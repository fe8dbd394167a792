// Bad input through the library API: a table of cases, each run on every rank
// of a 4-rank job. Each must raise a typed exception whose message names the
// parameter at fault, the same type and message on every rank; never a crash,
// never a hang, and the group must still work afterwards (a barrier after
// every case proves that no rank raised alone while the others waited).
//
// Ranks print one line per case; the parent compares the ranks' lines.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <sstream>

#include "dtensor/dtensor.h"
#include "tests/support/multiprocess.h"

using namespace dtensor;
using namespace dtensor::testing;
using namespace std::chrono_literals;

namespace {

constexpr int kRanks = 4;

struct Ctx {
  int rank;
  DeviceMesh& mesh;  // 1-D over all 4 ranks
  DTensor& x;        // [1, 4, 8, 12] f64, S(3)
  DTensor& w;        // [6, 4, 3, 3] f64, R
  DTensor& b;        // [6] f64, R
};

struct BadCase {
  std::string name;
  std::string type;   // InvalidArgument, CommError, ...
  std::string names;  // the message must contain this (the parameter)
  std::function<void(Ctx&)> run;
};

ConvParams params(std::vector<std::int64_t> stride = {1}, ConvParams::Padding pad = {{1, 1}},
                  std::vector<std::int64_t> dilation = {1}, std::int64_t groups = 1) {
  ConvParams p;
  p.stride = std::move(stride);
  p.padding = std::move(pad);
  p.dilation = std::move(dilation);
  p.groups = groups;
  return p;
}

DTensor rep(Ctx& c, const Shape& s, DType dt = DType::F64) {
  return distribute_tensor(Tensor::rand(s, dt, 7), c.mesh, {Replicate()});
}
DTensor sharded(Ctx& c, const Shape& s, std::int64_t dim, DType dt = DType::F64) {
  return distribute_tensor(Tensor::rand(s, dt, 7), c.mesh, {Shard(dim)});
}

const std::vector<BadCase>& library_cases() {
  static const std::vector<BadCase> cases = {
      // ---- convolution: shapes ----
      {"conv input of rank 2", "InvalidArgument", "input",
       [](Ctx& c) {
         convolution(rep(c, {8, 12}), c.w, c.b, params());
       }},
      {"conv input of rank 6", "InvalidArgument", "input",
       [](Ctx& c) {
         convolution(rep(c, {1, 4, 2, 2, 2, 8}), c.w, c.b, params());
       }},
      {"conv weight rank differs from input", "InvalidArgument", "weight",
       [](Ctx& c) {
         convolution(c.x, rep(c, {6, 4, 3}), c.b, params());
       }},
      // An unbatched [C, H, W] input to a 2-d weight: named as such, not as
      // a stride list of the wrong length for 1 spatial dim.
      {"conv unbatched input", "InvalidArgument",
       "input: shape [4, 8, 12] has rank 3 where the weight",
       [](Ctx& c) {
         convolution(rep(c, {4, 8, 12}), c.w, c.b, params({1, 1}, {{1, 1}, {1, 1}}, {1, 1}));
       }},
      {"conv_transpose unbatched input", "InvalidArgument",
       "an unbatched input needs its batch dim",
       [](Ctx& c) {
         ConvTransposeParams p;
         p.stride = {2, 2};
         conv_transpose(rep(c, {6, 8, 12}), c.w, std::nullopt, p);
       }},
      {"conv channel mismatch", "InvalidArgument", "weight",
       [](Ctx& c) {
         convolution(c.x, rep(c, {6, 3, 3, 3}), c.b, params());
       }},
      {"conv groups do not divide input channels", "InvalidArgument", "groups",
       [](Ctx& c) {
         convolution(c.x, rep(c, {6, 1, 3, 3}), c.b, params({1}, {{1, 1}}, {1}, 3));
       }},
      {"conv groups do not divide output channels", "InvalidArgument", "groups",
       [](Ctx& c) {
         convolution(c.x, rep(c, {5, 2, 3, 3}), std::nullopt, params({1}, {{1, 1}}, {1}, 2));
       }},
      {"conv groups zero", "InvalidArgument", "groups",
       [](Ctx& c) {
         convolution(c.x, c.w, c.b, params({1}, {{1, 1}}, {1}, 0));
       }},
      {"conv groups negative", "InvalidArgument", "groups",
       [](Ctx& c) {
         convolution(c.x, c.w, c.b, params({1}, {{1, 1}}, {1}, -2));
       }},
      // ---- lp_pool (composed of pow and avg_pool) ----
      {"lp_pool norm_type zero", "InvalidArgument", "norm_type",
       [](Ctx& c) { lp_pool(c.x, 0.0, {2}); }},
      {"lp_pool norm_type NaN", "InvalidArgument", "norm_type",
       [](Ctx& c) { lp_pool(c.x, std::nan(""), {2}); }},
      {"lp_pool backward norm_type negative", "InvalidArgument", "norm_type",
       [](Ctx& c) { lp_pool_backward(c.x, c.x, -1.0, {2}); }},
      {"lp_pool zero kernel", "InvalidArgument", "kernel", [](Ctx& c) { lp_pool(c.x, 2.0, {0}); }},
      {"conv bias of wrong shape", "InvalidArgument", "bias",
       [](Ctx& c) { convolution(c.x, c.w, rep(c, {5}), params()); }},
      {"conv kernel larger than the padded input", "InvalidArgument", "input",
       [](Ctx& c) {
         convolution(c.x, rep(c, {6, 4, 11, 3}), c.b, params({1}, {{0, 0}}));
       }},
      {"conv dilated kernel larger than the input", "InvalidArgument", "input",
       [](Ctx& c) {
         convolution(c.x, c.w, c.b, params({1}, {{0, 0}}, {5}));
       }},
      // ---- convolution: parameters ----
      {"conv stride zero", "InvalidArgument", "stride",
       [](Ctx& c) { convolution(c.x, c.w, c.b, params({0})); }},
      {"conv stride negative", "InvalidArgument", "stride",
       [](Ctx& c) {
         convolution(c.x, c.w, c.b, params({1, -1}));
       }},
      {"conv dilation zero", "InvalidArgument", "dilation",
       [](Ctx& c) {
         convolution(c.x, c.w, c.b, params({1}, {{1, 1}}, {0}));
       }},
      {"conv dilation negative", "InvalidArgument", "dilation",
       [](Ctx& c) {
         convolution(c.x, c.w, c.b, params({1}, {{1, 1}}, {-3}));
       }},
      {"conv padding negative", "InvalidArgument", "padding",
       [](Ctx& c) {
         convolution(c.x, c.w, c.b, params({1}, {{1, -1}}));
       }},
      {"conv stride list too long", "InvalidArgument", "stride",
       [](Ctx& c) {
         convolution(c.x, c.w, c.b, params({1, 1, 1}));
       }},
      {"conv padding list too long", "InvalidArgument", "padding",
       [](Ctx& c) {
         convolution(c.x, c.w, c.b, params({1}, {{1, 1}, {1, 1}, {1, 1}}));
       }},
      {"conv dilation list too long", "InvalidArgument", "dilation",
       [](Ctx& c) {
         convolution(c.x, c.w, c.b, params({1}, {{1, 1}}, {1, 1, 1, 1}));
       }},
      // ---- convolution: dtypes, devices, meshes ----
      {"conv weight dtype differs", "InvalidArgument", "weight",
       [](Ctx& c) {
         convolution(c.x, rep(c, {6, 4, 3, 3}, DType::F32), std::nullopt, params());
       }},
      {"conv bias dtype differs", "InvalidArgument", "bias",
       [](Ctx& c) { convolution(c.x, c.w, rep(c, {6}, DType::F32), params()); }},
      {"conv operands on different meshes", "InvalidArgument", "mesh",
       [](Ctx& c) {
         DeviceMesh other(DeviceType::CPU, {2, 2});
         auto w2 = distribute_tensor(Tensor::rand({6, 4, 3, 3}, DType::F64, 1), other,
                                     {Replicate(), Replicate()});
         convolution(c.x, w2, std::nullopt, params());
       }},
      {"tensor on a device this build lacks", "NotSupported", "cuda",
       [](Ctx&) { Tensor::empty({4}, DType::F32, Device::cuda(0)); }},
      {"cpu tensor on a cuda mesh", "InvalidArgument", "device",
       [](Ctx&) {
         // distribute_tensor moves data to the mesh's device; a DTensor
         // built from parts must already be there.
         DeviceMesh cuda_mesh(DeviceType::CUDA, {kRanks});
         DTensor(Tensor::rand({2}, DType::F32, 1),
                 DTensorSpec(cuda_mesh, {Shard(0)}, {8}, DType::F32));
       }},
      // ---- convolution backward ----
      {"conv backward grad_output of wrong shape", "InvalidArgument", "grad_output",
       [](Ctx& c) {
         convolution_backward(sharded(c, {1, 6, 8, 11}, 3), c.x, c.w, params());
       }},
      {"conv backward grad_output dtype differs", "InvalidArgument", "grad_output",
       [](Ctx& c) {
         convolution_backward(sharded(c, {1, 6, 8, 12}, 3, DType::F32), c.x, c.w, params());
       }},
      {"conv backward stride zero", "InvalidArgument", "stride",
       [](Ctx& c) {
         convolution_backward(sharded(c, {1, 6, 8, 12}, 3), c.x, c.w, params({0}));
       }},
      // ---- meshes ----
      {"mesh larger than the world", "InvalidArgument", "mesh",
       [](Ctx&) { DeviceMesh m(DeviceType::CPU, {kRanks * 2}); }},
      {"mesh 2-D larger than the world", "InvalidArgument", "mesh",
       [](Ctx&) {
         DeviceMesh m(DeviceType::CPU, {kRanks, 2});
       }},
      {"mesh shape with a zero dim", "InvalidArgument", "mesh shape",
       [](Ctx&) {
         DeviceMesh m(DeviceType::CPU, {kRanks, 0});
       }},
      {"mesh of 4 dims", "InvalidArgument", "mesh shape",
       [](Ctx&) {
         DeviceMesh m(DeviceType::CPU, {1, 1, 2, 2});
       }},
      {"mesh ranks count differs from its shape", "InvalidArgument", "mesh shape",
       [](Ctx&) {
         DeviceMesh m(DeviceType::CPU, {2}, {0, 1, 2});
       }},
      {"mesh rank outside the world", "InvalidArgument", "mesh ranks",
       [](Ctx&) {
         DeviceMesh m(DeviceType::CPU, {2}, {0, kRanks + 3});
       }},
      {"mesh rank twice", "InvalidArgument", "mesh ranks",
       [](Ctx&) {
         DeviceMesh m(DeviceType::CPU, {2}, {1, 1});
       }},
      // Rows {0, 1} and {3, 2}: before the fix, ranks 0 and 1 went on into
      // group creation while 2 and 3 raised (a hang until the timeout).
      {"mesh 2x2 with a decreasing row", "InvalidArgument", "mesh ranks",
       [](Ctx&) {
         DeviceMesh m(DeviceType::CPU, {2, 2}, {0, 1, 3, 2});
       }},
      // ---- placements ----
      {"distribute placement dim out of range", "InvalidArgument", "S(4)",
       [](Ctx& c) {
         distribute_tensor(Tensor::rand({4, 4, 4, 4}, DType::F64, 1), c.mesh, {Shard(4)});
       }},
      {"distribute placement dim negative out of range", "InvalidArgument", "S(-5)",
       [](Ctx& c) {
         distribute_tensor(Tensor::rand({4, 4, 4, 4}, DType::F64, 1), c.mesh, {Shard(-5)});
       }},
      {"distribute placements count differs from mesh dims", "InvalidArgument", "placement",
       [](Ctx& c) {
         distribute_tensor(Tensor::rand({4, 4}, DType::F64, 1), c.mesh, {Shard(0), Replicate()});
       }},
      {"distribute no placements", "InvalidArgument", "placement",
       [](Ctx& c) {
         distribute_tensor(Tensor::rand({4, 4}, DType::F64, 1), c.mesh, {});
       }},
      {"distribute undefined tensor on the source", "InvalidArgument", "undefined",
       [](Ctx& c) {
         distribute_tensor(c.rank == 0 ? Tensor() : Tensor::rand({4}, DType::F64, 1), c.mesh,
                           {Shard(0)});
       }},
      {"distribute from a source outside the mesh", "InvalidArgument", "src",
       [](Ctx& c) { distribute_tensor(Tensor::rand({4}, DType::F64, 1), c.mesh, {Shard(0)}, 9); }},
      {"redistribute placement dim out of range", "InvalidArgument", "S(7)",
       [](Ctx& c) { c.x.redistribute(c.mesh, {Shard(7)}); }},
      {"redistribute placements count differs from mesh dims", "InvalidArgument", "placement",
       [](Ctx& c) {
         c.x.redistribute(c.mesh, {Replicate(), Replicate()});
       }},
      {"redistribute shard to partial", "InvalidArgument", "P(sum)",
       [](Ctx& c) { c.x.redistribute(c.mesh, {Partial()}); }},
      {"redistribute to another mesh", "InvalidArgument", "mesh",
       [](Ctx& c) {
         DeviceMesh other(DeviceType::CPU, {2, 2});
         c.x.redistribute(other, {Replicate(), Replicate()});
       }},
      {"from_local shards that break the chunk rule", "InvalidArgument", "from_local",
       [](Ctx& c) {
         DTensor::from_local(Tensor::rand({c.rank == 0 ? 5 : 1, 3}, DType::F64, 1), c.mesh,
                             {Shard(0)});
       }},
      {"from_local local tensors of different ranks", "InvalidArgument", "from_local",
       [](Ctx& c) {
         DTensor::from_local(
             Tensor::rand(c.rank == 1 ? Shape{2, 3, 1} : Shape{2, 3}, DType::F64, 1), c.mesh,
             {Shard(0)});
       }},
      {"from_local with a wrong global shape", "InvalidArgument", "local shape",
       [](Ctx& c) {
         DTensor::from_local(Tensor::rand({2, 3}, DType::F64, 1), c.mesh, {Shard(0)},
                             Shape{100, 3});
       }},
      {"a spec of 2^80 elements", "InvalidArgument", "64 bits",
       [](Ctx& c) {
         DTensorSpec(c.mesh, {Shard(0)}, {std::int64_t{1} << 40, std::int64_t{1} << 40},
                     DType::F32);
       }},
      // Found by the tensor API fuzzer: a coordinate outside the mesh gave a
      // Replicate spec's global shape, and a short one was read past its end.
      {"a spec's shard at a coordinate outside the mesh", "InvalidArgument", "outside the mesh",
       [](Ctx& c) { DTensorSpec(c.mesh, {Replicate()}, {8}, DType::F32).local_shape_at({4}); }},
      {"a spec's offset at a coordinate with too few entries", "InvalidArgument", "entries",
       [](Ctx& c) { DTensorSpec(c.mesh, {Shard(0)}, {8}, DType::F32).global_offset_at({}); }},
      {"from_local with a global shape that differs between ranks", "InvalidArgument", "from_local",
       [](Ctx& c) {
         DTensor::from_local(Tensor::rand({2, 3}, DType::F64, 1), c.mesh, {Shard(0)},
                             Shape{c.rank == 0 ? 8 : 9, 3});
       }},
      {"from_local whose local tensor fits on one rank only", "InvalidArgument", "rank 1",
       [](Ctx& c) {
         DTensor::from_local(Tensor::rand({c.rank == 1 ? 3 : 2, 3}, DType::F64, 1), c.mesh,
                             {Shard(0)}, Shape{8, 3});
       }},
      // ---- pointwise ----
      {"add shapes differ", "InvalidArgument", "shapes",
       [](Ctx& c) {
         add(sharded(c, {8, 4}, 0), sharded(c, {8, 5}, 0));
       }},
      {"add dtypes differ", "InvalidArgument", "dtypes",
       [](Ctx& c) {
         add(sharded(c, {8, 4}, 0), sharded(c, {8, 4}, 0, DType::F32));
       }},
      {"unknown operator", "InvalidArgument", "no_such_op",
       [](Ctx& c) { dispatch("no_such_op", {c.x}); }},
      // ---- ranks that disagree (the collective agreement check) ----
      {"ranks disagree on the conv stride", "InvalidArgument", "ranks disagree",
       [](Ctx& c) { convolution(c.x, c.w, c.b, params({c.rank == 2 ? 2 : 1})); }},
      {"one rank passes a negative padding", "InvalidArgument", "ranks disagree",
       [](Ctx& c) {
         convolution(c.x, c.w, c.b, params({1}, {{1, c.rank == 3 ? -1 : 1}}));
       }},
      // Before the fix, rank 1 raised alone in the front-end's own check.
      {"one rank passes a stride list of the wrong length", "InvalidArgument", "ranks disagree",
       [](Ctx& c) {
         convolution(c.x, c.w, c.b,
                     params(c.rank == 1 ? std::vector<std::int64_t>{1, 1, 1}
                                        : std::vector<std::int64_t>{1}));
       }},
      {"one rank passes a stride list of the wrong length to backward", "InvalidArgument",
       "ranks disagree",
       [](Ctx& c) {
         auto gy = sharded(c, {1, 6, 8, 12}, 3);
         convolution_backward(gy, c.x, c.w,
                              params(c.rank == 0 ? std::vector<std::int64_t>{1, 1, 1}
                                                 : std::vector<std::int64_t>{1}));
       }},
      {"ranks disagree on the conv weight shape", "InvalidArgument", "ranks disagree",
       [](Ctx& c) {
         auto w = DTensor::from_local(Tensor::rand({6, 4, 3, c.rank == 1 ? 1 : 3}, DType::F64, 1),
                                      c.mesh, {Replicate()}, Shape{6, 4, 3, c.rank == 1 ? 1 : 3});
         convolution(c.x, w, std::nullopt, params());
       }},
      {"ranks disagree on the redistribute target", "InvalidArgument", "ranks disagree",
       [](Ctx& c) { c.x.redistribute(c.mesh, {c.rank == 0 ? Replicate() : Shard(2)}); }},
      // Before the fix, rank 2 raised alone in the planner.
      {"one rank passes an invalid redistribute target", "InvalidArgument", "ranks disagree",
       [](Ctx& c) { c.x.redistribute(c.mesh, {c.rank == 2 ? Shard(9) : Replicate()}); }},
      // Before the fix, the ranks cut and received different shapes.
      {"ranks disagree on distribute placements", "InvalidArgument", "ranks disagree",
       [](Ctx& c) {
         distribute_tensor(Tensor::rand({8, 8}, DType::F64, 1), c.mesh,
                           {c.rank == 3 ? Shard(1) : Shard(0)});
       }},
      {"ranks disagree on the distribute source", "InvalidArgument", "ranks disagree",
       [](Ctx& c) {
         distribute_tensor(Tensor::rand({8}, DType::F64, 1), c.mesh, {Shard(0)}, c.rank == 1);
       }},
      {"ranks disagree on the add shapes", "InvalidArgument", "ranks disagree",
       [](Ctx& c) {
         auto a = DTensor::from_local(Tensor::rand({2, c.rank == 0 ? 5 : 4}, DType::F64, 1), c.mesh,
                                      {Shard(0)}, Shape{8, c.rank == 0 ? 5 : 4});
         add(a, a);
       }},
  };
  return cases;
}

std::string error_type(const std::exception& e) {
  if (dynamic_cast<const TimeoutError*>(&e)) return "TimeoutError";
  if (dynamic_cast<const CommError*>(&e)) return "CommError";
  if (dynamic_cast<const InvalidArgument*>(&e)) return "InvalidArgument";
  if (dynamic_cast<const NotSupported*>(&e)) return "NotSupported";
  if (dynamic_cast<const Error*>(&e)) return "Error";
  return "std::exception";
}

std::string one_line(std::string s) {
  for (char& ch : s)
    if (ch == '\n') ch = ' ';
  return s;
}

// "CASE <index>|<type>|<message>" per case, from one rank's output.
std::map<int, std::pair<std::string, std::string>> parse_rank_output(const std::string& out) {
  std::map<int, std::pair<std::string, std::string>> m;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("CASE ", 0) != 0) continue;
    const auto bar1 = line.find('|'), bar2 = line.find('|', bar1 + 1);
    if (bar1 == std::string::npos || bar2 == std::string::npos) continue;
    m[std::stoi(line.substr(5, bar1 - 5))] = {line.substr(bar1 + 1, bar2 - bar1 - 1),
                                              line.substr(bar2 + 1)};
  }
  return m;
}

}  // namespace

TEST_CASE(
    "bad input: every library case raises a typed error naming the parameter, alike on "
    "every rank P=4",
    "[reliability][bad-input]") {
  const auto& cases = library_cases();
  REQUIRE(cases.size() >= 40);
  RunOptions opt;
  // A case that leaves one rank behind shows as a timeout of the barrier
  // after it: short, so that such a bug fails fast instead of stalling.
  opt.comm_timeout = 10s;
  opt.deadline = 120s;
  const JobResult res = run_ranks_collect(
      kRanks,
      [&](RankContext& ctx) {
        DeviceMesh mesh(DeviceType::CPU, {kRanks});
        DTensor x = distribute_tensor(Tensor::rand({1, 4, 8, 12}, DType::F64, 1), mesh, {Shard(3)});
        DTensor w =
            distribute_tensor(Tensor::rand({6, 4, 3, 3}, DType::F64, 2), mesh, {Replicate()});
        DTensor b = distribute_tensor(Tensor::rand({6}, DType::F64, 3), mesh, {Replicate()});
        Ctx c{ctx.rank, mesh, x, w, b};
        for (std::size_t i = 0; i < cases.size(); ++i) {
          std::string type = "NOTHROW", what;
          try {
            cases[i].run(c);
          } catch (const std::exception& e) {
            type = error_type(e);
            what = e.what();
          }
          std::printf("CASE %zu|%s|%s\n", i, type.c_str(), one_line(what).c_str());
          std::fflush(stdout);
          // Still in step: every rank got here, and the group works.
          ctx.pg->barrier();
        }
        // And real work still runs correctly after all of that.
        const Tensor y = convolution(x, w, b, params()).full_tensor();
        REQUIRE(y.shape() == Shape{1, 6, 8, 12});
      },
      opt);
  if (in_rank_process()) return;
  INFO(res.report());
  std::vector<std::map<int, std::pair<std::string, std::string>>> per_rank;
  for (const auto& r : res.ranks)
    per_rank.push_back(parse_rank_output(r.output));
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const BadCase& bc = cases[i];
    INFO("case " << i << ": " << bc.name);
    const auto it = per_rank[0].find(static_cast<int>(i));
    REQUIRE(it != per_rank[0].end());
    const auto& [type, what] = it->second;
    INFO("rank 0 raised " << type << ": " << what);
    CHECK(type == bc.type);
    CHECK_THAT(what, Catch::Contains(bc.names));
    for (int r = 1; r < kRanks; ++r) {
      const auto jt = per_rank[r].find(static_cast<int>(i));
      REQUIRE(jt != per_rank[r].end());
      INFO("rank " << r << " raised " << jt->second.first << ": " << jt->second.second);
      CHECK(jt->second == it->second);
    }
  }
  for (const auto& r : res.ranks)
    CHECK(r.ok);
}

namespace {

struct EnvCase {
  std::string name;
  std::map<std::string, std::string> env;  // "" value: unset
  std::string type;
  std::string names;
};

// Settings a user can get wrong, each tried through init_process_group() with
// everything else valid (a one-rank job with a private store).
const std::vector<EnvCase>& env_cases() {
  static const std::vector<EnvCase> cases = {
      {"rank not a number", {{"DTENSOR_RANK", "abc"}}, "InvalidArgument", "DTENSOR_RANK"},
      {"rank with trailing garbage", {{"DTENSOR_RANK", "0x"}}, "InvalidArgument", "DTENSOR_RANK"},
      {"rank outside the world", {{"DTENSOR_RANK", "3"}}, "InvalidArgument", "DTENSOR_RANK"},
      {"rank negative", {{"DTENSOR_RANK", "-1"}}, "InvalidArgument", "DTENSOR_RANK"},
      {"world size zero", {{"DTENSOR_WORLD_SIZE", "0"}}, "InvalidArgument", "DTENSOR_WORLD_SIZE"},
      {"world size not a number",
       {{"DTENSOR_WORLD_SIZE", "two"}},
       "InvalidArgument",
       "DTENSOR_WORLD_SIZE"},
      {"world size overflows",
       {{"DTENSOR_WORLD_SIZE", "99999999999999"}},
       "InvalidArgument",
       "DTENSOR_WORLD_SIZE"},
      {"local rank negative", {{"DTENSOR_LOCAL_RANK", "-2"}}, "InvalidArgument", "local rank"},
      {"torchrun rank not a number",
       {{"DTENSOR_RANK", ""}, {"RANK", "x"}},
       "InvalidArgument",
       "RANK"},
      {"two ranks without a rank",
       {{"DTENSOR_RANK", ""}, {"DTENSOR_WORLD_SIZE", "2"}},
       "InvalidArgument",
       "DTENSOR_RANK"},
      {"two ranks without a store",
       {{"DTENSOR_RANK", "1"}, {"DTENSOR_WORLD_SIZE", "2"}, {"DTENSOR_STORE", ""}},
       "InvalidArgument",
       "DTENSOR_STORE"},
      {"timeout zero", {{"DTENSOR_TIMEOUT", "0"}}, "InvalidArgument", "DTENSOR_TIMEOUT"},
      {"timeout negative", {{"DTENSOR_TIMEOUT", "-3"}}, "InvalidArgument", "DTENSOR_TIMEOUT"},
      {"timeout not a number", {{"DTENSOR_TIMEOUT", "soon"}}, "InvalidArgument", "DTENSOR_TIMEOUT"},
      {"timeout not finite", {{"DTENSOR_TIMEOUT", "inf"}}, "InvalidArgument", "DTENSOR_TIMEOUT"},
      {"timeout NaN", {{"DTENSOR_TIMEOUT", "nan"}}, "InvalidArgument", "DTENSOR_TIMEOUT"},
      {"timeout huge", {{"DTENSOR_TIMEOUT", "1e300"}}, "InvalidArgument", "DTENSOR_TIMEOUT"},
      {"store URL of 100 kB",
       {{"DTENSOR_STORE", "redis://" + std::string(100000, 'a') + ":1x"}},
       "InvalidArgument",
       "DTENSOR_STORE"},
      {"store of an unknown scheme",
       {{"DTENSOR_STORE", "ftp://host/x"}},
       "InvalidArgument",
       "DTENSOR_STORE"},
      {"store file: without a directory",
       {{"DTENSOR_STORE", "file:"}},
       "InvalidArgument",
       "DTENSOR_STORE"},
      {"store file: not a directory",
       {{"DTENSOR_STORE", "file:/dev/null"}},
       "InvalidArgument",
       "DTENSOR_STORE"},
      {"store redis without a port",
       {{"DTENSOR_STORE", "redis://host"}},
       "InvalidArgument",
       "DTENSOR_STORE"},
      {"store redis port zero",
       {{"DTENSOR_STORE", "redis://host:0"}},
       "InvalidArgument",
       "DTENSOR_STORE"},
      {"store redis port too large",
       {{"DTENSOR_STORE", "redis://host:99999"}},
       "InvalidArgument",
       "DTENSOR_STORE"},
      {"store redis without a host",
       {{"DTENSOR_STORE", "redis://:6379"}},
       "InvalidArgument",
       "DTENSOR_STORE"},
      {"store redis with a path",
       {{"DTENSOR_STORE", "redis://host:6379/0"}},
       "InvalidArgument",
       "DTENSOR_STORE"},
      // 127.0.0.1:1 is never a Redis server: refused at once.
      {"store redis nobody listens",
       {{"DTENSOR_STORE", "redis://127.0.0.1:1"}},
       "CommError",
       "redis"},
      {"store rediss (no TLS in this build)",
       {{"DTENSOR_STORE", "rediss://127.0.0.1:1"}},
       "NotSupported",
       "rediss://"},
      {"store redis credentials without a colon",
       {{"DTENSOR_STORE", "redis://user@127.0.0.1:1"}},
       "InvalidArgument",
       "DTENSOR_STORE"},
      {"job id with a space", {{"DTENSOR_JOB_ID", "my job"}}, "InvalidArgument", "DTENSOR_JOB_ID"},
      {"job token too short",
       {{"DTENSOR_JOB_TOKEN", "short"}},
       "InvalidArgument",
       "DTENSOR_JOB_TOKEN"},
      {"heartbeat timeout equal to the interval",
       {{"DTENSOR_HEARTBEAT_INTERVAL", "2"}, {"DTENSOR_HEARTBEAT_TIMEOUT", "2"}},
       "InvalidArgument",
       "DTENSOR_HEARTBEAT_TIMEOUT=2 must be greater than DTENSOR_HEARTBEAT_INTERVAL=2"},
      {"heartbeat timeout below the default interval",
       {{"DTENSOR_HEARTBEAT_TIMEOUT", "0.5"}},
       "InvalidArgument",
       "DTENSOR_HEARTBEAT_TIMEOUT=0.5 must be greater than DTENSOR_HEARTBEAT_INTERVAL=2"},
      {"stdout buffering misspelled",
       {{"DTENSOR_STDOUT_BUFFERING", "full"}},
       "InvalidArgument",
       "DTENSOR_STDOUT_BUFFERING"},
      // DTENSOR_HOSTNAME / DTENSOR_IFNAME: a one-rank job creates no transport,
      // so they are checked with two ranks in launcher_bad_input_tests.cpp.
  };
  return cases;
}

}  // namespace

TEST_CASE("bad input: malformed environment variables and store URLs raise naming the variable",
          "[reliability][bad-input]") {
  RunOptions opt;
  opt.init_process_group = false;
  opt.comm_timeout = 5s;
  const auto& cases = env_cases();
  const JobResult res = run_ranks_collect(
      1,
      [&](RankContext&) {
        for (std::size_t i = 0; i < cases.size(); ++i) {
          std::map<std::string, std::optional<std::string>> saved;
          for (const auto& [k, v] : cases[i].env) {
            const char* old = std::getenv(k.c_str());
            saved[k] = old ? std::optional<std::string>(old) : std::nullopt;
            if (v.empty())
              unsetenv(k.c_str());
            else
              setenv(k.c_str(), v.c_str(), 1);
          }
          std::string type = "NOTHROW", what;
          try {
            init_process_group();
          } catch (const std::exception& e) {
            type = error_type(e);
            what = e.what();
          }
          destroy_process_group();
          for (const auto& [k, v] : saved)
            v ? setenv(k.c_str(), v->c_str(), 1) : unsetenv(k.c_str());
          std::printf("CASE %zu|%s|%s\n", i, type.c_str(), one_line(what).c_str());
          std::fflush(stdout);
        }
      },
      opt);
  if (in_rank_process()) return;
  INFO(res.report());
  REQUIRE(res.ranks[0].ok);
  const auto got = parse_rank_output(res.ranks[0].output);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    INFO("case " << i << ": " << cases[i].name);
    const auto it = got.find(static_cast<int>(i));
    REQUIRE(it != got.end());
    INFO("raised " << it->second.first << ": " << it->second.second);
    CHECK(it->second.first == cases[i].type);
    CHECK_THAT(it->second.second, Catch::Contains(cases[i].names));
  }
}

TEST_CASE("bad input: the text parsers name the parameter", "[reliability][bad-input]") {
  for (const char* bad : {"", "S", "S()", "S(x)", "Q", "S(1", "R,", ",R", "P(prod)", "S(1)R",
                          "S(99999999999999999999)"}) {
    INFO("placements '" << bad << "'");
    try {
      parse_placements(bad, "--placements");
      FAIL("accepted");
    } catch (const InvalidArgument& e) {
      CHECK_THAT(std::string(e.what()), Catch::Contains("--placements"));
    }
  }
  for (const char* bad : {"", "1,,2", "a", "1,2,", "-", "1x2", "99999999999999999999"}) {
    INFO("int list '" << bad << "'");
    try {
      parse_int_list(bad, "--input");
      FAIL("accepted");
    } catch (const InvalidArgument& e) {
      CHECK_THAT(std::string(e.what()), Catch::Contains("--input"));
    }
  }
}
