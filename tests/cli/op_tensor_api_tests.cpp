// dtensor-op's tensor API operators (the broadcasting binary operators and
// the unary functions): the parser on its own, --check runs under dtensor-run
// on 1, 2 and 4 ranks, refusals naming the option on every rank, and dumps
// replayed by tools/check_op_dump.py against PyTorch when it is importable.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include "dtensor/ops/kernels/elementwise_math.h"
#include "tests/cli/mini_json.h"
#include "tests/cli/op_cli_run.h"
#include "tools/dtensor-op/options.h"
#include "tools/launch/process_set.h"

namespace {

using namespace dtensor::testing::op_cli_run;
using namespace std::chrono_literals;

}  // namespace

// ---- the parser alone ----------------------------------------------------------

TEST_CASE("op cli tensor API: options resolved, defaults filled in", "[cli][op][tensor]") {
  auto o = parse_options({"add", "--input", "2,4,3,5"});
  CHECK(o.op == OpKind::Add);
  CHECK(o.other_shape == dtensor::Shape{2, 4, 3, 5});  // default: the input's
  o = parse_options({"mul", "--input", "2,4,3,5", "--other-shape", "1,4,1,1"});
  CHECK(o.other_shape == dtensor::Shape{1, 4, 1, 1});
  o = parse_options({"div", "--other-shape", ""});
  CHECK(o.other_shape.empty());
  o = parse_options({"maximum", "--other-shape", "[]"});
  CHECK(o.other_shape.empty());
  o = parse_options({"minimum", "--input", "2,4,3,5", "--other-shape", "[3,5]"});
  CHECK(o.other_shape == dtensor::Shape{3, 5});
  o = parse_options({"clamp", "--max", "0.5"});
  CHECK_FALSE(o.min.has_value());
  CHECK(o.max == 0.5);
  o = parse_options({"pow", "--exponent", "-1.5"});
  CHECK(o.exponent == -1.5);
  CHECK(o.positive_input());
  CHECK_FALSE(parse_options({"exp"}).positive_input());
}

TEST_CASE("op cli tensor API: invalid arguments name the option", "[cli][op][tensor]") {
  rejects({"add", "--input", "2,4,3,5", "--other-shape", "4,1,3"}, "--other-shape");
  rejects({"sub", "--input", "2,4,3,5", "--other-shape", "3,2,4,3,5"}, "--other-shape");
  rejects({"mul", "--other-shape", "0"}, "--other-shape");
  rejects({"div", "--other-shape", "a,b"}, "--other-shape");
  rejects({"clamp"}, "--min");
  rejects({"clamp", "--min", "x"}, "--min");
  rejects({"clamp", "--max", "inf"}, "--max");
  rejects({"pow"}, "--exponent");
  rejects({"pow", "--exponent", "nan"}, "--exponent");
  rejects({"exp", "--min", "0"}, "--min");
  rejects({"neg", "--other-shape", "1"}, "--other-shape");
  rejects({"add", "--exponent", "2"}, "--exponent");
}

// ---- the binary under the launcher ----------------------------------------------

TEST_CASE("op cli run tensor API: a bad option fails on every rank, naming it",
          "[cli][op][run][tensor]") {
  for (const auto& [args, option] :
       std::vector<std::pair<Args, std::string>>{{{"add", "--other-shape", "3,1"}, "--other-shape"},
                                                 {{"clamp"}, "--min"},
                                                 {{"pow"}, "--exponent"}}) {
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
       {"add", "maximum", "rsqrt", "clamp", "pow", "--other-shape", "--min", "--max", "--exponent"})
    CHECK(help.output.find(op) != std::string::npos);
}

TEST_CASE("op cli run tensor API: every operator passes --check on 1, 2 and 4 ranks",
          "[cli][op][run][tensor]") {
  const std::vector<std::string> x{"output", "grad_input"};
  const std::vector<std::string> xo{"output", "grad_input", "grad_other"};
  check_passes(1, {"add", "--input", "2,4,3,5", "--other-shape", "1,4,1,1"}, xo);
  check_passes(2, {"sub", "--input", "2,4,3,5", "--other-shape", "5", "--placements", "S3"}, xo);
  check_passes(
      4,
      {"mul", "--input", "2,4,3,5", "--other-shape", "", "--mesh", "2x2", "--placements", "S1,S3"},
      xo);
  check_passes(2, {"div", "--input", "4,6", "--placements", "S0", "--dtype", "f64"}, xo);
  check_passes(4, {"maximum", "--input", "4,6", "--other-shape", "4,1", "--placements", "S0"}, xo);
  check_passes(2, {"minimum", "--input", "4,6", "--placements", "P"}, xo);
  // Every row of the plain list: a new row is run here with no edit to this test.
#define DTENSOR_PLAIN_UNARY_NAME(NAME, FUNCTION, OP, POSITIVE, LINEAR) #OP,
  for (const char* op : {DTENSOR_PLAIN_UNARY_FUNCTIONS(DTENSOR_PLAIN_UNARY_NAME)})
    check_passes(2, {op, "--input", "2,3,7", "--placements", "S2"}, x);
#undef DTENSOR_PLAIN_UNARY_NAME
  check_passes(4, {"clamp", "--input", "2,3,7", "--min", "-0.25", "--max", "0.5"}, x);
  check_passes(2, {"clamp", "--input", "2,3,7", "--max", "0", "--dtype", "bf16"}, x);
  check_passes(2, {"pow", "--input", "2,3,7", "--exponent", "2.5", "--placements", "S1"}, x);
}

TEST_CASE("op cli run tensor API: dumps hold their operands and options, PyTorch agrees",
          "[cli][op][run][tensor]") {
  dtensor::launch::TempDir dir("dtensor-op-tensor-dump");
  const std::vector<Args> cases{
      {"add", "--input", "2,4,3,5", "--other-shape", "1,4,1,1", "--placements", "S1"},
      {"div", "--input", "2,4,3,5", "--other-shape", "5", "--placements", "S3"},
      {"maximum", "--input", "4,6", "--other-shape", "", "--placements", "S0"},
      {"clamp", "--input", "4,6", "--min", "-0.2"},
      {"pow", "--input", "4,6", "--exponent", "3", "--placements", "S1"},
      {"rsqrt", "--input", "4,6", "--dtype", "f64"},
  };
  std::vector<std::string> dumps;
  for (const auto& c : cases) {
    const std::string dump = dir.path() + "/" + c[0];
    const json::Value meta = dumped_meta(c, {"--backward"}, dump);
    const std::string& op = c[0];
    CHECK(meta.at("op").string == op);
    const bool binary = op == "add" || op == "div" || op == "maximum";
    for (const char* f : {"input", "output", "grad_output", "grad_input"})
      CHECK(meta.at("files").has(f));
    CHECK(meta.at("files").has("other") == binary);
    CHECK(meta.at("files").has("grad_other") == binary);
    if (op == "add") {
      REQUIRE(meta.at("other_shape").array.size() == 4);
      CHECK(meta.at("other_shape").array[1].number == 4);
    } else if (op == "maximum") {
      CHECK(meta.at("other_shape").array.empty());
      CHECK(read_file(dump + "/grad_other.npy").find("'shape': ()") != std::string::npos);
    } else if (op == "clamp") {
      CHECK(meta.at("min").number == -0.2);
      CHECK(meta.at("max").is_null());
    } else if (op == "pow") {
      CHECK(meta.at("exponent").number == 3);
    }
    dumps.push_back(dump);
  }
  // A wrong reduced gradient of the broadcast operand must be caught.
  replay_dumps_and_corrupt(dumps, dumps[0], "grad_other");
}
