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
  CHECK_FALSE(c.profile);
  CHECK(c.cpu_cache_mb == 512);
  CHECK(c.onednn_band_kb == 512);
  CHECK(c.cudnn_workspace_mb == 1024);
  CHECK(c.gloo_loop == Config::GlooLoop::Batch);
  CHECK(c.gloo_shm);
  CHECK_FALSE(c.wait_spin_us);  // auto
  CHECK_FALSE(c.cuda_module);
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
                                     {"DTENSOR_PROFILE", "on"},
                                     {"DTENSOR_CPU_CACHE_MB", "0"},
                                     {"DTENSOR_ONEDNN_BAND_KB", "64"},
                                     {"DTENSOR_CUDNN_WORKSPACE_MB", "16"},
                                     {"DTENSOR_GLOO_LOOP", "normal"},
                                     {"DTENSOR_GLOO_SHM", "off"},
                                     {"DTENSOR_WAIT_SPIN_US", "250"},
                                     {"DTENSOR_CUDA_MODULE", "/opt/m/libdtensor-cuda.so"},
                                     {"DTENSOR_MPI_MODULE", "/opt/m/libdtensor-mpi.so"},
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
  CHECK(c.profile);
  CHECK(c.cpu_cache_mb == 0);
  CHECK(c.onednn_band_kb == 64);
  CHECK(c.cudnn_workspace_mb == 16);
  CHECK(c.gloo_loop == Config::GlooLoop::Normal);
  CHECK_FALSE(c.gloo_shm);
  CHECK(c.wait_spin_us == 250);
  CHECK(*c.cuda_module == "/opt/m/libdtensor-cuda.so");
  CHECK(*c.mpi_module == "/opt/m/libdtensor-mpi.so");
  CHECK_FALSE(c.mpi_launcher.has_value());
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

TEST_CASE("config: the MPI launchers' and Slurm's variables", "[config][mpi]") {
  // PMI (MPICH, srun --mpi=pmi2): rank, size and the launcher.
  Config c = Config::from(Vars{{"PMI_RANK", "2"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "0"}});
  CHECK(*c.rank.value == 2);
  CHECK(c.rank.source == "PMI_RANK");
  CHECK(*c.world_size.value == 4);
  CHECK(*c.local_rank.value == 0);
  CHECK(*c.mpi_launcher == "PMI_SIZE");
  // OpenMPI sets both its own and PMIx's: its own name the launcher first.
  c = Config::from(Vars{{"OMPI_COMM_WORLD_SIZE", "2"}, {"PMIX_RANK", "1"}});
  CHECK(*c.mpi_launcher == "OMPI_COMM_WORLD_SIZE");
  CHECK(c.rank.source == "PMIX_RANK");
  // srun without an MPI plugin: Slurm's numbers, no MPI launcher.
  c = Config::from(Vars{{"SLURM_PROCID", "7"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "3"}});
  CHECK(*c.rank.value == 7);
  CHECK(*c.world_size.value == 8);
  CHECK(*c.local_rank.value == 3);
  CHECK_FALSE(c.mpi_launcher.has_value());
  // A launcher's spelling loses to dtensor-run's.
  c = Config::from(Vars{{"SLURM_PROCID", "7"}, {"DTENSOR_RANK", "1"}});
  CHECK(c.rank.source == "DTENSOR_RANK");
  CHECK_THROWS_WITH(Config::from(Vars{{"SLURM_PROCID", "x"}}),
                    Catch::Matchers::Contains("SLURM_PROCID='x' is not an integer"));
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
      {"DTENSOR_GLOO_SHM", "yes", "on | off"},
      {"DTENSOR_WAIT_SPIN_US", "-1", "auto and an integer from 0 to 1000000"},
      {"DTENSOR_WAIT_SPIN_US", "2000000", "auto and an integer from 0 to 1000000"},
      {"DTENSOR_WAIT_SPIN_US", "3ms", "auto and an integer from 0 to 1000000"},
      {"DTENSOR_PROFILE", "1", "on | off"},
      {"DTENSOR_TIMEOUT", "-3", "positive number of seconds"},
      {"DTENSOR_RANK", "one", "not an integer"},
      {"DTENSOR_JOB_ID", "my job", "[A-Za-z0-9._-]"},
      {"DTENSOR_STDOUT_BUFFERING", "full", "auto | line | unchanged"},
      {"DTENSOR_FLUSH_ON_STOP", "yes", "0 and 1"},
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

TEST_CASE("config: set_config replaces the process's configuration, init reads it", "[config]") {
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

TEST_CASE("config: the job id comes from the launcher, the token is checked and never shown",
          "[config]") {
  Config c = Config::from(Vars{});
  CHECK(c.job_id == "default");
  CHECK(c.job_id_source.empty());
  CHECK_FALSE(c.job_token);
  CHECK(c.stdout_buffering == Config::StdoutBuffering::Auto);
  CHECK(c.flush_on_stop);
  // The first launcher's id that is set, made safe for keys and file names.
  c = Config::from(Vars{{"DTENSOR_JOB_ID", "run-1.a_b"}, {"SLURM_JOB_ID", "77"}});
  CHECK(c.job_id == "run-1.a_b");
  CHECK(c.job_id_source == "DTENSOR_JOB_ID");
  CHECK(Config::from(Vars{{"TORCHELASTIC_RUN_ID", "exp/1"}}).job_id == "torchrun.exp_1");
  CHECK(Config::from(Vars{{"TORCHELASTIC_RUN_ID", "none"}}).job_id == "default");
  CHECK(Config::from(Vars{{"SLURM_JOB_ID", "77"}, {"SLURM_STEP_ID", "3"}}).job_id == "slurm.77.3");
  CHECK(Config::from(Vars{{"PMIX_NAMESPACE", "prterun-h-12@1"}}).job_id == "pmix.prterun-h-12_1");
  CHECK(Config::from(Vars{{"DTENSOR_JOB_TOKEN", "0123456789abcdef"}}).job_token ==
        std::optional<std::string>("0123456789abcdef"));
  CHECK_THROWS_WITH(Config::from(Vars{{"DTENSOR_JOB_TOKEN", "short-secret"}}),
                    Catch::Contains("DTENSOR_JOB_TOKEN") && Catch::Contains("at least 16") &&
                        !Catch::Contains("short-secret"));
  CHECK(
      Config::from(Vars{{"DTENSOR_STDOUT_BUFFERING", "unchanged"}, {"DTENSOR_FLUSH_ON_STOP", "0"}})
          .stdout_buffering == Config::StdoutBuffering::Unchanged);
}
