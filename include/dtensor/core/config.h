// The library's run-time configuration: every DTENSOR_* environment variable
// (and the launchers' rank variables) read in ONE place, validated, into a
// typed struct. A bad value is an InvalidArgument naming the variable and the
// values it accepts. docs/configuration.md is the table.
//
// config() reads the environment on first use (and init_process_group reads
// it again: the launcher's variables belong to the job being started);
// set_config() replaces the whole configuration (tests, programs that
// configure themselves), and Config::from() builds one from any set of
// variables.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

namespace dtensor {

/// A launcher-provided integer and the variable it came from (for messages).
struct EnvInt {
  std::optional<int> value{};
  std::string source{};
};

struct Config {
  // ---- logging and checks ----
  /// DTENSOR_LOG_LEVEL: trace | debug | info | warn | error | critical | off.
  std::string log_level = "warn";
  /// DTENSOR_DEBUG: 0 | 1. Agreement failures list every rank's call.
  bool debug = false;
  /// DTENSOR_CHECK_AGREEMENT: 0 | 1. The cross-rank check of every dispatch.
  bool check_agreement = true;
  /// DTENSOR_PROFILE: on | off. init_process_group turns the operator
  /// profile on (dtensor/core/profile.h); destroy_process_group prints each
  /// rank's table to stderr (the process's exit, if it never calls it).
  bool profile = false;

  // ---- memory and kernels ----
  /// DTENSOR_CPU_CACHE_MB: integer >= 0. Freed CPU buffers kept for reuse.
  std::int64_t cpu_cache_mb = 512;
  /// DTENSOR_HALO_FUSION: on | off. Chains of window layers exchange their
  /// combined halo once (dtensor/ops/halo_chain.h) where the cost model says
  /// it pays; off: every layer exchanges its own.
  bool halo_fusion = true;
  /// DTENSOR_ONEDNN_BAND_KB: integer >= 0. oneDNN band budget (0: no bands).
  std::int64_t onednn_band_kb = 512;
  /// DTENSOR_CUDNN_WORKSPACE_MB: integer >= 1. cuDNN scratch bound.
  std::int64_t cudnn_workspace_mb = 1024;
  /// DTENSOR_GLOO_LOOP: batch | normal. Scheduling class of Gloo's event loop.
  enum class GlooLoop { Batch, Normal };
  GlooLoop gloo_loop = GlooLoop::Batch;
  /// DTENSOR_GLOO_SHM: on | off. Point-to-point messages between ranks on
  /// one host go through shared memory (off: Gloo's TCP pairs).
  bool gloo_shm = true;
  /// DTENSOR_WAIT_SPIN_US: auto | integer 0 to 1000000. How long a rank
  /// waiting for a message through shared memory spins before it sleeps.
  /// Unset (auto): 3000 when the ranks on this host times their threads fit
  /// its cores, a cgroup CPU quota counted (a rank has a core of its own),
  /// else 50 (core/detail/wait_spin.h).
  std::optional<std::int64_t> wait_spin_us{};
  /// DTENSOR_CUDA_MODULE: path of libdtensor-cuda.so. Unset: next to
  /// libdtensor.so, then the install libdir (docs/architecture.md).
  std::optional<std::string> cuda_module{};
  /// DTENSOR_MPI_MODULE: path of libdtensor-mpi.so. Unset: as the CUDA module.
  std::optional<std::string> mpi_module{};

  // ---- launch (init_process_group; InitOptions fields win) ----
  /// DTENSOR_BACKEND: a backend name or plan (validated by init_process_group).
  std::optional<std::string> backend{};
  /// DTENSOR_STORE: file:DIR or redis://HOST:PORT.
  std::optional<std::string> store{};
  /// DTENSOR_TIMEOUT: seconds, > 0 and at most 1e9.
  std::optional<std::chrono::milliseconds> timeout{};
  /// DTENSOR_HOSTNAME, DTENSOR_IFNAME: how peers reach this rank.
  std::optional<std::string> hostname{}, ifname{};
  // ---- failure detection (docs/troubleshooting.md) ----
  /// DTENSOR_HEARTBEAT_INTERVAL: seconds > 0. How often a rank says it is alive.
  std::chrono::milliseconds heartbeat_interval{2000};
  /// DTENSOR_HEARTBEAT_TIMEOUT: seconds > 0. A rank silent this long is stalled.
  std::chrono::milliseconds heartbeat_timeout{20000};
  /// DTENSOR_DESYNC_CHECK_DELAY: seconds > 0. How long a wait lasts before the
  /// ranks compare which call each is in.
  std::chrono::milliseconds desync_check_delay{3000};
  /// DTENSOR_FLIGHT_RECORDER_SIZE: integer >= 0. Communication calls kept per rank (0: off).
  std::int64_t flight_recorder_size = 512;
  /// DTENSOR_FLIGHT_RECORDER_DIR: where ranks write their recorder (default $TMPDIR, else /tmp).
  std::string flight_recorder_dir = "/tmp";

