// dtensor-op: the parser on its own (no processes), and end-to-end runs of
// the real binary under the real launcher (dtensor-run), checked through its
// exit status, its --json line, and the files of --dump (and, when PyTorch is
// importable, tools/check_op_dump.py).
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "tests/cli/mini_json.h"
#include "tests/cli/op_cli_run.h"
#include "tools/dtensor-op/op_table.h"
#include "tools/dtensor-op/options.h"
#include "tools/launch/process_set.h"

namespace {

using namespace dtensor::testing::op_cli_run;
using namespace std::chrono_literals;

}  // namespace

// ---- the parser alone ----------------------------------------------------------

TEST_CASE("op cli: the op table has one complete row per operator, found by its name",
          "[cli][op]") {
  using namespace dtensor::op_cli;
  const auto table = op_table();
  // The built-in rows in OpKind's order, then those registered from their
  // own files (lp_pool's), each with the next kind.
  REQUIRE(table.size() > static_cast<std::size_t>(OpKind::Linear) + 1);
  CHECK(find_op("lp_pool")->kind > OpKind::Linear);
  std::set<std::string_view> names;
  for (std::size_t i = 0; i < table.size(); ++i) {
    const OpEntry& e = table[i];
    CHECK(static_cast<std::size_t>(e.kind) == i);
    CHECK(names.insert(e.name).second);  // no name twice
    REQUIRE(find_op(e.name) == &e);
    CHECK(op_name(e.kind) == e.name);
    CHECK((e.forward && e.backward && e.reference && e.params_line));
    CHECK(std::set<std::string_view>(e.options.begin(), e.options.end()).size() ==
          e.options.size());
  }
  // Every option some row lists is refused, naming it, by each op whose row
  // does not list it: the rows are what the parser goes by.
  const std::set<std::string_view> flags{"--ceil-mode",     "--count-include-pad", "--no-bias",
                                         "--align-corners", "--no-affine",         "--eval",
                                         "--keepdim"};
  std::set<std::string_view> options;
  for (const OpEntry& e : table)
    options.insert(e.options.begin(), e.options.end());
  for (const OpEntry& e : table)
    for (std::string_view option : options) {
      if (std::find(e.options.begin(), e.options.end(), option) != e.options.end()) continue;
      std::vector<std::string> args{std::string(e.name), std::string(option)};
      if (!flags.count(option)) args.emplace_back("1");
      CHECK_THROWS_WITH(
          parse_options(args),
          Catch::StartsWith(std::string(option) + ": not an option of " + std::string(e.name)));
    }
  CHECK(find_op("no_such_op") == nullptr);
}

TEST_CASE("op cli: defaults are PyTorch's, resolved per spatial dim", "[cli][op]") {
  const auto o = parse_options({"max_pool", "--kernel", "3,2", "--padding", "1"});
  CHECK(o.op == OpKind::MaxPool);
  CHECK(o.input == dtensor::Shape{2, 4, 16, 16});
  CHECK(o.kernel == std::vector<std::int64_t>{3, 2});
  CHECK(o.stride == std::vector<std::int64_t>{3, 2});  // a pool's stride is its kernel
  CHECK(o.dilation == std::vector<std::int64_t>{1, 1});
  CHECK(o.padding == dtensor::ConvParams::Padding{{1, 1}, {1, 1}});
  CHECK_FALSE(o.ceil_mode);
  CHECK(o.output_shape() == dtensor::Shape{2, 4, 6, 9});  // floor((16+2-3)/3)+1, (16+2-2)/2+1

  const auto a = parse_options({"avg_pool", "--kernel", "2"});
  CHECK_FALSE(a.count_include_pad);  // absent means False
  CHECK_FALSE(a.divisor_override);

  const auto t = parse_options({"conv_transpose", "--input", "1,6,5", "--groups", "3"});
  CHECK(t.out_channels == 6);  // default: the input channels
  CHECK(t.weight_shape() == dtensor::Shape{6, 2, 3});
  CHECK(t.output_shape() == dtensor::Shape{1, 6, 7});  // (5-1) + 2 + 1

  const auto p = parse_options({"pad", "--input", "1,1,4", "--padding-lr=-1:2"});
  CHECK(p.padding == dtensor::ConvParams::Padding{{-1, 2}});
  CHECK(p.output_shape() == dtensor::Shape{1, 1, 5});
  CHECK(p.mode == dtensor::PadMode::Constant);
}

