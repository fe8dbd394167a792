// dtensor-op's pointwise losses (l1_loss, smooth_l1_loss, huber_loss,
// binary_cross_entropy_with_logits), dropout and linear: the parser on its
// own, --check runs under dtensor-run on 1, 2 and 4 ranks, refusals naming
// the option on every rank, dumps replayed by tools/check_op_dump.py against
// PyTorch when it is importable (and caught when corrupted), and dropout's
// output.npy the same for one --seed on every rank count and placement.
#include <catch2/catch.hpp>

#include <fstream>
#include <iterator>
#include <utility>

#include "tests/cli/mini_json.h"
#include "tests/cli/op_cli_run.h"
#include "tools/dtensor-op/options.h"
#include "tools/launch/process_set.h"

namespace {

using namespace dtensor::testing::op_cli_run;
using namespace std::chrono_literals;

}  // namespace

// ---- the parser alone ----------------------------------------------------------

TEST_CASE("op cli pointwise losses: options resolved, defaults filled in", "[cli][op][loss]") {
  auto o = parse_options({"l1_loss", "--input", "4,6"});
  CHECK(o.op == OpKind::L1Loss);
  CHECK(o.reduction == dtensor::LossReduction::Mean);
  CHECK(o.is_loss());
  CHECK(o.output_shape().empty());
  o = parse_options({"smooth_l1_loss"});
  CHECK(o.op == OpKind::SmoothL1Loss);
  CHECK(o.beta == 1.0);
  o = parse_options({"smooth_l1_loss", "--beta", "0", "--reduction", "sum"});
  CHECK(o.beta == 0.0);
  CHECK(o.reduction == dtensor::LossReduction::Sum);
  o = parse_options({"huber_loss"});
  CHECK(o.delta == 1.0);
  o = parse_options({"huber_loss", "--delta", "0.25"});
  CHECK(o.delta == 0.25);
  o = parse_options({"binary_cross_entropy_with_logits", "--reduction", "sum"});
  CHECK(o.op == OpKind::BinaryCrossEntropyWithLogits);
  CHECK_FALSE(o.has_grad_output());
}

TEST_CASE("op cli pointwise losses: invalid arguments name the option", "[cli][op][loss]") {
  rejects({"smooth_l1_loss", "--beta", "-0.1"}, "--beta");
  rejects({"smooth_l1_loss", "--beta", "x"}, "--beta");
  rejects({"huber_loss", "--delta", "0"}, "--delta");
  rejects({"huber_loss", "--delta", "-1"}, "--delta");
  rejects({"huber_loss", "--delta", "nan"}, "--delta");
  rejects({"l1_loss", "--reduction", "none"}, "--reduction");
  rejects({"l1_loss", "--beta", "1"}, "--beta");
  rejects({"huber_loss", "--beta", "1"}, "--beta");
  rejects({"smooth_l1_loss", "--delta", "1"}, "--delta");
  rejects({"mse_loss", "--delta", "1"}, "--delta");
  rejects({"binary_cross_entropy_with_logits", "--input", "5"}, "--input");
}

// ---- the binary under the launcher ----------------------------------------------

TEST_CASE("op cli run pointwise losses: a bad option fails on every rank, naming it",
          "[cli][op][run][loss]") {
  for (const auto& [args, option] : std::vector<std::pair<Args, std::string>>{
           {{"smooth_l1_loss", "--beta", "-1"}, "--beta"},
           {{"huber_loss", "--delta", "0"}, "--delta"},
           {{"binary_cross_entropy_with_logits", "--reduction", "max"}, "--reduction"}}) {
    refused_on_every_rank(args, option);
  }
  const Ran help = run_program({kOp, "--help"});
  CHECK(help.code == 0);
  for (const char* s : {"l1_loss", "smooth_l1_loss", "huber_loss",
                        "binary_cross_entropy_with_logits", "--beta", "--delta"})
    CHECK(help.output.find(s) != std::string::npos);
}

