// Unit tests of dtensor-conv's parts that need no processes: the command-line
// parser (and its table of refused arguments), the world-size resolution, the
// npy header, the JSON writer, the tolerance and the local window.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/cli/mini_json.h"
#include "tools/cli/json.h"
#include "tools/cli/npy.h"
#include "tools/cli/tolerance.h"
#include "tools/dtensor-conv/local_window.h"
#include "tools/dtensor-conv/options.h"
#include "tools/launch/process_set.h"

using namespace dtensor;
using namespace dtensor::conv_cli;
using namespace dtensor::cli;
using Args = std::vector<std::string>;

TEST_CASE("cli parser: defaults", "[cli][options]") {
  Options o = parse_options({});
  CHECK(o.input == Shape{2, 4, 16, 16});
  CHECK(o.kernel == std::vector<std::int64_t>{3});
  CHECK_FALSE(o.out_channels);
  CHECK(o.weight_shape() == Shape{4, 4, 3, 3});
  CHECK(o.bias);
  CHECK(o.dtype == DType::F32);
  CHECK(o.seed == 0);
  CHECK_FALSE(o.backward);
  CHECK_FALSE(o.check);
  CHECK_FALSE(o.bench);
  CHECK_FALSE(o.json);
  CHECK_FALSE(o.dump);
  CHECK(o.iters == 10);
  CHECK(o.warmup == 2);
  const ConvParams p = o.conv_params();
  CHECK(p.stride == std::vector<std::int64_t>{1, 1});
  CHECK(p.dilation == std::vector<std::int64_t>{1, 1});
  CHECK(p.padding == ConvParams::Padding{{0, 0}, {0, 0}});
  CHECK(p.groups == 1);
  // The world decides the mesh and the placements: the last spatial dim.
  resolve_for_world(o, 3);
  CHECK(o.mesh == Shape{3});
  CHECK(o.placements == Placements{Shard(3)});
}

TEST_CASE("cli parser: every option", "[cli][options]") {
  Options o = parse_options({"--mesh",
                             "2x1x2",
                             "--placements",
                             "S2,R,S4",
                             "--input",
                             "1,6,5,6,7",
                             "--out-channels=9",
                             "--kernel",
                             "3,1,2",
                             "--stride",
                             "1,2,3",
                             "--dilation=2",
                             "--padding-lr",
                             "1:0,0:2,3:3",
                             "--groups",
                             "3",
                             "--no-bias",
                             "--dtype",
                             "bf16",
                             "--seed",
                             "18446744073709551615",
                             "--backward",
                             "--check",
                             "--dump",
                             "/tmp/x",
                             "--bench",
                             "--iters",
                             "5",
                             "--warmup=0",
                             "--json"});
  CHECK(o.mesh == Shape{2, 1, 2});
  CHECK(o.placements == Placements{Shard(2), Replicate(), Shard(4)});
  CHECK(o.input == Shape{1, 6, 5, 6, 7});
  CHECK(o.weight_shape() == Shape{9, 2, 3, 1, 2});
  const ConvParams p = o.conv_params();
  CHECK(p.stride == std::vector<std::int64_t>{1, 2, 3});
  CHECK(p.dilation == std::vector<std::int64_t>{2, 2, 2});
  CHECK(p.padding == ConvParams::Padding{{1, 0}, {0, 2}, {3, 3}});
  CHECK(p.groups == 3);
  CHECK_FALSE(o.bias);
  CHECK(o.dtype == DType::BF16);
  CHECK(o.seed == 18446744073709551615ULL);
  CHECK(o.backward);
  CHECK(o.check);
  CHECK(*o.dump == "/tmp/x");
  CHECK(o.bench);
  CHECK(o.iters == 5);
  CHECK(o.warmup == 0);
  CHECK(o.json);
  resolve_for_world(o, 4);
  CHECK(o.mesh == Shape{2, 1, 2});
}

TEST_CASE("cli parser: symmetric padding and 1-D inputs", "[cli][options]") {
  const Options o = parse_options({"--input", "2,3,17", "--padding", "2", "--placements", "S2"});
  CHECK(o.conv_params().padding == ConvParams::Padding{{2, 2}});
  CHECK(o.weight_shape() == Shape{3, 3, 3});
  CHECK(parse_options({"--padding", "1,2"}).conv_params().padding ==
        ConvParams::Padding{{1, 1}, {2, 2}});
}