TEST_CASE("op cli: invalid arguments name the option", "[cli][op]") {
  const auto rejects = [](const Args& args, const std::string& option) {
    INFO("args: " << Catch::Detail::stringify(args));
    try {
      parse_options(args);
      FAIL("accepted");
    } catch (const UsageError& e) {
      CHECK_THAT(e.what(), Catch::Contains(option));
    }
  };
  rejects({"max_pool", "--kernel", "3", "--padding", "2"}, "--padding");  // > kernel / 2
  rejects({"max_pool", "--kernel", "4", "--padding-lr", "0:3"}, "--padding-lr");
  rejects({"max_pool", "--input", "1,1,2", "--kernel", "3"}, "--input");  // empty output
  rejects({"pad", "--input", "1,1,3", "--mode", "reflect", "--padding-lr", "3:0"},
          "--padding-lr");  // reflect padding >= L
  rejects({"pad", "--input", "1,1,3", "--padding-lr", "-2:-1"}, "--padding-lr");  // crops all
  rejects({"pad", "--input", "1,1,3", "--mode", "replicate", "--padding", "-1"}, "--padding");
  rejects({"pad", "--input", "1,1,3"}, "--padding-lr");  // pad needs its padding
  rejects({"pad", "--mode", "reflect", "--padding", "1", "--value", "2"}, "--value");
  rejects({"adaptive_avg_pool"}, "--output-size");
  rejects({"adaptive_max_pool", "--output-size", "0"}, "--output-size");
  rejects({"conv", "--ceil-mode"}, "--ceil-mode");  // not an option of conv
  rejects({"conv", "--output-padding", "1"}, "--output-padding");
  rejects({"conv_transpose", "--stride", "2", "--output-padding", "2"}, "--output-padding");
  rejects({"conv_transpose", "--padding-mode", "reflect"}, "--padding-mode");
  rejects({"conv_transpose", "--padding-lr", "1:0"}, "--padding-lr");
  rejects({"conv", "--input", "1,2,3", "--padding-mode", "reflect", "--padding", "3"}, "--padding");
  rejects({"conv", "--groups", "3"}, "--groups");
  rejects({"avg_pool", "--divisor-override", "0"}, "--divisor-override");
  rejects({"avg_pool", "--dilation", "2"}, "--dilation");
  rejects({"max_pool", "--stride", "0"}, "--stride");
  rejects({"max_pool", "--kernel", "2,2,2"}, "--kernel");  // 3 values for 2 dims
  rejects({"maxpool"}, "OP");
  rejects({}, "OP");
  rejects({"max_pool", "--bogus"}, "--bogus");
  rejects({"max_pool", "--iters", "3"}, "--iters");  // only with --bench
}

