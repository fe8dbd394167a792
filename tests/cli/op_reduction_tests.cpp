// dtensor-op's reductions (sum, mean, amax, amin, var) and softmax /
// log_softmax: the parser on its own (defaults resolved, refusals naming the
// option), --check runs under dtensor-run on 1, 2 and 4 ranks with the
// reduced dim sharded and uneven, refusals on every rank, and dumps replayed
// by tools/check_op_dump.py against PyTorch when it is importable.
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
using Dims = std::vector<std::int64_t>;

}  // namespace

// ---- the parser alone ----------------------------------------------------------

TEST_CASE("op cli reductions: options resolved, defaults filled in", "[cli][op][reduce]") {
  auto o = parse_options({"sum", "--input", "2,4,3,5"});
  CHECK(o.op == OpKind::Sum);
  CHECK(o.dims == Dims{0, 1, 2, 3});  // default: every dim
  CHECK_FALSE(o.keepdim);
  CHECK(o.output_shape().empty());
  o = parse_options({"mean", "--input", "2,4,3,5", "--dims", "-1,1", "--keepdim"});
  CHECK(o.dims == Dims{1, 3});
  CHECK(o.keepdim);
  CHECK(o.output_shape() == dtensor::Shape{2, 1, 3, 1});
  o = parse_options({"amax", "--input", "4,6", "--dims", "0"});
  CHECK(o.output_shape() == dtensor::Shape{6});
  o = parse_options({"amin", "--input", "4,6", "--dims", "[]"});
  CHECK(o.dims == Dims{0, 1});
  o = parse_options({"var", "--input", "4,6", "--dims", "1"});
  CHECK(o.correction == 1.0);
  o = parse_options({"var", "--input", "4,6", "--correction", "0.5"});
  CHECK(o.correction == 0.5);
  o = parse_options({"softmax", "--input", "2,4,3", "--dim", "-1"});
  CHECK(o.dim == 2);
  o = parse_options({"log_softmax", "--input", "2,4,3", "--dim", "1"});
  CHECK(o.op == OpKind::LogSoftmax);
  CHECK(o.dim == 1);
  CHECK(o.output_shape() == dtensor::Shape{2, 4, 3});
}

TEST_CASE("op cli reductions: invalid arguments name the option", "[cli][op][reduce]") {
  rejects({"sum", "--input", "4,6", "--dims", "2"}, "--dims");
  rejects({"mean", "--input", "4,6", "--dims", "-3"}, "--dims");
  rejects({"amax", "--input", "4,6", "--dims", "0,-2"}, "--dims");
  rejects({"amin", "--input", "4,6", "--dims", "x"}, "--dims");
  rejects({"var", "--input", "4,6", "--correction", "-1"}, "--correction");
  rejects({"var", "--input", "4,6", "--correction", "nan"}, "--correction");
  rejects({"sum", "--correction", "1"}, "--correction");
  rejects({"softmax", "--input", "4,6"}, "--dim");
  rejects({"log_softmax", "--input", "4,6", "--dim", "2"}, "--dim");
  rejects({"softmax", "--input", "4,6", "--dim", "-3"}, "--dim");
  rejects({"softmax", "--input", "4,6", "--dim", "1", "--dims", "1"}, "--dims");
  rejects({"sum", "--dim", "1"}, "--dim");
  rejects({"add", "--keepdim"}, "--keepdim");
}

// ---- the binary under the launcher ----------------------------------------------

TEST_CASE("op cli run reductions: a bad option fails on every rank, naming it",
          "[cli][op][run][reduce]") {
  for (const auto& [args, option] : std::vector<std::pair<Args, std::string>>{
           {{"sum", "--input", "4,6", "--dims", "5"}, "--dims"},
           {{"var", "--input", "4,6", "--correction", "-2"}, "--correction"},
           {{"softmax", "--input", "4,6"}, "--dim"}}) {
    INFO("args: " << Catch::Detail::stringify(args));
    const Ran r = run_op(2, args);
    INFO("output:\n" << r.output);
    CHECK(r.code != 0);
    CHECK(r.output.find("[0] dtensor-op: " + option) != std::string::npos);
    CHECK(r.output.find("[1] dtensor-op: " + option) != std::string::npos);
  }
  const Ran help = run_program({kOp, "--help"});
  CHECK(help.code == 0);
  for (const char* op :
       {"amax", "var", "log_softmax", "--dims", "--keepdim", "--correction", "--dim "})
    CHECK(help.output.find(op) != std::string::npos);
}