TEST_CASE("op cli run pointwise losses: --check on 1, 2 and 4 ranks, uneven shards",
          "[cli][op][run][loss]") {
  const std::vector<std::string> x{"output", "grad_input"};
  check_passes(1, {"l1_loss", "--input", "3,5,7"}, x);
  check_passes(2, {"l1_loss", "--input", "3,5,7", "--placements", "S2", "--reduction", "sum"}, x);
  check_passes(4,
               {"smooth_l1_loss", "--input", "3,5,7", "--beta", "0.3", "--mesh", "2x2",
                "--placements", "S0,S2"},
               x);
  check_passes(
      2,
      {"smooth_l1_loss", "--input", "5,3", "--beta", "0", "--placements", "S0", "--dtype", "f64"},
      x);
  check_passes(2, {"huber_loss", "--input", "2,4,5", "--delta", "0.2", "--placements", "P"}, x);
  check_passes(4, {"huber_loss", "--input", "2,4,5", "--placements", "S1", "--dtype", "bf16"}, x);
  check_passes(1, {"binary_cross_entropy_with_logits", "--input", "6,3"}, x);
  check_passes(4,
               {"binary_cross_entropy_with_logits", "--input", "3,5,3", "--mesh", "2x2",
                "--placements", "S1,R", "--reduction", "sum"},
               x);
}

TEST_CASE("op cli run pointwise losses: dumps hold their options, PyTorch agrees",
          "[cli][op][run][loss]") {
  dtensor::launch::TempDir dir("dtensor-op-loss-dump");
  const std::vector<Args> cases{
      {"l1_loss", "--input", "3,5,7", "--placements", "S2"},
      {"smooth_l1_loss", "--input", "3,5,7", "--beta", "0.25", "--reduction", "sum"},
      {"huber_loss", "--input", "5,3", "--delta", "0.3", "--placements", "S0", "--dtype", "f64"},
      {"binary_cross_entropy_with_logits", "--input", "3,5", "--placements", "S1"},
  };
  std::vector<std::string> dumps;
  for (const auto& c : cases) {
    const std::string dump = dir.path() + "/" + c[0];
    const json::Value meta = dumped_meta(c, {"--backward"}, dump);
    const std::string& op = c[0];
    CHECK(meta.at("op").string == op);
    for (const char* f : {"input", "target", "output", "grad_input"})
      CHECK(meta.at("files").has(f));
    CHECK_FALSE(meta.at("files").has("grad_output"));
    CHECK(meta.at("reduction").string == (op == "smooth_l1_loss" ? "sum" : "mean"));
    CHECK(meta.has("beta") == (op == "smooth_l1_loss"));
    CHECK(meta.has("delta") == (op == "huber_loss"));
    if (op == "smooth_l1_loss") CHECK(meta.at("beta").number == 0.25);
    if (op == "huber_loss") CHECK(meta.at("delta").number == 0.3);
    CHECK(read_file(dump + "/output.npy").find("'shape': ()") != std::string::npos);
    dumps.push_back(dump);
  }
  // A wrong gradient must be caught.
  replay_dumps_and_corrupt(dumps, dumps[1], "grad_input");
}

// ---- dropout ----------------------------------------------------------------------

TEST_CASE("op cli dropout: --p resolved and refused naming it", "[cli][op][dropout]") {
  auto o = parse_options({"dropout", "--input", "4,6"});
  CHECK(o.op == OpKind::Dropout);
  CHECK(o.p == 0.5);
  CHECK(o.has_grad_output());
  CHECK(o.output_shape() == dtensor::Shape{4, 6});
  CHECK(parse_options({"dropout", "--p", "0"}).p == 0.0);
  CHECK(parse_options({"dropout", "--p", "1"}).p == 1.0);
  rejects({"dropout", "--p", "1.5"}, "--p");
  rejects({"dropout", "--p", "-0.1"}, "--p");
  rejects({"dropout", "--p", "half"}, "--p");
  rejects({"l1_loss", "--p", "0.5"}, "--p");
  rejects({"dropout", "--reduction", "sum"}, "--reduction");
}