TEST_CASE("op cli: the U-Net operators' defaults are PyTorch's", "[cli][op][nn]") {
  const auto u = parse_options({"upsample", "--input", "1,2,5,7", "--scale", "2"});
  CHECK(u.op == OpKind::Upsample);
  CHECK(u.upsample_mode == dtensor::UpsampleMode::Nearest);
  CHECK_FALSE(u.align_corners);
  CHECK(u.scale == std::vector<double>{2.0, 2.0});
  CHECK(u.size.empty());
  CHECK(u.output_shape() == dtensor::Shape{1, 2, 10, 14});
  const auto ul = parse_options(
      {"upsample", "--input", "1,2,5", "--mode", "linear", "--size", "3", "--align-corners"});
  CHECK(ul.upsample_mode == dtensor::UpsampleMode::Linear);
  CHECK(ul.align_corners);
  CHECK(ul.output_shape() == dtensor::Shape{1, 2, 3});
  CHECK(parse_options({"upsample", "--input", "1,1,5", "--scale", "1.5"}).output_shape() ==
        dtensor::Shape{1, 1, 7});  // floor(7.5)

  const auto b = parse_options({"batch_norm"});
  CHECK(b.eps == 1e-5);
  CHECK(b.momentum == 0.1);
  CHECK(b.affine);
  CHECK(b.training);
  CHECK(b.has_weight());
  CHECK(b.weight_shape() == dtensor::Shape{4});
  CHECK(b.output_shape() == b.input);
  const auto be = parse_options({"batch_norm", "--input", "1,3", "--eval", "--no-affine"});
  CHECK_FALSE(be.training);
  CHECK_FALSE(be.affine);
  CHECK_FALSE(be.has_weight());
  CHECK(parse_options({"layer_norm", "--input", "2,3,5"}).weight_shape() == dtensor::Shape{3, 5});
  CHECK(parse_options({"group_norm", "--num-groups", "2"}).num_groups == 2);

  const auto c = parse_options({"cat", "--input", "2,3,4"});
  CHECK(c.inputs == 2);
  CHECK(c.channels == std::vector<std::int64_t>{3, 3});
  CHECK(c.cat_dim == 1);
  CHECK(c.output_shape() == dtensor::Shape{2, 6, 4});
  const auto c2 = parse_options({"cat", "--input", "2,3,4", "--channels", "1,2,5"});
  CHECK(c2.inputs == 3);
  CHECK(c2.input == dtensor::Shape{2, 1, 4});  // input 0's shape
  CHECK(c2.input_shape(2) == dtensor::Shape{2, 5, 4});
  CHECK(c2.output_shape() == dtensor::Shape{2, 8, 4});
  const auto c3 = parse_options({"cat", "--input", "2,3,4", "--inputs", "3", "--cat-dim=-1"});
  CHECK(c3.cat_dim == 2);
  CHECK(c3.output_shape() == dtensor::Shape{2, 3, 12});

  CHECK(parse_options({"leaky_relu"}).negative_slope == 0.01);
  CHECK(parse_options({"gelu"}).approximate == dtensor::GeluApproximate::None);
  CHECK(parse_options({"gelu", "--approximate", "tanh"}).approximate ==
        dtensor::GeluApproximate::Tanh);
  const auto l = parse_options({"cross_entropy", "--input", "4,10"});
  CHECK(l.reduction == dtensor::LossReduction::Mean);
  CHECK(l.output_shape().empty());  // 0-d
  CHECK_FALSE(l.has_grad_output());
  CHECK(parse_options({"mse_loss", "--reduction", "sum"}).reduction == dtensor::LossReduction::Sum);
}

TEST_CASE("op cli: the U-Net operators' invalid arguments name the option", "[cli][op][nn]") {
  rejects({"group_norm"}, "--num-groups");                       // required
  rejects({"group_norm", "--num-groups", "3"}, "--num-groups");  // does not divide C = 4
  rejects({"group_norm", "--num-groups", "0"}, "--num-groups");
  rejects({"group_norm", "--input", "1,2", "--num-groups", "2"}, "--input");  // PyTorch's check
  rejects({"upsample", "--size", "4", "--scale", "2"}, "--scale");
  rejects({"upsample"}, "--size");
  rejects({"upsample", "--scale", "0"}, "--scale");
  rejects({"upsample", "--input", "1,1,4", "--scale", "0.2"}, "--scale");  // empty output
  rejects({"upsample", "--size", "4,4,4"}, "--size");                      // 3 values for 2 dims
  rejects({"upsample", "--size", "4", "--align-corners"}, "--align-corners");  // nearest
  rejects({"upsample", "--size", "4", "--mode", "bicubic"}, "--mode");
  rejects({"upsample", "--input", "2,3", "--size", "4"}, "--input");
  rejects({"batch_norm", "--input", "1,3"}, "--input");  // one value per channel in training
  rejects({"batch_norm", "--eps=-1"}, "--eps");
  rejects({"batch_norm", "--momentum", "x"}, "--momentum");
  rejects({"instance_norm", "--input", "2,3"}, "--input");
  rejects({"instance_norm", "--input", "2,3,1,1"}, "--input");  // one spatial element
  rejects({"layer_norm", "--eval"}, "--eval");
  rejects({"group_norm", "--num-groups", "2", "--momentum", "0.2"}, "--momentum");
  rejects({"cat", "--inputs", "3", "--channels", "1,2"}, "--channels");
  rejects({"cat", "--cat-dim", "2", "--channels", "1,2"}, "--channels");
  rejects({"cat", "--cat-dim", "4"}, "--cat-dim");  // 4-d inputs
  rejects({"cat", "--inputs", "0"}, "--inputs");
  rejects({"gelu", "--approximate", "erf"}, "--approximate");
  rejects({"gelu", "--negative-slope", "0.1"}, "--negative-slope");
  rejects({"relu", "--no-affine"}, "--no-affine");
  rejects({"mse_loss", "--reduction", "none"}, "--reduction");
  rejects({"conv", "--reduction", "sum"}, "--reduction");
  rejects({"pad", "--padding", "1", "--mode", "nearest"}, "--mode");
}