TEST_CASE("cli parser: --help wins", "[cli][options]") {
  CHECK(parse_options({"--stride", "0", "--help"}).help);
  CHECK(parse_options({"-h"}).help);
  CHECK(help_text().find("--padding-lr") != std::string::npos);
}

TEST_CASE("cli parser: default placements on N-D meshes", "[cli][options]") {
  Options o = parse_options({"--mesh", "2x2"});
  resolve_for_world(o, 4);
  CHECK(o.placements == Placements{Shard(2), Shard(3)});
  Options one_d = parse_options({"--mesh", "2x2", "--input", "2,3,10"});
  resolve_for_world(one_d, 4);
  CHECK(one_d.placements == Placements{Replicate(), Shard(2)});
  Options neg = parse_options({"--placements", "S-1"});
  resolve_for_world(neg, 2);
  CHECK(neg.placements == Placements{Shard(3)});
}

namespace {

struct BadCase {
  Args args;
  std::string names;  // the message must start with this
  int world = 2;      // for resolve_for_world
};

// Each refused command line and the option its message must name.
const std::vector<BadCase>& bad_cases() {
  static const std::vector<BadCase> cases = {
      {{"--bogus"}, "--bogus"},
      {{"--device", "gpu"}, "--device"},
      {{"--device"}, "--device"},
      {{"stray"}, "unexpected argument 'stray'"},
      {{"--stride"}, "--stride"},
      {{"--stride", "0"}, "--stride"},
      {{"--stride", "1,x"}, "--stride"},
      {{"--stride", "1,1,1"}, "--stride"},
      {{"--stride="}, "--stride"},
      {{"--dilation", "0"}, "--dilation"},
      {{"--dilation", "1,2,3"}, "--dilation"},
      {{"--padding", "-1"}, "--padding"},
      {{"--padding", "1,1,1"}, "--padding"},
      {{"--padding", "1", "--padding-lr", "1:1"}, "--padding"},
      {{"--padding-lr", "1"}, "--padding-lr"},
      {{"--padding-lr", "1:2:3"}, "--padding-lr"},
      {{"--padding-lr", "1:-2"}, "--padding-lr"},
      {{"--padding-lr", "1:1,1:1,1:1"}, "--padding-lr"},
      // Past 64 bits around the input: refused, not wrapped around.
      {{"--padding", "9223372036854775807"}, "--padding"},
      {{"--padding-lr", "9223372036854775000:900"}, "--padding-lr"},
      {{"--dilation", "8200884000848200882"}, "--dilation"},
      {{"--kernel", "0"}, "--kernel"},
      {{"--kernel", "3,3,3"}, "--kernel"},
      {{"--kernel", "17"}, "--input"},
      {{"--kernel", "3", "--dilation", "8"}, "--input"},
      {{"--input", "2,3"}, "--input"},
      {{"--input", "1,2,3,4,5,6"}, "--input"},
      {{"--input", "2,0,5"}, "--input"},
      {{"--input", "2,3,4x"}, "--input"},
      {{"--out-channels", "0"}, "--out-channels"},
      {{"--groups", "0"}, "--groups"},
      {{"--groups", "3"}, "--groups"},
      {{"--groups", "2", "--out-channels", "3"}, "--groups"},
      {{"--dtype", "f8"}, "--dtype"},
      {{"--seed", "-1"}, "--seed"},
      {{"--seed", "1e3"}, "--seed"},
      {{"--mesh", "2y2"}, "--mesh"},
      {{"--mesh", "0"}, "--mesh"},
      {{"--mesh", "2x2x1x1"}, "--mesh"},
      {{"--mesh", "2x2"}, "--mesh", 2},
      {{"--mesh", "3"}, "--mesh", 2},
      {{"--placements", "X3"}, "--placements"},
      {{"--placements", ""}, "--placements"},
      {{"--placements", "S7"}, "--placements"},
      {{"--placements", "P(max)"}, "--placements"},
      {{"--placements", "S2,S3"}, "--placements", 2},
      {{"--mesh", "2x2", "--placements", "S3"}, "--placements", 4},
      {{"--iters", "3"}, "--iters"},
      {{"--bench", "--iters", "0"}, "--iters"},
      {{"--warmup", "1"}, "--warmup"},
      {{"--bench", "--warmup", "-1"}, "--warmup"},
      {{"--dump", ""}, "--dump"},
      {{"--check=yes"}, "--check"},
      {{"--json=1"}, "--json"},
  };
  return cases;
}

}  // namespace

