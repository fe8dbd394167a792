// dtensor-op lp_pool, the row registered from its own file with an option
// declared by the row (--norm-type): the parser, the help, --check on 1, 2
// and 4 ranks against the row's f64 oracle (1-, 2- and 3-d, ceil_mode,
// uneven shards, halos), refusals naming the option on every rank, and dumps
// replayed by tools/check_op_dump.py from meta.json's "torch" call alone
// (caught when corrupted).
#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

#include "tests/cli/mini_json.h"
#include "tests/cli/op_cli_run.h"
#include "tools/dtensor-op/op_table.h"
#include "tools/dtensor-op/options.h"
#include "tools/launch/process_set.h"

namespace {

using namespace dtensor::testing::op_cli_run;
using namespace std::chrono_literals;

}  // namespace

TEST_CASE("op cli lp_pool: a registered row and its declared option", "[cli][op][lp_pool]") {
  const auto* row = dtensor::op_cli::find_op("lp_pool");
  REQUIRE(row != nullptr);
  CHECK(row->kind > OpKind::Linear);  // after the built-in rows
  auto o = parse_options({"lp_pool", "--norm-type", "2.5", "--input", "2,3,9,8"});
  CHECK(o.op == row->kind);
  CHECK(o.name() == "lp_pool");
  CHECK(o.is_window());
  CHECK(o.declared.at("--norm-type") == "2.5");
  CHECK(o.kernel == std::vector<std::int64_t>{3, 3});
  CHECK(o.stride == std::vector<std::int64_t>{3, 3});  // the kernel's, as F.lp_pool2d
  CHECK(o.output_shape() == dtensor::Shape{2, 3, 3, 2});
  o = parse_options({"lp_pool", "--norm-type", "1", "--input", "2,3,9,8", "--kernel", "2",
                     "--stride", "1,3", "--ceil-mode"});
  CHECK(o.output_shape() == dtensor::Shape{2, 3, 8, 3});  // a partial last window counts
  CHECK(parse_options(
            {"lp_pool", "--norm-type", "3", "--input", "2,3,7", "--kernel", "2", "--ceil-mode"})
            .output_shape() == dtensor::Shape{2, 3, 4});
  // A stride past the kernel: ceil_mode's extra window would start past the
  // input, so there is none (PyTorch: 3 outputs, not 4).
  CHECK(parse_options({"lp_pool", "--norm-type", "2", "--input", "1,1,11", "--kernel", "2",
                       "--stride", "4", "--ceil-mode"})
            .output_shape() == dtensor::Shape{1, 1, 3});
}

TEST_CASE("op cli lp_pool: invalid arguments name the option", "[cli][op][lp_pool]") {
  rejects({"lp_pool"}, "--norm-type");
  rejects({"lp_pool", "--norm-type", "0"}, "--norm-type");
  rejects({"lp_pool", "--norm-type", "-2"}, "--norm-type");
  rejects({"lp_pool", "--norm-type", "two"}, "--norm-type");
  rejects({"lp_pool", "--norm-type", "nan"}, "--norm-type");
  rejects({"lp_pool", "--norm-type", "2", "--padding", "1"}, "--padding");
  rejects({"lp_pool", "--norm-type", "2", "--dilation", "2"}, "--dilation");
  rejects({"lp_pool", "--norm-type", "2", "--kernel", "20"}, "--input");
  rejects({"lp_pool", "--norm-type", "2", "--input", "2,3"}, "--input");
  // Another row does not take it.
  rejects({"max_pool", "--norm-type", "2"}, "--norm-type");
  rejects({"relu", "--norm-type", "2"}, "--norm-type");
}

TEST_CASE("op cli run lp_pool: the help lists it, and a bad option fails on every rank",
          "[cli][op][run][lp_pool]") {
  const Ran help = run_program({kOp, "--help"});
  CHECK(help.code == 0);
  CHECK(help.output.find("| lp_pool") != std::string::npos);  // in the OP list
  CHECK(help.output.find("\nlp_pool (F.lp_pool1d/2d/3d") != std::string::npos);
  CHECK(help.output.find("  --norm-type p              the power") != std::string::npos);
  refused_on_every_rank({"lp_pool", "--norm-type", "0"}, "--norm-type");
}

TEST_CASE("op cli run lp_pool: --check on 1, 2 and 4 ranks, halos and uneven shards",
          "[cli][op][run][lp_pool]") {
  const std::vector<std::string> x{"output", "grad_input"};
  check_passes(1, {"lp_pool", "--norm-type", "2", "--input", "2,3,9,8"}, x);
  // Overlapping windows across the shards' edges (a halo), uneven shards.
  check_passes(2,
               {"lp_pool", "--norm-type", "2.5", "--input", "2,3,17,12", "--kernel", "3",
                "--stride", "2", "--placements", "S2"},
               x);
  check_passes(2,
               {"lp_pool", "--norm-type", "3", "--input", "2,3,16", "--kernel", "3", "--ceil-mode",
                "--placements", "S2", "--dtype", "f64"},
               x);
  check_passes(4,
               {"lp_pool", "--norm-type", "1.5", "--input", "1,2,9,10", "--kernel", "2,3",
                "--stride", "1,2", "--ceil-mode", "--mesh", "2x2", "--placements", "S2,S3"},
               x);
  check_passes(2,
               {"lp_pool", "--norm-type", "2", "--input", "2,3,11", "--kernel", "2", "--stride",
                "4", "--ceil-mode", "--placements", "S2"},
               x);
  check_passes(4,
               {"lp_pool", "--norm-type", "2", "--input", "2,2,6,7,5", "--kernel", "2",
                "--placements", "S3", "--dtype", "bf16"},
               x);
  check_passes(2,
               {"lp_pool", "--norm-type", "4", "--input", "2,4,10,10", "--kernel", "2",
                "--placements", "S1", "--dtype", "f16"},
               x);
}

TEST_CASE("op cli run lp_pool: dumps carry the PyTorch call, which the replay runs",
          "[cli][op][run][lp_pool]") {
  dtensor::launch::TempDir dir("dtensor-op-lp-pool-dump");
  const std::vector<Args> cases{
      {"lp_pool", "--norm-type", "2.5", "--input", "2,3,17,12", "--kernel", "3", "--stride", "2",
       "--placements", "S2"},
      {"lp_pool", "--norm-type", "3", "--input", "2,3,16", "--kernel", "3", "--ceil-mode",
       "--placements", "S2", "--dtype", "f64"},
  };
  std::vector<std::string> dumps;
  for (std::size_t k = 0; k < cases.size(); ++k) {
    const std::string dump = dir.path() + "/d" + std::to_string(k);
    const json::Value meta = dumped_meta(cases[k], {"--backward"}, dump);
    CHECK(meta.at("op").string == "lp_pool");
    CHECK(meta.at("norm_type").number == (k == 0 ? 2.5 : 3.0));
    const json::Value& torch = meta.at("torch");
    CHECK(torch.at("function").string ==
          (k == 0 ? "nn.functional.lp_pool2d" : "nn.functional.lp_pool1d"));
    CHECK(torch.at("kwargs").at("ceil_mode").boolean == (k == 1));
    // F.lp_pool1d takes its kernel as a number, lp_pool2d as a list.
    CHECK(torch.at("args").array[1].is_number() == (k == 1));
    dumps.push_back(dump);
  }
  replay_dumps_and_corrupt(dumps, dumps[0], "grad_input");
}