// ---- the binary under the launcher ----------------------------------------------

TEST_CASE("op cli run: a bad argument fails on every rank at once", "[cli][op][run]") {
  const Ran r = run_op(2, {"max_pool", "--kernel", "3", "--padding", "2"});
  INFO("output:\n" << r.output);
  CHECK(r.code != 0);
  CHECK(r.seconds < 10);
  CHECK(r.output.find("dtensor-op: --padding") != std::string::npos);

  // Each rank on its own (no launcher to stop a peer): every one exits 2 by
  // itself, before any rendezvous, naming the option.
  dtensor::launch::TempDir store("dtensor-op-store");
  for (const Args& bad : {Args{"pad", "--input", "1,1,3", "--mode", "reflect", "--padding", "3"},
                          Args{"adaptive_avg_pool", "--output-size", "0"}}) {
    for (int rank = 0; rank < 2; ++rank) {
      Args argv{kOp};
      argv.insert(argv.end(), bad.begin(), bad.end());
      const Ran own = run_program(argv, 20s,
                                  {{"DTENSOR_RANK", std::to_string(rank)},
                                   {"DTENSOR_WORLD_SIZE", "2"},
                                   {"DTENSOR_LOCAL_RANK", std::to_string(rank)},
                                   {"DTENSOR_STORE", "file:" + store.path()}});
      INFO("rank " << rank << " output:\n" << own.output);
      CHECK(own.code == 2);
      CHECK(own.seconds < 5);
      CHECK(own.output.find("dtensor-op: " +
                            std::string(bad[0] == "pad" ? "--padding" : "--output-size")) !=
            std::string::npos);
    }
  }
  // --help exits 0 and lists every operator.
  const Ran help = run_program({kOp, "--help"});
  CHECK(help.code == 0);
  for (const char* op :
       {"conv_transpose", "max_pool", "avg_pool", "adaptive_avg_pool", "adaptive_max_pool", "pad"})
    CHECK(help.output.find(op) != std::string::npos);
}

TEST_CASE("op cli run: sizes beyond memory and a failed init are named, with the rank",
          "[cli][op][run]") {
  // As dtensor-conv's test: 10^14 elements, then an init that cannot reach its store.
  const Ran big = run_op(2, {"relu", "--input", "100000,1000,1000,1000"});
  INFO("output:\n" << big.output);
  CHECK(big.code == 2);
  CHECK(big.output.find("dtensor-op: rank 1: out of memory: the tensors of --input "
                        "100000,1000,1000,1000") != std::string::npos);
  const Ran init = run_program({kOp, "relu"}, 20s,
                               {{"DTENSOR_RANK", "1"},
                                {"DTENSOR_WORLD_SIZE", "2"},
                                {"DTENSOR_STORE", "redis://127.0.0.1:1"}});
  INFO("output:\n" << init.output);
  CHECK(init.code == 3);
  CHECK(init.output.find("dtensor-op: rank 1: [dtensor.store] redis://127.0.0.1:1") !=
        std::string::npos);
}

