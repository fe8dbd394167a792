// Unit tests of dtensor-run's command-line parser: no process is started.
#include <catch2/catch.hpp>

#include "tests/launcher/usage_cases.h"
#include "tools/dtensor-run/core_binding.h"
#include "tools/dtensor-run/options.h"

using dtensor::run::Options;
using dtensor::run::parse_options;
using dtensor::run::rank_environment;
using dtensor::run::UsageError;
using Args = std::vector<std::string>;

TEST_CASE("parser: defaults and the program with its own arguments", "[launcher][options]") {
  const Options o = parse_options({"-n", "4", "prog", "a", "-n", "5", "--bogus"});
  CHECK(o.nproc == 4);
  CHECK(o.nnodes == 1);
  CHECK(o.node_rank == 0);
  CHECK(o.store.empty());
  CHECK_FALSE(o.timeout);
  CHECK_FALSE(o.deadline);
  CHECK_FALSE(o.help);
  CHECK_FALSE(o.bind_cores);
  // Everything from PROGRAM on belongs to the program, options included.
  CHECK(o.command == Args{"prog", "a", "-n", "5", "--bogus"});
}

TEST_CASE("parser: option spellings", "[launcher][options]") {
  CHECK(parse_options({"-n3", "p"}).nproc == 3);
  CHECK(parse_options({"--nproc-per-node", "3", "p"}).nproc == 3);
  CHECK(parse_options({"--nproc-per-node=3", "p"}).nproc == 3);
  CHECK(parse_options({"-n", "2", "--store=file:/s", "p"}).store == "file:/s");
  CHECK(parse_options({"-n", "2", "--store", "redis://h.example:6379", "p"}).store ==
        "redis://h.example:6379");
  CHECK(parse_options({"-n", "2", "--store", "redis://[::1]:6379", "p"}).store ==
        "redis://[::1]:6379");
  CHECK(*parse_options({"-n", "2", "--timeout=2.5", "p"}).timeout == "2.5");
  CHECK(parse_options({"-n", "2", "--deadline", "1.5", "p"}).deadline ==
        std::chrono::milliseconds(1500));
  CHECK(parse_options({"-n", "2", "--bind-cores", "p"}).bind_cores);
  // The last of a repeated option wins, as in most tools.
  CHECK(parse_options({"-n", "2", "-n", "3", "p"}).nproc == 3);
}

TEST_CASE("parser: -- ends the options", "[launcher][options]") {
  CHECK(parse_options({"-n", "2", "--", "-weird", "x"}).command == Args{"-weird", "x"});
  CHECK(parse_options({"-n", "2", "--", "--", "x"}).command == Args{"--", "x"});
}

TEST_CASE("parser: --help wins over other mistakes before the program", "[launcher][options]") {
  CHECK(parse_options({"--help"}).help);
  CHECK(parse_options({"-h"}).help);
  CHECK(parse_options({"-n", "0", "--bogus", "--help"}).help);
  // After PROGRAM it is the program's.
  const Options o = parse_options({"-n", "1", "prog", "--help"});
  CHECK_FALSE(o.help);
  CHECK(o.command == Args{"prog", "--help"});
}

TEST_CASE("parser: several nodes", "[launcher][options]") {
  const Options o = parse_options(
      {"-n", "4", "--nnodes", "3", "--node-rank", "2", "--store", "redis://h:1", "p"});
  CHECK(o.world_size() == 12);
  CHECK(o.global_rank(0) == 8);
  CHECK(o.global_rank(3) == 11);
  // A file store is allowed when the user names it (a shared file system).
  CHECK(
      parse_options({"-n", "1", "--nnodes", "2", "--node-rank", "1", "--store", "file:/nfs/s", "p"})
          .store == "file:/nfs/s");
}

TEST_CASE("parser: the environment of a rank", "[launcher][options]") {
  Options o = parse_options({"-n", "4", "--nnodes", "3", "--node-rank", "2", "--store",
                             "redis://h:1", "--timeout", "30", "p"});
  auto env = rank_environment(o, 1, "redis://h:1");
  CHECK(env["DTENSOR_RANK"] == "9");
  CHECK(env["DTENSOR_WORLD_SIZE"] == "12");
  CHECK(env["DTENSOR_LOCAL_RANK"] == "1");
  CHECK(env["DTENSOR_STORE"] == "redis://h:1");
  CHECK(env["DTENSOR_TIMEOUT"] == "30");
  CHECK(env.size() == 5);

  o = parse_options({"-n", "1", "p"});
  env = rank_environment(o, 0, "file:/tmp/x/store");
  CHECK(env["DTENSOR_RANK"] == "0");
  CHECK(env["DTENSOR_WORLD_SIZE"] == "1");
  CHECK(env["DTENSOR_STORE"] == "file:/tmp/x/store");
  CHECK(env.count("DTENSOR_TIMEOUT") == 0);  // the rank's own environment decides
}

TEST_CASE("parser: usage errors name the argument", "[launcher][options]") {
  for (const auto& c : dtensor::run::testing::usage_cases()) {
    Args args;
    for (const auto& a : c.args)
      args.push_back(a == "PROG" ? "prog" : a);
    std::string joined;
    for (const auto& a : args)
      joined += " " + a;
    INFO("dtensor-run" << joined);
    try {
      parse_options(args);
      FAIL_CHECK("no error");
    } catch (const UsageError& e) {
      CHECK_THAT(e.what(), Catch::Contains(c.names));
    }
  }
}

TEST_CASE("core slices: disjoint, contiguous, as even as can be, every CPU used",
          "[launcher][options]") {
  using dtensor::run::core_slices;
  using Slices = std::vector<std::vector<int>>;
  CHECK(core_slices(2, {0, 1}) == Slices{{0}, {1}});
  CHECK(core_slices(1, {0, 1}) == Slices{{0, 1}});
  CHECK(core_slices(3, {0, 1, 2, 3, 4, 5, 6}) == Slices{{0, 1, 2}, {3, 4}, {5, 6}});
  CHECK(core_slices(2, {4, 9}) == Slices{{4}, {9}});  // the CPUs allowed, not 0..n-1
  // Fewer CPUs than ranks: one each, shared evenly.
  CHECK(core_slices(5, {0, 1}) == Slices{{0}, {1}, {0}, {1}, {0}});
  CHECK(core_slices(2, {}) == Slices{{}, {}});  // nothing known: no binding
  // Every split of 1..16 CPUs among 1..16 ranks, checked by its properties.
  for (int cpus = 1; cpus <= 16; ++cpus)
    for (int ranks = 1; ranks <= 16; ++ranks) {
      std::vector<int> allowed;
      for (int c = 0; c < cpus; ++c)
        allowed.push_back(2 * c);
      const Slices s = core_slices(ranks, allowed);
      REQUIRE(s.size() == static_cast<std::size_t>(ranks));
      std::vector<int> uses(static_cast<std::size_t>(2 * cpus), 0);
      std::size_t lo = s[0].size(), hi = s[0].size();
      for (const auto& slice : s) {
        REQUIRE_FALSE(slice.empty());
        lo = std::min(lo, slice.size());
        hi = std::max(hi, slice.size());
        for (int c : slice)
          ++uses[static_cast<std::size_t>(c)];
      }
      CHECK(hi - lo <= 1);
      for (int c : allowed)  // each CPU used, by ceil or floor(ranks / cpus) ranks
        CHECK(std::abs(uses[static_cast<std::size_t>(c)] * cpus - ranks) < cpus);
    }
}