TEST_CASE("op cli run reductions: every operator passes --check on 1, 2 and 4 ranks",
          "[cli][op][run][reduce]") {
  const std::vector<std::string> x{"output", "grad_input"};
  check_passes(1, {"sum", "--input", "3,5,7"}, x);
  check_passes(2, {"sum", "--input", "3,5,7", "--dims", "1", "--placements", "S1"}, x);
  check_passes(4,
               {"mean", "--input", "3,5,7", "--dims", "0,2", "--keepdim", "--mesh", "2x2",
                "--placements", "S0,S1"},
               x);
  check_passes(2, {"mean", "--input", "4,6", "--placements", "P", "--dims", "0"}, x);
  check_passes(4, {"amax", "--input", "5,7", "--dims", "-1", "--placements", "S1"}, x);
  check_passes(2, {"amin", "--input", "5,7", "--dims", "0", "--keepdim", "--placements", "S1"}, x);
  check_passes(2, {"var", "--input", "5,7", "--dims", "1", "--placements", "S1", "--dtype", "f64"},
               x);
  check_passes(4,
               {"var", "--input", "3,5,7", "--dims", "0,2", "--correction", "0", "--mesh", "2x2",
                "--placements", "S0,S2"},
               x);
  check_passes(2, {"var", "--input", "4,6", "--correction", "2.5", "--dtype", "bf16"}, x);
  check_passes(1, {"softmax", "--input", "3,5", "--dim", "1"}, x);
  check_passes(2, {"softmax", "--input", "3,5,7", "--dim", "2", "--placements", "S2"}, x);
  check_passes(
      4,
      {"log_softmax", "--input", "3,5,7", "--dim", "-2", "--mesh", "2x2", "--placements", "S1,S2"},
      x);
  check_passes(2, {"log_softmax", "--input", "3,5", "--dim", "0", "--placements", "S1"}, x);
}

TEST_CASE("op cli run reductions: dumps hold their options, PyTorch agrees",
          "[cli][op][run][reduce]") {
  dtensor::launch::TempDir dir("dtensor-op-reduction-dump");
  const std::vector<Args> cases{
      {"sum", "--input", "3,5,7", "--dims", "-1,0", "--placements", "S2"},
      {"mean", "--input", "3,5,7", "--keepdim", "--placements", "S1"},
      {"amax", "--input", "5,7", "--dims", "1", "--placements", "S1", "--dtype", "f64"},
      {"amin", "--input", "5,7", "--dims", "0", "--keepdim"},
      {"var", "--input", "5,7", "--dims", "1", "--correction", "0", "--placements", "S1"},
      {"var", "--input", "5,7", "--dims", "0", "--correction", "1.5", "--placements", "S0"},
      {"softmax", "--input", "3,5", "--dim", "-1", "--placements", "S1"},
      {"log_softmax", "--input", "3,5", "--dim", "0", "--placements", "S0"},
  };
  std::vector<std::string> dumps;
  for (std::size_t k = 0; k < cases.size(); ++k) {
    const Args& c = cases[k];
    const std::string dump = dir.path() + "/" + c[0] + std::to_string(k);
    Args args = c;
    for (const char* a : {"--backward", "--dump"})
      args.push_back(a);
    args.push_back(dump);
    const Ran r = run_op(2, args);
    INFO("args: " << Catch::Detail::stringify(args) << "\noutput:\n" << r.output);
    REQUIRE(r.code == 0);
    const json::Value meta = json::parse(read_file(dump + "/meta.json"));
    const std::string& op = c[0];
    CHECK(meta.at("op").string == op);
    for (const char* f : {"input", "output", "grad_output", "grad_input"})
      CHECK(meta.at("files").has(f));
    const bool softmax = op == "softmax" || op == "log_softmax";
    CHECK(meta.has("dims") == !softmax);
    CHECK(meta.has("keepdim") == !softmax);
    CHECK(meta.has("correction") == (op == "var"));
    CHECK(meta.has("dim") == softmax);
    if (op == "sum") {
      REQUIRE(meta.at("dims").array.size() == 2);
      CHECK(meta.at("dims").array[0].number == 0);  // resolved and sorted
      CHECK(meta.at("dims").array[1].number == 2);
      CHECK_FALSE(meta.at("keepdim").boolean);
    } else if (op == "mean") {
      CHECK(meta.at("dims").array.size() == 3);  // default: all
      CHECK(meta.at("keepdim").boolean);
    } else if (op == "var" && k == 5) {
      CHECK(meta.at("correction").number == 1.5);
    } else if (op == "softmax") {
      CHECK(meta.at("dim").number == 1);  // resolved
    }
    dumps.push_back(dump);
  }
  // A wrong gradient must be caught.
  replay_dumps_and_corrupt(dumps, dumps[4], "grad_input");
}