TEST_CASE("op cli run: a bad U-Net operator argument fails on every rank, naming it",
          "[cli][op][run][nn]") {
  const std::vector<std::pair<Args, std::string>> bad{
      {{"group_norm", "--input", "2,4,6"}, "--num-groups"},
      {{"group_norm", "--input", "2,4,6", "--num-groups", "3"}, "--num-groups"},
      {{"upsample", "--size", "4", "--scale", "2"}, "--scale"},
      {{"cat", "--cat-dim", "2", "--channels", "1,2"}, "--channels"},
  };
  dtensor::launch::TempDir store("dtensor-op-store");
  for (const auto& [args, option] : bad) {
    INFO("args: " << Catch::Detail::stringify(args));
    const Ran r = run_op(2, args);
    INFO("output:\n" << r.output);
    CHECK(r.code != 0);
    CHECK(r.seconds < 10);
    CHECK(r.output.find("dtensor-op: " + option) != std::string::npos);
    for (int rank = 0; rank < 2; ++rank) {
      Args argv{kOp};
      argv.insert(argv.end(), args.begin(), args.end());
      const Ran own = run_program(argv, 20s,
                                  {{"DTENSOR_RANK", std::to_string(rank)},
                                   {"DTENSOR_WORLD_SIZE", "2"},
                                   {"DTENSOR_LOCAL_RANK", std::to_string(rank)},
                                   {"DTENSOR_STORE", "file:" + store.path()}});
      INFO("rank " << rank << " output:\n" << own.output);
      CHECK(own.code == 2);
      CHECK(own.seconds < 5);
      CHECK(own.output.find("dtensor-op: " + option) != std::string::npos);
    }
  }
  const Ran help = run_program({kOp, "--help"});
  CHECK(help.code == 0);
  for (const char* op :
       {"upsample", "batch_norm", "group_norm", "instance_norm", "layer_norm", "cat", "leaky_relu",
        "gelu", "silu", "sigmoid", "tanh", "relu", "mse_loss", "cross_entropy", "--num-groups",
        "--align-corners", "--cat-dim", "--reduction"})
    CHECK(help.output.find(op) != std::string::npos);
}

TEST_CASE("op cli run: every U-Net operator passes --check at P=2", "[cli][op][run][nn]") {
  const std::vector<std::string> x{"output", "grad_input"};
  const std::vector<std::string> affine{"output", "grad_input", "grad_weight", "grad_bias"};
  check_passes(2, {"upsample", "--input", "2,3,7,6", "--mode", "linear", "--scale", "1.5,2"}, x);
  check_passes(
      2, {"upsample", "--input", "2,3,7", "--mode", "linear", "--size", "12", "--align-corners"},
      x);
  check_passes(2, {"upsample", "--input", "1,2,5,6", "--size", "9,4", "--placements", "S2"}, x);
  check_passes(
      2, {"batch_norm", "--input", "4,3,5,6", "--momentum", "0.3"},
      {"output", "running_mean_out", "running_var_out", "grad_input", "grad_weight", "grad_bias"});
  check_passes(2,
               {"batch_norm", "--input", "4,3,10", "--eval", "--no-affine", "--placements", "S0"},
               {"output", "running_mean_out", "running_var_out", "grad_input"});
  check_passes(2, {"group_norm", "--input", "2,6,5,4", "--num-groups", "3", "--placements", "S1"},
               affine);
  check_passes(2, {"instance_norm", "--input", "2,3,9", "--eps", "1e-3"}, affine);
  check_passes(2, {"layer_norm", "--input", "3,4,5,6", "--placements", "S2"}, affine);
  check_passes(2, {"layer_norm", "--input", "6,5", "--no-affine", "--placements", "S0"}, x);
  check_passes(2, {"cat", "--input", "2,4,6,5", "--channels", "2,3,1"},
               {"output", "grad_input", "grad_input1", "grad_input2"});
  check_passes(2, {"cat", "--input", "2,4,6,5", "--cat-dim", "3"},
               {"output", "grad_input", "grad_input1"});
  check_passes(2, {"leaky_relu", "--input", "2,3,7,5", "--negative-slope", "0.2"}, x);
  check_passes(2, {"gelu", "--input", "2,3,7,5"}, x);
  check_passes(2, {"gelu", "--input", "2,3,7,5", "--approximate", "tanh", "--dtype", "f64"}, x);
  for (const char* op : {"silu", "sigmoid", "tanh", "relu"})
    check_passes(2, {op, "--input", "2,3,7,5", "--placements", "S1"}, x);
  check_passes(2, {"mse_loss", "--input", "2,3,7,5"}, x);
  check_passes(2, {"mse_loss", "--input", "2,3,7,5", "--reduction", "sum", "--placements", "S0"},
               x);
  check_passes(2, {"cross_entropy", "--input", "4,5,3"}, x);
  check_passes(2, {"cross_entropy", "--input", "4,5,3", "--reduction", "sum", "--placements", "S1"},
               x);
}

