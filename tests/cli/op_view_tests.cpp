// dtensor-op's shape operators (reshape, permute, transpose, flatten,
// narrow): the parser on its own (options resolved, defaults, refusals naming
// the option), --check runs under dtensor-run on 1, 2 and 4 ranks with the
// output placements the view rules give, refusals on every rank, and dumps
// replayed by tools/check_op_dump.py against PyTorch when it is importable.
#include <catch2/catch.hpp>

#include <chrono>
#include <fstream>
#include <utility>

#include "tests/cli/mini_json.h"
#include "tests/cli/op_cli_run.h"
#include "tools/dtensor-op/options.h"
#include "tools/launch/process_set.h"

namespace {

using namespace dtensor::testing::op_cli_run;
using namespace std::chrono_literals;
using Ints = std::vector<std::int64_t>;

}  // namespace

// ---- the parser alone ----------------------------------------------------------

TEST_CASE("op cli views: options resolved, defaults filled in", "[cli][op][views]") {
  auto o = parse_options({"reshape", "--input", "2,4,3,5", "--shape", "8,-1"});
  CHECK(o.op == OpKind::Reshape);
  CHECK(o.shape == dtensor::Shape{8, 15});
  CHECK(o.output_shape() == dtensor::Shape{8, 15});
  o = parse_options({"reshape", "--input", "1,1", "--shape", "[]"});
  CHECK(o.shape.empty());
  o = parse_options({"permute", "--input", "2,4,3", "--order", "-1,0,1"});
  CHECK(o.order == Ints{2, 0, 1});
  CHECK(o.output_shape() == dtensor::Shape{3, 2, 4});
  o = parse_options({"transpose", "--input", "2,4,3", "--dim0", "-1", "--dim1", "0"});
  CHECK(o.dim0 == 2);
  CHECK(o.dim1 == 0);
  CHECK(o.output_shape() == dtensor::Shape{3, 4, 2});
  o = parse_options({"flatten", "--input", "2,4,3,5"});
  CHECK(o.start_dim == 1);  // the CLI's defaults: 1 and -1 (nn.Flatten's)
  CHECK(o.end_dim == 3);
  CHECK(o.output_shape() == dtensor::Shape{2, 60});
  o = parse_options({"flatten", "--input", "2,4,3,5", "--start-dim", "0", "--end-dim", "-2"});
  CHECK(o.start_dim == 0);
  CHECK(o.end_dim == 2);
  CHECK(o.output_shape() == dtensor::Shape{24, 5});
  o = parse_options({"narrow", "--input", "2,7", "--dim", "-1", "--start", "-3", "--length", "2"});
  CHECK(o.dim == 1);
  CHECK(o.start == 4);
  CHECK(o.length == 2);
  CHECK(o.output_shape() == dtensor::Shape{2, 2});
  o = parse_options({"narrow", "--input", "6", "--dim", "0", "--start", "6", "--length", "0"});
  CHECK(o.output_shape() == dtensor::Shape{0});
}

