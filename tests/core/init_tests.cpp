// init_process_group's settings: explicit options win over DTENSOR_*, which
// win over torchrun's and OpenMPI's variables; bad settings name the variable.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <map>

#include "dtensor/core/distributed.h"

using dtensor::InitOptions;
using dtensor::resolve_init_options;

namespace {
const char* kVars[] = {"DTENSOR_RANK",
                       "DTENSOR_WORLD_SIZE",
                       "DTENSOR_LOCAL_RANK",
                       "DTENSOR_STORE",
                       "DTENSOR_TIMEOUT",
                       "RANK",
                       "WORLD_SIZE",
                       "LOCAL_RANK",
                       "OMPI_COMM_WORLD_RANK",
                       "OMPI_COMM_WORLD_SIZE",
                       "OMPI_COMM_WORLD_LOCAL_RANK",
                       "PMI_RANK",
                       "PMI_SIZE",
                       "PMIX_RANK",
                       "MPI_LOCALRANKID",
                       "SLURM_PROCID",
                       "SLURM_NTASKS",
                       "SLURM_LOCALID",
                       "DTENSOR_BACKEND",
                       "DTENSOR_HOSTNAME",
                       "DTENSOR_IFNAME"};

// Sets exactly the given variables for the scope, restoring the rest after.
struct ScopedEnv {
  std::map<std::string, std::string> saved;
  explicit ScopedEnv(const std::map<std::string, std::string>& set) {
    for (const char* v : kVars) {
      if (const char* old = std::getenv(v)) saved[v] = old;
      unsetenv(v);
    }
    for (auto& [k, v] : set)
      setenv(k.c_str(), v.c_str(), 1);
  }
  ~ScopedEnv() {
    for (const char* v : kVars)
      unsetenv(v);
    for (auto& [k, v] : saved)
      setenv(k.c_str(), v.c_str(), 1);
  }
};

std::string error_of(const InitOptions& o) {
  try {
    resolve_init_options(o);
  } catch (const dtensor::InvalidArgument& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("init reads the launcher's DTENSOR_* variables", "[init]") {
  ScopedEnv env({{"DTENSOR_RANK", "2"},
                 {"DTENSOR_WORLD_SIZE", "4"},
                 {"DTENSOR_LOCAL_RANK", "0"},
                 {"DTENSOR_STORE", "file:/tmp/x"},
                 {"DTENSOR_TIMEOUT", "12.5"}});
  auto r = resolve_init_options({});
  REQUIRE(r.rank == 2);
  REQUIRE(r.world_size == 4);
  REQUIRE(r.local_rank == 0);
  REQUIRE(r.store == "file:/tmp/x");
  REQUIRE(r.timeout == std::chrono::milliseconds(12500));
}

TEST_CASE("init falls back to torchrun and then OpenMPI variables", "[init]") {
  {
    ScopedEnv env({{"RANK", "1"},
                   {"WORLD_SIZE", "3"},
                   {"LOCAL_RANK", "1"},
                   {"DTENSOR_STORE", "redis://127.0.0.1:6379"}});
    auto r = resolve_init_options({});
    REQUIRE(r.rank == 1);
    REQUIRE(r.world_size == 3);
  }
  {
    ScopedEnv env({{"OMPI_COMM_WORLD_RANK", "5"},
                   {"OMPI_COMM_WORLD_SIZE", "8"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                   {"DTENSOR_STORE", "file:/tmp/y"}});
    auto r = resolve_init_options({});
    REQUIRE(r.rank == 5);
    REQUIRE(r.world_size == 8);
    REQUIRE(r.local_rank == 1);
  }
  {  // DTENSOR_* beat torchrun's
    ScopedEnv env({{"RANK", "1"},
                   {"WORLD_SIZE", "3"},
                   {"DTENSOR_RANK", "0"},
                   {"DTENSOR_WORLD_SIZE", "2"},
                   {"DTENSOR_STORE", "file:/tmp/y"}});
    auto r = resolve_init_options({});
    REQUIRE(r.rank == 0);
    REQUIRE(r.world_size == 2);
  }
}

TEST_CASE("init: explicit options win over the environment", "[init]") {
  ScopedEnv env({{"DTENSOR_RANK", "2"}, {"DTENSOR_WORLD_SIZE", "4"}, {"DTENSOR_STORE", "file:/a"}});
  InitOptions o;
  o.rank = 1;
  o.world_size = 2;
  o.store = "file:/b";
  o.timeout = std::chrono::seconds(7);
  auto r = resolve_init_options(o);
  REQUIRE(r.rank == 1);
  REQUIRE(r.world_size == 2);
  REQUIRE(r.store == "file:/b");
  REQUIRE(r.timeout == std::chrono::seconds(7));
}

TEST_CASE("init without any settings is a one-rank job", "[init]") {
  ScopedEnv env({});
  auto r = resolve_init_options({});
  REQUIRE(r.rank == 0);
  REQUIRE(r.world_size == 1);
  REQUIRE(r.timeout == std::chrono::seconds(300));
}

TEST_CASE("init errors name the variable at fault", "[init][errors]") {
  struct Case {
    std::map<std::string, std::string> env;
    std::string must_name;
  };
  const Case cases[] = {
      {{{"DTENSOR_RANK", "x"}, {"DTENSOR_WORLD_SIZE", "2"}}, "DTENSOR_RANK"},
      {{{"DTENSOR_RANK", "0"}, {"DTENSOR_WORLD_SIZE", "two"}}, "DTENSOR_WORLD_SIZE"},
      {{{"DTENSOR_RANK", "3"}, {"DTENSOR_WORLD_SIZE", "2"}, {"DTENSOR_STORE", "file:/x"}},
       "DTENSOR_RANK"},
      {{{"DTENSOR_RANK", "0"}, {"DTENSOR_WORLD_SIZE", "0"}}, "DTENSOR_WORLD_SIZE"},
      {{{"DTENSOR_RANK", "0"}, {"DTENSOR_WORLD_SIZE", "2"}}, "DTENSOR_STORE"},
      {{{"DTENSOR_WORLD_SIZE", "2"}, {"DTENSOR_STORE", "file:/x"}}, "DTENSOR_RANK"},
      {{{"DTENSOR_TIMEOUT", "-3"}}, "DTENSOR_TIMEOUT"},
      {{{"DTENSOR_TIMEOUT", "soon"}}, "DTENSOR_TIMEOUT"},
      {{{"RANK", "1"}, {"WORLD_SIZE", "2"}}, "DTENSOR_STORE"},
      {{{"OMPI_COMM_WORLD_RANK", "9"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"DTENSOR_STORE", "file:/x"}},
       "OMPI_COMM_WORLD_RANK"},
  };
  for (const auto& c : cases) {
    ScopedEnv env(c.env);
    const std::string msg = error_of({});
    INFO("expected an error naming " << c.must_name << ", got: " << msg);
    REQUIRE(msg.find(c.must_name) != std::string::npos);
    REQUIRE(msg.rfind("[dtensor.init]", 0) == 0);
  }
}

TEST_CASE("store URLs are validated and name the setting", "[init][store][errors]") {
  for (const char* bad :
       {"redis://", "redis://host", "redis://host:99999", "redis://h:p", "http://x:1", ""}) {
    INFO(bad);
    try {
      dtensor::open_store(bad, std::chrono::seconds(1), "DTENSOR_STORE");
      FAIL("expected an error");
    } catch (const dtensor::InvalidArgument& e) {
      REQUIRE(std::string(e.what()).find("DTENSOR_STORE") != std::string::npos);
    }
  }
}

TEST_CASE("init chooses mpi when an MPI launcher started the process, gloo otherwise",
          "[init][mpi]") {
  {  // mpirun: no store needed, rank and size from its variables
    ScopedEnv env({{"OMPI_COMM_WORLD_RANK", "2"},
                   {"OMPI_COMM_WORLD_SIZE", "4"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}});
    auto r = resolve_init_options({});
    REQUIRE(r.backend == "mpi");
    REQUIRE(r.rank == 2);
    REQUIRE(r.world_size == 4);
    REQUIRE(r.local_rank == 0);
    REQUIRE(r.store.empty());
  }
  {  // PMIx alone gives the rank, not the size: MPI will
    ScopedEnv env(std::map<std::string, std::string>{{"PMIX_RANK", "1"}});
    auto r = resolve_init_options({});
    REQUIRE(r.backend == "mpi");
    REQUIRE(r.rank == 1);
    REQUIRE(r.world_size == -1);
  }
  {  // MPICH's PMI
    ScopedEnv env({{"PMI_RANK", "3"}, {"PMI_SIZE", "5"}});
    auto r = resolve_init_options({});
    REQUIRE(r.backend == "mpi");
    REQUIRE(r.rank == 3);
    REQUIRE(r.world_size == 5);
  }
  {  // dtensor-run inside an MPI allocation: Gloo, dtensor-run's numbers
    ScopedEnv env({{"OMPI_COMM_WORLD_SIZE", "4"},
                   {"OMPI_COMM_WORLD_RANK", "3"},
                   {"DTENSOR_RANK", "1"},
                   {"DTENSOR_WORLD_SIZE", "2"},
                   {"DTENSOR_STORE", "file:/tmp/y"}});
    auto r = resolve_init_options({});
    REQUIRE(r.backend == "gloo");
    REQUIRE(r.rank == 1);
    REQUIRE(r.world_size == 2);
  }
  {  // told otherwise: Gloo under mpirun, which then needs a store
    ScopedEnv env({{"OMPI_COMM_WORLD_SIZE", "4"},
                   {"OMPI_COMM_WORLD_RANK", "3"},
                   {"DTENSOR_BACKEND", "gloo"},
                   {"DTENSOR_STORE", "file:/tmp/y"}});
    auto r = resolve_init_options({});
    REQUIRE(r.backend == "gloo");
    REQUIRE(r.rank == 3);
    InitOptions o;
    o.backend = "mpi";
    REQUIRE(resolve_init_options(o).backend == "mpi");
  }
  {  // srun without an MPI plugin: Slurm's numbers, Gloo
    ScopedEnv env({{"SLURM_PROCID", "5"},
                   {"SLURM_NTASKS", "8"},
                   {"SLURM_LOCALID", "1"},
                   {"DTENSOR_STORE", "redis://127.0.0.1:6379"}});
    auto r = resolve_init_options({});
    REQUIRE(r.backend == "gloo");
    REQUIRE(r.rank == 5);
    REQUIRE(r.world_size == 8);
    REQUIRE(r.local_rank == 1);
  }
  {  // a one-rank program started alone stays on Gloo
    ScopedEnv env({});
    REQUIRE(resolve_init_options({}).backend == "gloo");
  }
}

TEST_CASE("init under MPI names a launcher variable that is out of range", "[init][mpi][errors]") {
  ScopedEnv env({{"PMI_RANK", "6"}, {"PMI_SIZE", "4"}});
  const std::string msg = error_of({});
  REQUIRE(msg.find("PMI_RANK=6 is outside [0, 4)") != std::string::npos);
}

TEST_CASE("init names DTENSOR_BACKEND and every loadable backend for an unknown one", "[init]") {
  ScopedEnv env(std::map<std::string, std::string>{{"DTENSOR_BACKEND", "nonsense"}});
  std::string error;
  try {
    dtensor::init_process_group();
    dtensor::destroy_process_group();
  } catch (const dtensor::InvalidArgument& e) {
    error = e.what();
  }
  INFO(error);
  CHECK(error.find("DTENSOR_BACKEND='nonsense': unknown backend 'nonsense'") != std::string::npos);
  CHECK(error.find("gloo") != std::string::npos);
  // The backends of this build's modules, loadable next to libdtensor.so.
  if (DTENSOR_TEST_MPI_MODULE) CHECK(error.find("mpi") != std::string::npos);
  if (DTENSOR_TEST_CUDA_MODULE) CHECK(error.find("nccl") != std::string::npos);
  dtensor::InitOptions o;
  o.backend = "cpu:bogus";
  try {
    dtensor::init_process_group(o);
    dtensor::destroy_process_group();
    error.clear();
  } catch (const dtensor::InvalidArgument& e) {
    error = e.what();
  }
  CHECK(error.find("InitOptions::backend='cpu:bogus': unknown backend 'bogus'") !=
        std::string::npos);
}