TEST_CASE("op cli run: U-Net operator dumps hold their files and parameters, PyTorch agrees",
          "[cli][op][run][nn]") {
  dtensor::launch::TempDir dir("dtensor-op-nn-dump");
  struct Case {
    Args args;
    std::vector<std::string> files;
  };
  const std::vector<Case> cases{
      {{"batch_norm", "--input", "4,3,5"},
       {"input", "weight", "bias", "running_mean", "running_var", "grad_output", "output",
        "running_mean_out", "running_var_out", "grad_input", "grad_weight", "grad_bias"}},
      {{"group_norm", "--input", "2,4,6", "--num-groups", "2", "--no-affine"},
       {"input", "grad_output", "output", "grad_input"}},
      {{"layer_norm", "--input", "2,4,6"},
       {"input", "weight", "bias", "grad_output", "output", "grad_input", "grad_weight",
        "grad_bias"}},
      {{"cat", "--input", "2,4,6", "--channels", "2,3,1"},
       {"input", "input1", "input2", "grad_output", "output", "grad_input", "grad_input1",
        "grad_input2"}},
      {{"upsample", "--input", "2,3,6", "--mode", "linear", "--scale", "2.5"},
       {"input", "grad_output", "output", "grad_input"}},
      {{"gelu", "--input", "2,3,6"}, {"input", "grad_output", "output", "grad_input"}},
      {{"leaky_relu", "--input", "2,3,6"}, {"input", "grad_output", "output", "grad_input"}},
      {{"mse_loss", "--input", "2,3,6"}, {"input", "target", "output", "grad_input"}},
      {{"cross_entropy", "--input", "2,3,6", "--reduction", "sum"},
       {"input", "target", "output", "grad_input"}},
  };
  std::vector<std::string> dumps;
  for (const auto& c : cases) {
    const std::string dump = dir.path() + "/" + c.args[0] + std::to_string(dumps.size());
    Args args = c.args;
    for (const char* a : {"--backward", "--check", "--dump"})
      args.push_back(a);
    args.push_back(dump);
    const Ran r = run_op(2, args);
    INFO("args: " << Catch::Detail::stringify(args) << "\noutput:\n" << r.output);
    REQUIRE(r.code == 0);
    const json::Value meta = json::parse(read_file(dump + "/meta.json"));
    CHECK(meta.at("op").string == c.args[0]);
    CHECK(meta.at("files").object.size() == c.files.size());
    for (const auto& f : c.files) {
      INFO(f);
      CHECK(meta.at("files").has(f));
      const std::string bytes = read_file(dump + "/" + f + ".npy");
      REQUIRE(bytes.size() > 64);
      CHECK(bytes.substr(0, 6) == "\x93NUMPY");
    }
    const std::string& op = c.args[0];
    if (op == "batch_norm") {
      CHECK(meta.at("eps").number == 1e-5);
      CHECK(meta.at("momentum").number == 0.1);
      CHECK(meta.at("training").boolean);
      CHECK(meta.at("affine").boolean);
    } else if (op == "group_norm") {
      CHECK(meta.at("num_groups").number == 2);
      CHECK_FALSE(meta.at("affine").boolean);
      CHECK(meta.at("eps").number == 1e-5);
      CHECK_FALSE(meta.has("momentum"));
    } else if (op == "layer_norm") {
      CHECK(meta.at("weight_shape").array.size() == 2);  // [C, W]
    } else if (op == "cat") {
      CHECK(meta.at("inputs").number == 3);
      CHECK(meta.at("channels").array.size() == 3);
      CHECK(meta.at("channels").array[1].number == 3);
      CHECK(meta.at("cat_dim").number == 1);
      CHECK(meta.at("input_shape").array[1].number == 2);  // input 0
      REQUIRE(meta.at("input_shapes").array.size() == 3);
      CHECK(meta.at("input_shapes").array[2].array[1].number == 1);
      CHECK(meta.at("output_shape").array[1].number == 6);
    } else if (op == "upsample") {
      CHECK(meta.at("mode").string == "linear");
      CHECK(meta.at("size").is_null());
      CHECK(meta.at("scale_factor").array[0].number == 2.5);
      CHECK_FALSE(meta.at("align_corners").boolean);
      CHECK(meta.at("output_shape").array[2].number == 15);
    } else if (op == "gelu") {
      CHECK(meta.at("approximate").string == "none");
    } else if (op == "leaky_relu") {
      CHECK(meta.at("negative_slope").number == 0.01);
    } else {
      CHECK(meta.at("reduction").string == (op == "mse_loss" ? "mean" : "sum"));
      CHECK(meta.at("output_shape").array.empty());
      // The loss is a 0-d .npy.
      CHECK(read_file(dump + "/output.npy").find("'shape': ()") != std::string::npos);
      CHECK_FALSE(meta.at("files").has("grad_output"));
    }
    dumps.push_back(dump);
  }

  if (!have_torch()) {
    WARN("SKIPPED check_op_dump.py: `" << python() << " -c 'import torch, numpy'` failed");
    return;
  }
  for (const auto& dump : dumps) {
    const Ran check = run_program({python(), kCheckOpDump, dump}, 120s);
    INFO("check_op_dump.py " << dump << ":\n" << check.output);
    CHECK(check.code == 0);
  }
  // A corrupted running statistic must be caught.
  {
    std::fstream f(dumps[0] + "/running_var_out.npy",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-4, std::ios::end);
    const float wrong = 100.0f;
    f.write(reinterpret_cast<const char*>(&wrong), 4);
  }
  const Ran bad = run_program({python(), kCheckOpDump, dumps[0]}, 120s);
  INFO("check_op_dump.py on a corrupted dump:\n" << bad.output);
  CHECK(bad.code == 1);
  CHECK(bad.output.find("running_var_out") != std::string::npos);
}