TEST_CASE("op cli views: invalid arguments name the option", "[cli][op][views]") {
  rejects({"reshape"}, "--shape");
  rejects({"reshape", "--input", "2,4", "--shape", "3,3"}, "--shape");
  rejects({"reshape", "--input", "2,4", "--shape", "-1,-1"}, "--shape");
  rejects({"reshape", "--input", "2,4", "--shape", "-1,0"}, "--shape");
  rejects({"reshape", "--input", "2,4", "--shape", "-2,-4"}, "--shape");
  rejects({"reshape", "--input", "2,4", "--shape", "x"}, "--shape");
  rejects({"permute"}, "--order");
  rejects({"permute", "--input", "2,4,3", "--order", "0,1"}, "--order");
  rejects({"permute", "--input", "2,4,3", "--order", "0,1,1"}, "--order");
  rejects({"permute", "--input", "2,4,3", "--order", "0,1,3"}, "--order");
  rejects({"transpose", "--dim1", "0"}, "--dim0");
  rejects({"transpose", "--dim0", "0"}, "--dim1");
  rejects({"transpose", "--input", "2,4", "--dim0", "0", "--dim1", "2"}, "--dim1");
  rejects({"flatten", "--input", "2,4,3", "--start-dim", "2", "--end-dim", "1"}, "--start-dim");
  rejects({"flatten", "--input", "2,4,3", "--end-dim", "3"}, "--end-dim");
  rejects({"flatten", "--input", "6"}, "--start-dim");  // the default 1 on a 1-d input
  rejects({"narrow", "--start", "0", "--length", "1"}, "--dim");
  rejects({"narrow", "--dim", "0", "--length", "1"}, "--start");
  rejects({"narrow", "--dim", "0", "--start", "0"}, "--length");
  rejects({"narrow", "--input", "2,4", "--dim", "2", "--start", "0", "--length", "1"}, "--dim");
  rejects({"narrow", "--input", "2,4", "--dim", "1", "--start", "5", "--length", "0"}, "--start");
  rejects({"narrow", "--input", "2,4", "--dim", "1", "--start", "-5", "--length", "0"}, "--start");
  rejects({"narrow", "--input", "2,4", "--dim", "1", "--start", "2", "--length", "3"}, "--length");
  rejects({"narrow", "--input", "2,4", "--dim", "1", "--start", "2", "--length", "-1"}, "--length");
  rejects({"reshape", "--shape", "2", "--order", "0"}, "--order");
  rejects({"narrow", "--dim0", "0"}, "--dim0");
  rejects({"add", "--shape", "2"}, "--shape");
}

// ---- the binary under the launcher ----------------------------------------------

TEST_CASE("op cli run views: a bad option fails on every rank, naming it",
          "[cli][op][run][views]") {
  for (const auto& [args, option] : std::vector<std::pair<Args, std::string>>{
           {{"reshape", "--input", "2,4", "--shape", "3,-1"}, "--shape"},
           {{"permute", "--input", "2,4", "--order", "0"}, "--order"},
           {{"narrow", "--input", "2,4", "--dim", "1", "--start", "0"}, "--length"}}) {
    INFO("args: " << Catch::Detail::stringify(args));
    const Ran r = run_op(2, args);
    INFO("output:\n" << r.output);
    CHECK(r.code != 0);
    CHECK(r.output.find("[0] dtensor-op: " + option) != std::string::npos);
    CHECK(r.output.find("[1] dtensor-op: " + option) != std::string::npos);
  }
  const Ran help = run_program({kOp, "--help"});
  CHECK(help.code == 0);
  for (const char* op : {"reshape", "permute", "transpose", "flatten", "narrow", "--shape",
                         "--order", "--dim0", "--dim1", "--start-dim", "--end-dim", "--length"})
    CHECK(help.output.find(op) != std::string::npos);
}

