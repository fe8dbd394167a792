// Process-group lifecycle: what a program calls first and last.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "dtensor/core/process_group.h"
#include "dtensor/core/store.h"

namespace dtensor {

struct InitOptions {
  /// Which backend serves which tensors. Unset: DTENSOR_BACKEND, else "mpi"
  /// when an MPI launcher (mpirun, mpiexec, srun with PMI/PMIx) started the
  /// process and dtensor-run did not, else "gloo".
  ///   "gloo"                CPU tensors only (the default);
  ///   "mpi"                 CPU tensors over MPI: the module libdtensor-mpi.so
  ///                         (docs/backends.md); rank and size are MPI's, no store;
  ///   "nccl"                = "cpu:gloo,cuda:nccl": CPU tensors over Gloo, CUDA over NCCL;
  ///   "cpu:gloo,cuda:gloo"  CUDA tensors staged through host memory over Gloo
  ///                         (no NCCL, or several ranks sharing one GPU);
  ///   "auto"                "nccl" when a GPU is visible, else "gloo".
  /// See docs/backends-cuda.md.
  std::optional<std::string> backend{};
  /// Unset fields come from the environment: DTENSOR_RANK / DTENSOR_WORLD_SIZE /
  /// DTENSOR_LOCAL_RANK / DTENSOR_STORE / DTENSOR_TIMEOUT (set by dtensor-run), else
  /// torchrun's RANK / WORLD_SIZE / LOCAL_RANK (+ MASTER_ADDR/MASTER_PORT ignored: a
  /// store URL is required), else OpenMPI's OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK,
  /// PMI_RANK / PMI_SIZE, PMIX_RANK, Slurm's SLURM_PROCID / SLURM_NTASKS /
  /// SLURM_LOCALID (docs/launcher.md). Backend "mpi" takes rank and size from
  /// MPI and only checks these against it.
  std::optional<int> rank{};
  std::optional<int> world_size{};
  std::optional<int> local_rank{};
  /// "file:DIR" or "redis://HOST:PORT".
  std::optional<std::string> store{};
  /// Bound on every rendezvous and communication step (default 300 s).
  std::optional<std::chrono::milliseconds> timeout{};
  /// Address Gloo binds to: loopback unless a hostname or interface is named
  /// (DTENSOR_HOSTNAME / DTENSOR_IFNAME), so nothing listens outside the host by default.
  std::optional<std::string> hostname{};
  std::optional<std::string> iface{};
};

/// The settings init_process_group resolved (options first, then the environment).
struct ResolvedInit {
  std::string backend{};
  int rank = 0;        // backend "mpi": -1 when only MPI knows it
  int world_size = 1;  // likewise
  int local_rank = 0;
  std::string store{};
  std::chrono::milliseconds timeout{300000};
  std::string hostname{};
  std::string iface{};
};
/// Resolves without connecting (exposed for tests and tools). InvalidArgument
/// names the variable or option at fault.
ResolvedInit resolve_init_options(const InitOptions& options);

/// Connects this process to the world group. Throws on a second call.
std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& options = {});
bool is_initialized();
/// The world group (InvalidArgument if init_process_group was not called).
std::shared_ptr<ProcessGroup> world();
int get_rank();
int get_world_size();
int get_local_rank();
/// Synchronises (a final barrier, so a fast rank does not break slow ones) and
/// releases the world group. Safe to call twice; never throws.
void destroy_process_group();

/// Backends register a factory under their name.
struct BackendInit {
  int rank{}, world_size{};
  int local_rank{};
  std::shared_ptr<Store> store{};
  std::chrono::milliseconds timeout{};
  std::string hostname{}, iface{};
};
using ProcessGroupFactory = std::function<std::shared_ptr<ProcessGroup>(const BackendInit&)>;
void register_process_group_backend(const std::string& name, ProcessGroupFactory factory);

}  // namespace dtensor