TEST_CASE("op cli run: every operator passes --check at P=2", "[cli][op][run]") {
  const std::vector<std::string> x{"output", "grad_input"};
  check_passes(2,
               {"max_pool", "--input", "2,3,9,10", "--kernel", "3", "--stride", "2", "--padding",
                "1", "--ceil-mode"},
               x);
  check_passes(2,
               {"avg_pool", "--input", "2,3,9,10", "--kernel", "3", "--stride", "2", "--padding-lr",
                "1:0,0:1", "--ceil-mode", "--count-include-pad"},
               x);
  check_passes(2, {"adaptive_avg_pool", "--input", "2,3,9,10", "--output-size", "4,3"}, x);
  check_passes(2, {"adaptive_max_pool", "--input", "2,3,11", "--output-size", "4"}, x);
  check_passes(2, {"pad", "--input", "2,3,9,10", "--padding-lr", "2:1,1:3", "--mode", "reflect"},
               x);
  check_passes(2, {"pad", "--input", "1,2,10", "--padding-lr=-1:3", "--value", "0.5"}, x);
  check_passes(2,
               {"conv_transpose", "--input", "2,4,7,6", "--kernel", "3", "--stride", "2",
                "--padding", "1", "--output-padding", "1", "--out-channels", "6", "--groups", "2"},
               {"output", "grad_input", "grad_weight", "grad_bias"});
  check_passes(2, {"conv", "--input", "2,3,9,10", "--padding", "1", "--padding-mode", "circular"},
               {"output", "grad_input", "grad_weight", "grad_bias"});
}