TEST_CASE("cli parser: bad arguments are refused naming the argument", "[cli][options]") {
  for (const auto& c : bad_cases()) {
    std::string joined;
    for (const auto& a : c.args)
      joined += " '" + a + "'";
    INFO("arguments:" << joined);
    std::string message;
    try {
      Options o = parse_options(c.args);
      resolve_for_world(o, c.world);
    } catch (const UsageError& e) {
      message = e.what();
    }
    INFO("message: " << message);
    CHECK(message.rfind(c.names, 0) == 0);
  }
}

TEST_CASE("cli parser: --device cpu or cuda, and cuda needs an available device",
          "[cli][options][device]") {
  CHECK(parse_options({}).device == DeviceType::CPU);
  CHECK(parse_options({"--device", "cpu"}).device == DeviceType::CPU);
  const Options cuda = parse_options({"--device=cuda"});
  CHECK(cuda.device == DeviceType::CUDA);
  // CUDA is asked about for --device cuda only: asking loads the CUDA
  // module and its libraries, a CPU run's largest start-up cost.
  int asked = 0;
  const auto unavailable = [&] {
    ++asked;
    return cli::CudaAvailability{false, "built without CUDA"};
  };
  CHECK_NOTHROW(cli::check_device(parse_options({"--device", "cpu"}).device, unavailable));
  CHECK(asked == 0);
  CHECK_NOTHROW(cli::check_device(cuda.device, [] { return cli::CudaAvailability{true, ""}; }));
  try {
    cli::check_device(cuda.device, unavailable);
    FAIL("check_device accepted --device cuda without CUDA");
  } catch (const UsageError& e) {
    const std::string m = e.what();
    CHECK(m.rfind("--device", 0) == 0);
    CHECK(m.find("built without CUDA") != std::string::npos);
  }
  CHECK(help_text().find("--device cpu|cuda") != std::string::npos);
  CHECK(help_text().find("f16") != std::string::npos);
}

TEST_CASE("cli npy: header layout as numpy writes it", "[cli][npy]") {
  const std::string h = npy_header("<f4", {2, 3});
  CHECK(h.size() % 64 == 0);
  CHECK(h.substr(0, 8) == std::string("\x93NUMPY\x01\x00", 8));
  const std::size_t len =
      static_cast<unsigned char>(h[8]) | (static_cast<unsigned char>(h[9]) << 8);
  CHECK(len + 10 == h.size());
  CHECK(h.find("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }") == 10);
  CHECK(h.back() == '\n');
  CHECK(npy_header("<f8", {5}).find("'shape': (5,)") != std::string::npos);
  CHECK(npy_header("<f8", {}).find("'shape': ()") != std::string::npos);
  CHECK(npy_descr(DType::F64) == "<f8");
  CHECK(npy_descr(DType::F32) == "<f4");
  CHECK(npy_descr(DType::BF16) == "<f4");  // widened: numpy has no bfloat16
  CHECK(npy_descr(DType::F16) == "<f2");   // numpy's float16 is IEEE binary16
}

