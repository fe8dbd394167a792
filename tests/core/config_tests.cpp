// The one run-time configuration: every DTENSOR_* variable parsed in one
// place, defaults as documented in docs/configuration.md, and a bad value an
// InvalidArgument naming the variable and what it accepts.
#include <catch2/catch.hpp>

#include "dtensor/core/config.h"
#include "dtensor/core/distributed.h"
#include "dtensor/core/errors.h"
#include "tests/support/scoped_config.h"

using namespace dtensor;
using Vars = std::map<std::string, std::string>;

TEST_CASE("config: defaults with no variable set", "[config]") {
  const Config c = Config::from(Vars{});
  CHECK(c.log_level == "warn");
  CHECK_FALSE(c.debug);
  CHECK(c.check_agreement);
  CHECK(c.cpu_cache_mb == 512);
  CHECK(c.onednn_band_kb == 512);
  CHECK(c.cudnn_workspace_mb == 1024);
  CHECK(c.gloo_loop == Config::GlooLoop::Batch);
  CHECK_FALSE(c.backend);
  CHECK_FALSE(c.store);
  CHECK_FALSE(c.timeout);
  CHECK_FALSE(c.rank.value);
  CHECK(c.heartbeat_interval.count() == 2000);
  CHECK(c.heartbeat_timeout.count() == 20000);
  CHECK(c.desync_check_delay.count() == 3000);
  CHECK(c.flight_recorder_size == 512);
  CHECK(c.flight_recorder_dir == "/tmp");
  CHECK(Config::from(Vars{{"TMPDIR", "/scratch"}}).flight_recorder_dir == "/scratch");
}

TEST_CASE("config: every variable is read", "[config]") {
  const Config c = Config::from(Vars{{"DTENSOR_LOG_LEVEL", "debug"},
                                     {"DTENSOR_DEBUG", "1"},
                                     {"DTENSOR_CHECK_AGREEMENT", "0"},
                                     {"DTENSOR_CPU_CACHE_MB", "0"},
                                     {"DTENSOR_ONEDNN_BAND_KB", "64"},
                                     {"DTENSOR_CUDNN_WORKSPACE_MB", "16"},
                                     {"DTENSOR_GLOO_LOOP", "normal"},
                                     {"DTENSOR_BACKEND", "cpu:gloo,cuda:nccl"},
                                     {"DTENSOR_STORE", "file:/tmp/x"},
                                     {"DTENSOR_TIMEOUT", "2.5"},
                                     {"DTENSOR_HOSTNAME", "h"},
                                     {"DTENSOR_IFNAME", "lo"},
                                     {"RANK", "3"},
                                     {"DTENSOR_WORLD_SIZE", "8"},
                                     {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                     {"DTENSOR_HEARTBEAT_INTERVAL", "0.5"},
                                     {"DTENSOR_HEARTBEAT_TIMEOUT", "7"},
                                     {"DTENSOR_DESYNC_CHECK_DELAY", "1.25"},
                                     {"DTENSOR_FLIGHT_RECORDER_SIZE", "0"},
                                     {"DTENSOR_FLIGHT_RECORDER_DIR", "/var/fr"},
                                     {"TMPDIR", "/scratch"}});
  CHECK(c.log_level == "debug");
  CHECK(c.debug);
  CHECK_FALSE(c.check_agreement);
  CHECK(c.cpu_cache_mb == 0);
  CHECK(c.onednn_band_kb == 64);
  CHECK(c.cudnn_workspace_mb == 16);
  CHECK(c.gloo_loop == Config::GlooLoop::Normal);
  CHECK(*c.backend == "cpu:gloo,cuda:nccl");
  CHECK(*c.store == "file:/tmp/x");
  CHECK(c.timeout->count() == 2500);
  CHECK(*c.hostname == "h");
  CHECK(*c.ifname == "lo");
  CHECK(*c.rank.value == 3);
  CHECK(c.rank.source == "RANK");
  CHECK(*c.world_size.value == 8);
  CHECK(*c.local_rank.value == 1);
  CHECK(c.heartbeat_interval.count() == 500);
  CHECK(c.heartbeat_timeout.count() == 7000);
  CHECK(c.desync_check_delay.count() == 1250);
  CHECK(c.flight_recorder_size == 0);
  CHECK(c.flight_recorder_dir == "/var/fr");  // the variable wins over TMPDIR
}

TEST_CASE("config: a bad value names the variable and the accepted values", "[config]") {
  const std::vector<std::tuple<std::string, std::string, std::string>> bad = {
      {"DTENSOR_LOG_LEVEL", "loud", "trace | debug | info | warn | error | critical | off"},
      {"DTENSOR_DEBUG", "yes", "0 and 1"},
      {"DTENSOR_CHECK_AGREEMENT", "2", "0 and 1"},
      {"DTENSOR_CPU_CACHE_MB", "-1", "integer >= 0"},
      {"DTENSOR_ONEDNN_BAND_KB", "12k", "integer >= 0"},
      {"DTENSOR_CUDNN_WORKSPACE_MB", "0", "integer >= 1"},
      {"DTENSOR_GLOO_LOOP", "fast", "batch | normal"},
      {"DTENSOR_TIMEOUT", "-3", "positive number of seconds"},
      {"DTENSOR_RANK", "one", "not an integer"},
      {"DTENSOR_HEARTBEAT_INTERVAL", "0", "positive number of seconds"},
      {"DTENSOR_HEARTBEAT_TIMEOUT", "20s", "positive number of seconds"},
      {"DTENSOR_DESYNC_CHECK_DELAY", "-1", "positive number of seconds"},
      {"DTENSOR_FLIGHT_RECORDER_SIZE", "many", "integer >= 0"},
  };
  for (const auto& [name, value, accepted] : bad) {
    INFO(name << "=" << value);
    CHECK_THROWS_AS(Config::from(Vars{{name, value}}), InvalidArgument);
    CHECK_THROWS_WITH(Config::from(Vars{{name, value}}),
                      Catch::Contains(name) && Catch::Contains(accepted));
  }
}

TEST_CASE("config: set_config replaces the process's configuration; init reads it", "[config]") {
  const testing::ScopedConfig scoped([](Config& c) {
    c = Config::from(Vars{{"DTENSOR_WORLD_SIZE", "4"},
                          {"DTENSOR_RANK", "2"},
                          {"DTENSOR_STORE", "file:/nowhere"},
                          {"DTENSOR_TIMEOUT", "7"}});
  });
  CHECK(config().world_size.value == 4);
  const ResolvedInit r = resolve_init_options({});
  CHECK(r.world_size == 4);
  CHECK(r.rank == 2);
  CHECK(r.store == "file:/nowhere");
  CHECK(r.timeout.count() == 7000);
  InitOptions o;  // InitOptions still win over the configuration
  o.rank = 1;
  CHECK(resolve_init_options(o).rank == 1);
}