TEST_CASE("op cli run dropout: --check on 1, 2 and 4 ranks, a bad --p fails on every rank",
          "[cli][op][run][dropout]") {
  const std::vector<std::string> x{"output", "grad_input"};
  check_passes(1, {"dropout", "--input", "3,5,7", "--p", "0.3"}, x);
  check_passes(2, {"dropout", "--input", "3,5,7", "--placements", "S2", "--dtype", "f64"}, x);
  check_passes(
      4, {"dropout", "--input", "3,5,7", "--mesh", "2x2", "--placements", "S0,S1", "--p", "0.8"},
      x);
  check_passes(2, {"dropout", "--input", "3,5", "--placements", "P", "--p", "1"}, x);
  check_passes(4, {"dropout", "--input", "5,3", "--placements", "S0", "--dtype", "bf16"}, x);
  refused_on_every_rank({"dropout", "--p", "2"}, "--p");
}

TEST_CASE("op cli run dropout: one --seed, the same output.npy on 1, 2 and 4 ranks",
          "[cli][op][run][dropout]") {
  dtensor::launch::TempDir dir("dtensor-op-dropout-dump");
  struct Layout {
    int ranks;
    Args args;
  };
  const std::vector<Layout> layouts{
      {1, {}},
      {2, {"--placements", "S1"}},
      {2, {"--placements", "S2"}},
      {4, {"--placements", "S0"}},
      {4, {"--mesh", "2x2", "--placements", "S2,S1"}},
      {4, {"--mesh", "2x2", "--placements", "R,P"}},
  };
  std::vector<std::string> dumps;
  for (std::size_t k = 0; k < layouts.size(); ++k) {
    const std::string dump = dir.path() + "/d" + std::to_string(k);
    Args args{"dropout", "--input", "3,5,7",      "--p",    "0.4",
              "--seed",  "17",      "--backward", "--dump", dump};
    args.insert(args.end(), layouts[k].args.begin(), layouts[k].args.end());
    const Ran r = run_op(layouts[k].ranks, args);
    INFO("args: " << Catch::Detail::stringify(args) << "\noutput:\n" << r.output);
    REQUIRE(r.code == 0);
    const json::Value meta = json::parse(read_file(dump + "/meta.json"));
    CHECK(meta.at("op").string == "dropout");
    CHECK(meta.at("p").number == 0.4);
    for (const char* f : {"input", "output", "grad_output", "grad_input"})
      CHECK(meta.at("files").has(f));
    dumps.push_back(dump);
  }
  const std::string first = read_file(dumps[0] + "/output.npy");
  const std::string first_grad = read_file(dumps[0] + "/grad_input.npy");
  for (std::size_t k = 1; k < dumps.size(); ++k) {
    INFO("layout " << k);
    CHECK(read_file(dumps[k] + "/output.npy") == first);
    CHECK(read_file(dumps[k] + "/grad_input.npy") == first_grad);
  }
  // Another seed, another mask.
  const std::string other = dir.path() + "/other";
  REQUIRE(run_op(1, {"dropout", "--input", "3,5,7", "--p", "0.4", "--seed", "18", "--dump", other})
              .code == 0);
  CHECK(read_file(other + "/output.npy") != first);
  if (!replay_dumps({dumps[0], dumps[4]})) return;
  // A gradient that ignores the mask must be caught.
  {
    std::ifstream in(dumps[1] + "/grad_output.npy", std::ios::binary);
    const std::string gy((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream out(dumps[1] + "/grad_input.npy", std::ios::binary | std::ios::trunc);
    out << gy;
  }
  replay_refuses(dumps[1]);
}

// ---- linear -----------------------------------------------------------------------

TEST_CASE("op cli linear: --out-features and --no-bias resolved and refused naming them",
          "[cli][op][linear]") {
  auto o = parse_options({"linear", "--input", "4,3,6"});
  CHECK(o.op == OpKind::Linear);
  CHECK(o.out_features == 6);  // default: in_features
  CHECK(o.bias);
  CHECK(o.weight_shape() == dtensor::Shape{6, 6});
  o = parse_options({"linear", "--input", "4,3,6", "--out-features", "5", "--no-bias"});
  CHECK(o.out_features == 5);
  CHECK_FALSE(o.bias);
  CHECK(o.weight_shape() == dtensor::Shape{5, 6});
  CHECK(o.bias_shape().empty());
  CHECK(o.output_shape() == dtensor::Shape{4, 3, 5});
  rejects({"linear", "--out-features", "0"}, "--out-features");
  rejects({"linear", "--out-features", "x"}, "--out-features");
  rejects({"conv", "--out-features", "3"}, "--out-features");
  rejects({"linear", "--p", "0.5"}, "--p");
}

TEST_CASE("op cli run linear: --check on 1, 2 and 4 ranks, rows and features sharded",
          "[cli][op][run][linear]") {
  const std::vector<std::string> xwb{"output", "grad_input", "grad_weight", "grad_bias"};
  const std::vector<std::string> xw{"output", "grad_input", "grad_weight"};
  check_passes(1, {"linear", "--input", "3,5,7", "--out-features", "4"}, xwb);
  check_passes(2, {"linear", "--input", "3,5,7", "--out-features", "4", "--placements", "S0"}, xwb);
  check_passes(2, {"linear", "--input", "3,5,7", "--placements", "S2", "--no-bias"}, xw);
  check_passes(4,
               {"linear", "--input", "3,5,7", "--mesh", "2x2", "--placements", "S1,S2",
                "--out-features", "3", "--dtype", "f64"},
               xwb);
  check_passes(4, {"linear", "--input", "5,7", "--placements", "S0", "--dtype", "bf16"}, xwb);
  check_passes(2, {"linear", "--input", "5,7", "--placements", "P", "--out-features", "2"}, xwb);
}

TEST_CASE("op cli run linear: dumps hold weight, bias and options, PyTorch agrees",
          "[cli][op][run][linear]") {
  dtensor::launch::TempDir dir("dtensor-op-linear-dump");
  const std::vector<std::pair<int, Args>> cases{
      {2, {"linear", "--input", "3,5,7", "--out-features", "4", "--placements", "S1"}},
      {4, {"linear", "--input", "3,5,7", "--mesh", "2x2", "--placements", "S0,S2", "--no-bias"}},
  };
  std::vector<std::string> dumps;
  for (std::size_t k = 0; k < cases.size(); ++k) {
    const std::string dump = dir.path() + "/l" + std::to_string(k);
    Args args = cases[k].second;
    for (const char* a : {"--backward", "--dump"})
      args.push_back(a);
    args.push_back(dump);
    const Ran r = run_op(cases[k].first, args);
    INFO("args: " << Catch::Detail::stringify(args) << "\noutput:\n" << r.output);
    REQUIRE(r.code == 0);
    const json::Value meta = json::parse(read_file(dump + "/meta.json"));
    const bool bias = k == 0;
    CHECK(meta.at("op").string == "linear");
    CHECK(meta.at("out_features").number == (bias ? 4 : 7));
    CHECK(meta.at("bias").boolean == bias);
    for (const char* f : {"input", "weight", "output", "grad_output", "grad_input", "grad_weight"})
      CHECK(meta.at("files").has(f));
    CHECK(meta.at("files").has("bias") == bias);
    CHECK(meta.at("files").has("grad_bias") == bias);
    dumps.push_back(dump);
  }
  // A wrong element must be caught.
  replay_dumps_and_corrupt(dumps, dumps[0], "grad_weight");
}