TEST_CASE("cli npy: bf16 data is written widened to float32 in C order", "[cli][npy]") {
  launch::TempDir dir("dtensor-cli-npy");
  Tensor t = Tensor::empty({2, 2}, DType::BF16);
  const float values[] = {1.5f, -2.0f, 0.25f, 3.0f};
  for (int i = 0; i < 4; ++i)
    t.narrow(0, i / 2, 1).narrow(1, i % 2, 1).fill_(values[i]);
  write_npy(dir.path() + "/t.npy", t);
  std::ifstream in(dir.path() + "/t.npy", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  const std::string header = npy_header("<f4", {2, 2});
  REQUIRE(bytes.size() == header.size() + 16);
  CHECK(bytes.substr(0, header.size()) == header);
  float got[4];
  std::memcpy(got, bytes.data() + header.size(), 16);
  for (int i = 0; i < 4; ++i)
    CHECK(got[i] == values[i]);
}

TEST_CASE("cli json: the writer's output parses", "[cli][json]") {
  JsonObject inner;
  inner.add("a", 1.5).add("nan", std::nan(""));
  JsonObject j;
  j.add("ok", true)
      .add("n", std::int64_t{-3})
      .add("s", std::string("q\"uote\\ \n"))
      .add("list", std::vector<std::int64_t>{1, 2})
      .add("names", std::vector<std::string>{"S(3)", "R"})
      .add("none", std::optional<double>{})
      .add("tiny", 1e-300)
      .add("inner", inner);
  const auto v = testing::json::parse(j.str());
  CHECK(v.at("ok").boolean);
  CHECK(v.at("n").number == -3);
  CHECK(v.at("s").string == "q\"uote\\ \n");
  CHECK(v.at("list").array.size() == 2);
  CHECK(v.at("names").array[0].string == "S(3)");
  CHECK(v.at("none").is_null());
  CHECK(v.at("tiny").number == 1e-300);
  CHECK(v.at("inner").at("a").number == 1.5);
  CHECK(v.at("inner").at("nan").is_null());
}

TEST_CASE("cli tolerance: scales with dtype and size and magnitude", "[cli][tolerance]") {
  CHECK(tolerance(DType::F64, 1000, 4, 0.5) == Approx(1e-10));
  CHECK(tolerance(DType::F64, 1000, 4, 20) == Approx(2e-9));
  const double f32 = tolerance(DType::F32, 99, 1, 1.0);
  CHECK(f32 == Approx(std::ldexp(1.0, -24) * (8 * 10 + 2)));
  CHECK(tolerance(DType::F32, 9999, 1, 1.0) > f32);
  CHECK(tolerance(DType::F32, 99, 1, 10.0) == Approx(10 * f32));
  CHECK(tolerance(DType::BF16, 99, 1, 1.0) > 100 * f32);
  CHECK(tolerance(DType::BF16, 99, 1, 1.0) < 0.05);
  // f16: between f32 and bf16 (2^-11 vs 2^-8 storage rounding).
  CHECK(tolerance(DType::F16, 99, 1, 1.0) > 10 * f32);
  CHECK(tolerance(DType::F16, 99, 1, 1.0) < tolerance(DType::BF16, 99, 1, 1.0) / 4);
}

TEST_CASE("cli local window: the halo window and its local padding", "[cli][window]") {
  ConvParams p;
  p.padding = {{1, 1}};
  p = p.expanded(1);
  // L=16, P=2, K=3, pad 1: O=16; rank 0 outputs [0,8) reads [-1, 8] -> window [0, 9), lp 1.
  const LocalWindow w0 = local_window({2, 3, 16}, {3, 3, 3}, p, {2}, {Shard(2)}, {0});
  CHECK(w0.computes);
  CHECK(w0.input == Shape{2, 3, 9});
  CHECK(w0.params.padding == ConvParams::Padding{{1, 0}});
  const LocalWindow w1 = local_window({2, 3, 16}, {3, 3, 3}, p, {2}, {Shard(2)}, {1});
  CHECK(w1.input == Shape{2, 3, 9});
  CHECK(w1.params.padding == ConvParams::Padding{{0, 1}});
  // Batch sharding shrinks N only; a replicated input keeps everything.
  const LocalWindow wb = local_window({5, 3, 16}, {3, 3, 3}, p, {2}, {Shard(0)}, {1});
  CHECK(wb.input == Shape{2, 3, 16});
  CHECK(wb.params.padding == ConvParams::Padding{{1, 1}});
  // L=4 over P=5: rank 4 owns no output and only sends.
  const LocalWindow empty = local_window({1, 1, 4}, {1, 1, 3}, p, {5}, {Shard(2)}, {4});
  CHECK_FALSE(empty.computes);
}