TEST_CASE("op cli run: dump writes the tensors and meta.json, check_op_dump.py agrees",
          "[cli][op][run]") {
  dtensor::launch::TempDir dir("dtensor-op-dump");
  const std::string dump = dir.path() + "/dump";
  const Ran r =
      run_op(2, {"max_pool", "--input", "2,3,9,10", "--kernel", "3", "--stride", "2", "--padding",
                 "1", "--ceil-mode", "--backward", "--check", "--dump", dump});
  INFO("output:\n" << r.output);
  REQUIRE(r.code == 0);
  for (const char* f : {"input", "output", "grad_output", "grad_input"}) {
    INFO(f);
    const std::string bytes = read_file(dump + "/" + f + ".npy");
    REQUIRE(bytes.size() > 64);
    CHECK(bytes.substr(0, 6) == "\x93NUMPY");
    CHECK(bytes.find("'descr': '<f4'") != std::string::npos);
  }
  const json::Value meta = json::parse(read_file(dump + "/meta.json"));
  CHECK(meta.at("op").string == "max_pool");
  CHECK(meta.at("kernel").array.size() == 2);
  CHECK(meta.at("stride").array[0].number == 2);
  CHECK(meta.at("padding").array[1].array[0].number == 1);
  CHECK(meta.at("dilation").array[0].number == 1);
  CHECK(meta.at("ceil_mode").boolean);
  CHECK(meta.at("input_shape").array.size() == 4);
  CHECK(meta.at("output_shape").array[2].number == 5);  // ceil((9+2-3)/2)+1
  CHECK(meta.at("dtype").string == "f32");
  CHECK(meta.at("world_size").number == 2);
  CHECK(meta.at("placements").array[0].string == "S(3)");
  CHECK(meta.at("backward").boolean);
  CHECK(meta.at("files").object.size() == 4);
  CHECK_FALSE(meta.has("weight_shape"));  // only what applies to the op
  CHECK_FALSE(meta.has("count_include_pad"));

  // avg_pool's meta: divisor_override is null when absent.
  const std::string avg = dir.path() + "/avg";
  const Ran ra = run_op(2, {"avg_pool", "--input", "1,2,8", "--kernel", "2", "--dump", avg});
  INFO("avg_pool output:\n" << ra.output);
  REQUIRE(ra.code == 0);
  const json::Value am = json::parse(read_file(avg + "/meta.json"));
  CHECK(am.at("divisor_override").is_null());
  CHECK_FALSE(am.at("count_include_pad").boolean);

  if (!have_torch()) {
    WARN("SKIPPED check_op_dump.py: `" << python() << " -c 'import torch, numpy'` failed");
    return;
  }
  const Ran check = run_program({python(), kCheckOpDump, dump}, 120s);
  INFO("check_op_dump.py:\n" << check.output);
  CHECK(check.code == 0);
  // A corrupted result must be caught.
  {
    std::fstream f(dump + "/grad_input.npy", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-4, std::ios::end);
    const float wrong = 100.0f;
    f.write(reinterpret_cast<const char*>(&wrong), 4);
  }
  const Ran bad = run_program({python(), kCheckOpDump, dump}, 120s);
  INFO("check_op_dump.py on a corrupted dump:\n" << bad.output);
  CHECK(bad.code == 1);
  CHECK(bad.output.find("grad_input") != std::string::npos);
}

TEST_CASE("op cli run: bench reports timings and ratios", "[cli][op][run]") {
  const Ran r = run_op(2, {"avg_pool", "--kernel", "2", "--backward", "--bench", "--iters", "2",
                           "--warmup", "1", "--json"});
  INFO("output:\n" << r.output);
  REQUIRE(r.code == 0);
  const json::Value v = last_json_line(r.output);
  for (const char* f :
       {"fwd_ms", "bwd_ms", "local_fwd_ms", "local_bwd_ms", "overhead_fwd", "overhead_bwd"}) {
    INFO(f);
    REQUIRE(v.at(f).is_number());
    CHECK(v.at(f).number > 0);
  }
  CHECK(v.at("max_abs_err").is_null());  // no --check
  CHECK(v.at("iters").number == 2);
}