  /// The first set of DTENSOR_RANK, RANK, OMPI_COMM_WORLD_RANK, PMI_RANK,
  /// PMIX_RANK, SLURM_PROCID; DTENSOR_WORLD_SIZE, WORLD_SIZE,
  /// OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS; DTENSOR_LOCAL_RANK,
  /// LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID.
  EnvInt rank{}, world_size{}, local_rank{};
  /// Ranks on this host: the first set of DTENSOR_LOCAL_WORLD_SIZE (dtensor-run,
  /// the test harness), LOCAL_WORLD_SIZE (torchrun), OMPI_COMM_WORLD_LOCAL_SIZE,
  /// MPI_LOCALNRANKS. Unset: not known (no oversubscription warning).
  EnvInt local_world_size{};
  /// OMP_NUM_THREADS when its first value is a positive integer (OpenMP's own
  /// variable: anything else is left to OpenMP, not refused here). Unset: each
  /// rank's OpenMP runs one thread per core it can see.
  std::optional<int> omp_num_threads{};
  /// The variable showing that an MPI launcher (mpirun, mpiexec, srun with
  /// PMI/PMIx) started this process: the first set of OMPI_COMM_WORLD_SIZE,
  /// PMI_SIZE, PMIX_RANK. With it, and without dtensor-run's DTENSOR_RANK,
  /// init_process_group chooses backend "mpi" unless told otherwise.
  std::optional<std::string> mpi_launcher{};

  // ---- the job (the store's namespace and its rendezvous token) ----
  /// The job's id: every store key lives under it, so that two jobs on one
  /// store, or the stale keys of a crashed job, never meet. The first set of
  /// DTENSOR_JOB_ID (dtensor-run sets a fresh one; [A-Za-z0-9._-], 1-128
  /// characters), TORCHELASTIC_RUN_ID (torchrun, unless "none"),
  /// SLURM_JOB_ID (+ "." SLURM_STEP_ID), PMIX_NAMESPACE (Open MPI); else
  /// "default". Characters outside [A-Za-z0-9._-] of the launchers' ids become '_'.
  std::string job_id = "default";
  /// The variable job_id came from ("" for the default), for messages.
  std::string job_id_source{};
  /// DTENSOR_JOB_TOKEN: a secret of at least 16 characters shared by the
  /// job's ranks (dtensor-run generates one). Rendezvous values are signed
  /// with it and a process without it is refused. Never printed.
  std::optional<std::string> job_token{};

  // ---- benchmarks ----
  /// A simulated link between ranks (core/detail/simulated_link_process_group.h).
  struct SimLink {
    /// One-way latency of every message, microseconds (>= 0).
    double latency_us = 0;
    /// Bandwidth of each link, Gbit/s (> 0); unset: unlimited.
    std::optional<double> gbit{};
  };
  /// DTENSOR_SIM_LINK: "latency_us=L,gbit=G", either key optional. A
  /// benchmark aid: every message of the CPU backend is delayed as on a link
  /// of that latency and bandwidth. Unset or empty: off (no layer at all).
  std::optional<SimLink> sim_link{};

  // ---- output of a rank ----
  /// DTENSOR_STDOUT_BUFFERING: auto | line | unchanged. auto: stdout is made
  /// line-buffered by init_process_group when it is a pipe (under a launcher),
  /// so that no finished line is lost when the rank is stopped.
  enum class StdoutBuffering { Auto, Line, Unchanged };
  StdoutBuffering stdout_buffering = StdoutBuffering::Auto;
  /// DTENSOR_FLUSH_ON_STOP: 0 | 1. init_process_group arranges that SIGTERM
  /// (when the program has no handler of its own) and an uncaught exception
  /// flush stdio before the process ends.
  bool flush_on_stop = true;

  /// Reads and validates the process's environment.
  static Config from_environment();
  /// The same from `lookup` (nullptr: unset), e.g. a map in a test.
  static Config from(const std::function<const char*(const char*)>& lookup);
  static Config from(const std::map<std::string, std::string>& vars);
};

/// The process's configuration (from_environment() on first use; throws its
/// InvalidArgument there, and again on every later call, until fixed by set_config).
const Config& config();
/// Replaces the process's configuration; the environment no longer counts.
void set_config(const Config& c);
/// Whether set_config has been called (and not undone by use_environment_config).
bool config_overridden();
/// Goes back to the environment: reads it now and uses it from here on.
const Config& use_environment_config();
/// What init_process_group calls: the launcher's variables belong to the job
/// being started, so the environment is read again, unless set_config took
/// its place.
const Config& refresh_config_from_environment();

}  // namespace dtensor
