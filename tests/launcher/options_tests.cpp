// Unit tests of dtensor-run's command-line parser: no process is started.
#include <unistd.h>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "tests/launcher/usage_cases.h"
#include "tools/dtensor-run/core_binding.h"
#include "tools/dtensor-run/job_identity.h"
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
  CHECK(env["DTENSOR_LOCAL_WORLD_SIZE"] == "4");
  CHECK(env["DTENSOR_STORE"] == "redis://h:1");
  CHECK(env["DTENSOR_TIMEOUT"] == "30");
  CHECK(env.size() == 6);

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

TEST_CASE("job identity: one node invents an id and a token, several nodes take them from outside",
          "[launcher][options]") {
  using dtensor::run::job_environment;
  using dtensor::run::job_identity;
  const std::map<std::string, std::string> none;
  auto from = [](const std::map<std::string, std::string>& vars) {
    return [vars](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  };
  const Options one = parse_options({"-n", "2", "p"});
  const auto a = job_identity(one, from(none)), b = job_identity(one, from(none));
  REQUIRE(a.id);
  REQUIRE(a.token);
  CHECK(a.id->rfind("run-", 0) == 0);
  CHECK(a.token->size() == 64);
  CHECK(*a.id != *b.id);  // fresh every time: no two jobs share a namespace
  CHECK(*a.token != *b.token);
  auto env = job_environment(a);
  CHECK(env["DTENSOR_JOB_ID"] == *a.id);
  CHECK(env["DTENSOR_JOB_TOKEN"] == *a.token);

  // Several nodes: --job-id or the environment, never invented.
  const Options many = parse_options(
      {"-n", "2", "--nnodes", "2", "--node-rank", "1", "--store", "redis://h:1", "p"});
  const auto c = job_identity(many, from(none));
  CHECK_FALSE(c.id);
  CHECK_FALSE(c.token);
  CHECK(job_environment(c).empty());
  const auto d = job_identity(parse_options({"-n", "2", "--nnodes", "2", "--store", "redis://h:1",
                                             "--job-id", "exp.7", "p"}),
                              from({{"DTENSOR_JOB_TOKEN", "0123456789abcdef0123"}}));
  CHECK(d.id == std::optional<std::string>("exp.7"));
  CHECK(d.token == std::optional<std::string>("0123456789abcdef0123"));
  const auto e = job_identity(one, from({{"DTENSOR_JOB_ID", "mine"}}));
  CHECK(e.id == std::optional<std::string>("mine"));

  CHECK_THROWS_WITH(parse_options({"-n", "2", "--job-id", "a/b", "p"}),
                    Catch::Contains("--job-id"));
}

TEST_CASE("store URLs with credentials are accepted, never echoed", "[launcher][options]") {
  CHECK(parse_options({"-n", "1", "--store", "redis://:pw@h:1", "p"}).store == "redis://:pw@h:1");
  CHECK(parse_options({"-n", "1", "--store", "redis://u:p%40w@h:1", "p"}).store ==
        "redis://u:p%40w@h:1");
  CHECK(parse_options({"-n", "1", "--store", "rediss://h:1", "p"}).store == "rediss://h:1");
  try {
    parse_options({"-n", "1", "--store", "redis://nocolon@h:1", "p"});
    FAIL("expected a usage error");
  } catch (const UsageError& e) {
    CHECK(std::string(e.what()).find("USER:PASSWORD") != std::string::npos);
  }
  try {
    parse_options({"-n", "1", "--store", "redis://:secretpw@h:99999", "p"});
    FAIL("expected a usage error");
  } catch (const UsageError& e) {
    CHECK(std::string(e.what()).find("secretpw") == std::string::npos);
  }
}

TEST_CASE("parser: the store from --store-file or DTENSOR_STORE, the password off the command line",
          "[launcher][options]") {
  const std::string url = "redis://:s3cret@h.example:6379";
  const auto env = [&](const char* name) -> const char* {
    return std::string(name) == "DTENSOR_STORE" ? url.c_str() : nullptr;
  };
  const auto no_env = [](const char*) -> const char* { return nullptr; };
  // DTENSOR_STORE when neither option is given; --store wins over it.
  CHECK(parse_options({"-n", "2", "p"}, env).store == url);
  CHECK(parse_options({"-n", "2", "p"}, no_env).store.empty());
  CHECK(parse_options({"-n", "2", "--store", "file:/s", "p"}, env).store == "file:/s");
  CHECK(parse_options({"-n", "2", "--nnodes", "2", "p"}, env).store == url);
  // --store-file: the first line, a trailing CR dropped; it wins over DTENSOR_STORE.
  const std::string file = std::filesystem::temp_directory_path().string() +
                           "/dtensor-store-file-" + std::to_string(::getpid());
  std::ofstream(file) << "redis://:other@h.example:6380\r\nignored\n";
  CHECK(parse_options({"-n", "2", "--store-file", file, "p"}, env).store ==
        "redis://:other@h.example:6380");
  // Every mistake names where the store came from, never the password.
  auto refused = [](const Args& args, const dtensor::run::EnvLookup& e) {
    try {
      parse_options(args, e);
    } catch (const UsageError& ex) {
      return std::string(ex.what());
    }
    return std::string("accepted");
  };
  const auto bad_env = [](const char* name) -> const char* {
    return std::string(name) == "DTENSOR_STORE" ? "redis://:s3cret@h.example" : nullptr;
  };
  CHECK_THAT(refused({"-n", "2", "p"}, bad_env),
             Catch::Contains("DTENSOR_STORE") && !Catch::Contains("s3cret"));
  CHECK_THAT(
      refused({"-n", "2", "--store", "file:/s", "--store-file", file, "p"}, no_env),
      Catch::Contains("--store-file and --store") || Catch::Contains("--store and --store-file"));
  CHECK_THAT(refused({"-n", "2", "--store-file", file + ".missing", "p"}, no_env),
             Catch::Contains("--store-file") && Catch::Contains(".missing"));
  std::ofstream(file) << "redis://:s3cret@h.example\n";
  CHECK_THAT(refused({"-n", "2", "--store-file", file, "p"}, no_env),
             Catch::Contains("--store-file") && !Catch::Contains("s3cret"));
  std::ofstream(file) << "\n";
  CHECK_THAT(refused({"-n", "2", "--store-file", file, "p"}, no_env),
             Catch::Contains("--store-file") && Catch::Contains("empty"));
  std::filesystem::remove(file);
}