TEST_CASE(
    "op cli run views: every operator passes --check on 1, 2 and 4 ranks, placed by the "
    "view rules",
    "[cli][op][run][views]") {
  const std::vector<std::string> x{"output", "grad_input"};
  const auto placed = [&](int ranks, const Args& args, const std::vector<std::string>& expected) {
    const json::Value v = check_passes(ranks, args, x);
    const auto& got = v.at("output_placements").array;
    REQUIRE(got.size() == expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i)
      CHECK(got[i].string == expected[i]);
  };
  // Default placements: S3 on one rank, the inner dim of a merge: replicated.
  placed(1, {"reshape", "--input", "2,4,3,5", "--shape", "8,-1"}, {"R"});
  placed(2, {"reshape", "--input", "4,3,5", "--shape", "12,5", "--placements", "S0"}, {"S(0)"});
  placed(2, {"reshape", "--input", "3,2,5", "--shape", "6,5", "--placements", "S0"}, {"R"});
  placed(2, {"reshape", "--input", "12,5", "--shape", "4,3,5", "--placements", "S0"}, {"S(0)"});
  placed(
      4,
      {"reshape", "--input", "4,6,5", "--shape", "24,5", "--mesh", "2x2", "--placements", "S0,S2"},
      {"S(0)", "S(1)"});
  placed(2, {"permute", "--input", "2,3,5", "--order", "2,0,1", "--placements", "S0"}, {"S(1)"});
  placed(
      4,
      {"permute", "--input", "2,3,5", "--order", "1,2,0", "--mesh", "2x2", "--placements", "S1,S2"},
      {"S(0)", "S(1)"});
  placed(2,
         {"transpose", "--input", "3,5", "--dim0", "0", "--dim1", "1", "--placements", "S1",
          "--dtype", "bf16"},
         {"S(0)"});
  placed(2, {"flatten", "--input", "2,4,3,5", "--placements", "S1"}, {"S(1)"});
  placed(2, {"flatten", "--input", "2,3,4,5", "--placements", "S1"}, {"R"});
  placed(4,
         {"flatten", "--input", "2,4,3,5", "--start-dim", "0", "--end-dim", "1", "--placements",
          "S0", "--dtype", "f64"},
         {"R"});  // 2 rows over 4 ranks: 1, 1, 0, 0 rows of 4 against 2 each
  placed(2,
         {"narrow", "--input", "5,6", "--dim", "0", "--start", "1", "--length", "3", "--placements",
          "S0"},
         {"R"});
  placed(2,
         {"narrow", "--input", "5,6", "--dim", "1", "--start", "-4", "--length", "3",
          "--placements", "S0"},
         {"S(0)"});
  placed(2, {"reshape", "--input", "4,6", "--shape", "24", "--placements", "P"}, {"P(sum)"});
}

TEST_CASE("op cli run views: dumps hold their resolved options, PyTorch agrees",
          "[cli][op][run][views]") {
  dtensor::launch::TempDir dir("dtensor-op-view-dump");
  const std::vector<Args> cases{
      {"reshape", "--input", "3,4,5", "--shape", "-1,10", "--placements", "S0"},
      {"permute", "--input", "2,3,5", "--order", "-1,0,1", "--placements", "S2"},
      {"transpose", "--input", "2,3,5", "--dim0", "-1", "--dim1", "1", "--placements", "S1"},
      {"flatten", "--input", "2,4,3,5", "--end-dim", "-2", "--placements", "S1"},
      {"narrow", "--input", "5,7", "--dim", "-1", "--start", "-5", "--length", "3", "--placements",
       "S1"},
  };
  std::vector<std::string> dumps;
  for (const auto& c : cases) {
    const std::string dump = dir.path() + "/" + c[0];
    const json::Value meta = dumped_meta(c, {"--backward"}, dump);
    const std::string& op = c[0];
    CHECK(meta.at("op").string == op);
    for (const char* f : {"input", "output", "grad_output", "grad_input"})
      CHECK(meta.at("files").has(f));
    const auto ints = [&](const char* key) {
      Ints out;
      for (const auto& v : meta.at(key).array)
        out.push_back(static_cast<std::int64_t>(v.number));
      return out;
    };
    if (op == "reshape") {
      CHECK(ints("shape") == Ints{6, 10});
    } else if (op == "permute") {
      CHECK(ints("order") == Ints{2, 0, 1});
    } else if (op == "transpose") {
      CHECK(meta.at("dim0").number == 2);
      CHECK(meta.at("dim1").number == 1);
    } else if (op == "flatten") {
      CHECK(meta.at("start_dim").number == 1);
      CHECK(meta.at("end_dim").number == 2);
    } else {
      CHECK(meta.at("dim").number == 1);
      CHECK(meta.at("start").number == 2);
      CHECK(meta.at("length").number == 3);
    }
    dumps.push_back(dump);
  }
  // A wrong element of a moved gradient must be caught.
  replay_dumps_and_corrupt(dumps, dumps[1], "grad_input");
}
