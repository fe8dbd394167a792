#include "dtensor/core/distributed.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>

#include "core/detail/backend_plan.h"
#include "core/detail/device_module.h"
#include "core/detail/device_ops.h"
#include "core/detail/fault_monitor.h"
#include "core/detail/flight_recorder.h"
#include "core/detail/monitored_process_group.h"
#include "core/detail/output_on_stop.h"
#include "core/detail/routing_process_group.h"
#include "core/detail/simulated_link_process_group.h"
#include "core/detail/temp_dirs.h"
#include "core/detail/thread_oversubscription.h"
#include "core/detail/uncaught_failure.h"
#include "core/detail/validating_process_group.h"
#include "dtensor/core/comm_scope.h"
#include "dtensor/core/config.h"
#include "dtensor/core/errors.h"
#include "dtensor/core/logging.h"
#include "dtensor/core/profile.h"
#include "dtensor/core/store_url.h"

namespace dtensor {
namespace {

std::mutex g_mutex;
std::shared_ptr<ProcessGroup> g_world;
int g_local_rank = 0;
std::filesystem::path g_private_store_dir;  // created for a launcher-less single process
// A program that returns from main without destroy_process_group still
// removes its private store.
struct PrivateStoreRemover {
  ~PrivateStoreRemover() {
    std::error_code ec;
    if (!g_private_store_dir.empty()) std::filesystem::remove_all(g_private_store_dir, ec);
  }
} g_private_store_remover;
// DTENSOR_PROFILE=on: the rank whose profile is still to be printed (-1:
// none). destroy_process_group prints it; a program that returns from main
// without calling it gets its table at exit instead.
int g_profile_rank = -1;

void print_operator_profile() {
  std::lock_guard lock(g_mutex);
  if (g_profile_rank < 0) return;
  // One write, so that ranks sharing a terminal do not interleave their lines.
  std::cerr
      << fmt::format(
             "dtensor profile, rank {} (DTENSOR_PROFILE=on):\n{}dtensor kernels, rank {}:\n{}",
             g_profile_rank, format_operator_profile(operator_profile()), g_profile_rank,
             format_kernel_profile(kernel_profile()))
      << std::flush;
  g_profile_rank = -1;
}

void print_operator_profile_at_exit() {
  static std::once_flag once;
  std::call_once(once, [] { std::atexit(print_operator_profile); });
}
constexpr const char* kNcclBackend = "nccl";
constexpr const char* kMpiBackend = "mpi";
int g_world_generation = 0;  // every rank counts its worlds alike: fresh monitor keys per world

// Wraps `pg` for failure handling (core/detail/fault_monitor.h). The monitor
// gets a store connection of its own: it polls from its own thread.
std::shared_ptr<ProcessGroup> monitor_world(std::shared_ptr<ProcessGroup> pg, const ResolvedInit& r,
                                            const Config& cfg) {
  detail::reset_call_numbers();
  detail::FlightRecorder::configure(static_cast<std::size_t>(cfg.flight_recorder_size), r.rank);
  detail::FlightRecorder::write_on_sigusr1(cfg.flight_recorder_dir);
  // One rank has no peer to watch; a job without a store (backend mpi) is
  // watched by its MPI launcher, which ends the whole job when a rank fails.
  // Its layer comes all the same, without a monitor: the flight recorder and
  // the profile's communication time.
  if (r.world_size == 1 || r.store.empty())
    return detail::MonitoredProcessGroup::wrap(std::move(pg), nullptr, true);
  detail::MonitorSettings settings;
  settings.heartbeat_interval = cfg.heartbeat_interval;
  settings.heartbeat_timeout = cfg.heartbeat_timeout;
  // A stopped rank is named only if its watcher sees the heartbeats missing
  // before the others' calls time out; else every rank reports its own
  // timeout and the cause is lost. So the heartbeat timeout is at most half
  // of DTENSOR_TIMEOUT, with at least four beats in it.
  if (settings.heartbeat_timeout > r.timeout / 2) {
    settings.heartbeat_timeout = r.timeout / 2;
    settings.heartbeat_interval =
        std::min(settings.heartbeat_interval, settings.heartbeat_timeout / 4);
    log::info(
        "DTENSOR_TIMEOUT={:g} s is short: heartbeat timeout {:g} s and interval {:g} s "
        "(instead of {:g} s and {:g} s), so that a stopped rank is named before calls time "
        "out",
        r.timeout.count() / 1000.0, settings.heartbeat_timeout.count() / 1000.0,
        settings.heartbeat_interval.count() / 1000.0, cfg.heartbeat_timeout.count() / 1000.0,
        cfg.heartbeat_interval.count() / 1000.0);
  }
  settings.desync_delay = cfg.desync_check_delay;
  settings.recorder_dir = cfg.flight_recorder_dir;
  // Its store calls are bounded by a heartbeat interval (at least 1 s), not
  // DTENSOR_TIMEOUT: a frozen store must be noticed, and the job ended,
  // within the heartbeat timeout, not after a minute-long call.
  const auto monitor_timeout = std::min(
      r.timeout,
      std::max<std::chrono::milliseconds>(settings.heartbeat_interval, std::chrono::seconds(1)));
  auto monitor = detail::FaultMonitor::start(
      open_store(r.store, monitor_timeout), r.rank, r.world_size,
      "dtensor.monitor/world" + std::to_string(g_world_generation++), settings);
  detail::set_fault_monitor(monitor);
  detail::publish_uncaught_exceptions();
  return detail::MonitoredProcessGroup::wrap(std::move(pg), std::move(monitor), true);
}

// DTENSOR_SIM_LINK: the CPU backend's group behind a simulated link, inside
// the validating layer (which checks arguments and keeps messages to this
// rank off the link) and the fault monitor's (which records and handles
// failures as without it). Unset: no layer at all.
std::shared_ptr<ProcessGroup> simulate_link(std::shared_ptr<ProcessGroup> pg,
                                            const std::string& backend, const Config& cfg) {
  if (!cfg.sim_link || !pg) return pg;
  // Its delay thread posts sends while the caller's thread runs other calls:
  // MPI, initialised for serialized calls, does not take that.
  if (backend == kMpiBackend)
    throw NotSupported("init",
                       "DTENSOR_SIM_LINK: the simulated link posts sends from a thread of its own, "
                       "which backend mpi (serialized calls only) does not allow; use gloo");
  const Config::SimLink& link = *cfg.sim_link;
  log::info(
      "DTENSOR_SIM_LINK: messages between ranks go over a simulated link: {:g} us latency, {}",
      link.latency_us,
      link.gbit ? fmt::format("{:g} Gbit/s", *link.gbit) : std::string("unlimited bandwidth"));
  return detail::SimulatedLinkProcessGroup::wrap(std::move(pg), link);
}

std::map<std::string, ProcessGroupFactory>& factories() {
  static std::map<std::string, ProcessGroupFactory> f;
  return f;
}

// A backend name nobody registered: the message names where it came from
// and every backend this installation can load, the modules' included
// (loaded here to know: nccl with the CUDA module, mpi with the MPI module).
// Before the factories are looked up under g_mutex, which a module's
// registration takes.
void check_backends_known(const detail::BackendPlan& plan, const char* source,
                          const std::string& spec) {
  const auto registered = [](const std::string& name) {
    std::lock_guard lock(g_mutex);
    return factories().count(name) > 0;
  };
  for (const std::string& name : {plan.cpu, plan.cuda}) {
    if (name.empty() || name == kNcclBackend || name == kMpiBackend || registered(name)) continue;
    detail::load_device_module(DeviceType::CUDA);
    detail::load_module(detail::Module::Mpi);
    std::string names;
    {
      std::lock_guard lock(g_mutex);
      for (const auto& [n, factory] : factories())
        names += (names.empty() ? "" : ", ") + n;
    }
    throw InvalidArgument("init", fmt::format("{}='{}': unknown backend '{}' (this installation "
                                              "can load: {}; or a plan such as "
                                              "cpu:gloo,cuda:nccl, or auto)",
                                              source, spec, name, names));
  }
}

}  // namespace

void register_process_group_backend(const std::string& name, ProcessGroupFactory factory) {
  std::lock_guard lock(g_mutex);
  factories()[name] = std::move(factory);
}

namespace {

// The backend when neither InitOptions nor DTENSOR_BACKEND names one: "mpi"
// when an MPI launcher started this process (and dtensor-run, which sets
// DTENSOR_RANK, did not), else "gloo".
std::string default_backend(const Config& cfg) {
  const bool started_by_dtensor_run = cfg.rank.value && cfg.rank.source == "DTENSOR_RANK";
  return cfg.mpi_launcher && !started_by_dtensor_run ? kMpiBackend : "gloo";
}

// Backend mpi: MPI knows the rank and the size and needs no store; what the
// options or the launcher's variables say is only checked against it (-1:
// unknown here).
void resolve_under_mpi(const InitOptions& o, const Config& cfg, ResolvedInit& r) {
  r.rank = o.rank.value_or(cfg.rank.value.value_or(-1));
  r.world_size = o.world_size.value_or(cfg.world_size.value.value_or(-1));
  if (r.rank >= 0 && r.world_size >= 0)
    check_arg(r.rank < r.world_size, "init", "{}={} is outside [0, {})",
              o.rank ? "rank" : cfg.rank.source, r.rank, r.world_size);
  r.local_rank = o.local_rank.value_or(cfg.local_rank.value.value_or(std::max(r.rank, 0)));
  check_arg(r.local_rank >= 0, "init", "local rank must be >= 0, got {}", r.local_rank);
  r.store = o.store.value_or(cfg.store.value_or(""));
}

// Every other backend: rank and size from the options or the launcher, and a
// store to meet through.
void resolve_with_store(const InitOptions& o, const Config& cfg, ResolvedInit& r) {
  const EnvInt& env_rank = cfg.rank;
  const EnvInt& env_size = cfg.world_size;
  r.world_size = o.world_size.value_or(env_size.value.value_or(1));
  const std::string size_src = o.world_size     ? "world_size"
                               : env_size.value ? env_size.source
                                                : "world_size";
  check_arg(r.world_size >= 1, "init", "{} must be >= 1, got {}", size_src, r.world_size);

  if (o.rank) {
    r.rank = *o.rank;
  } else if (env_rank.value) {
    r.rank = *env_rank.value;
  } else {
    check_arg(r.world_size == 1, "init",
              "the rank is not set: set DTENSOR_RANK (dtensor-run does), RANK or "
              "OMPI_COMM_WORLD_RANK, or pass InitOptions::rank (world size is {})",
              r.world_size);
    r.rank = 0;
  }
  const std::string rank_src = o.rank ? "rank" : env_rank.value ? env_rank.source : "rank";
  check_arg(r.rank >= 0 && r.rank < r.world_size, "init", "{}={} is outside [0, {})", rank_src,
            r.rank, r.world_size);
  r.local_rank = o.local_rank.value_or(cfg.local_rank.value.value_or(r.rank));
  check_arg(r.local_rank >= 0, "init", "local rank must be >= 0, got {}", r.local_rank);

  if (o.store) {
    r.store = *o.store;
  } else if (cfg.store) {
    r.store = *cfg.store;
  } else {
    check_arg(r.world_size == 1, "init",
              "DTENSOR_STORE is not set: with {} ranks a rendezvous store is needed "
              "(file:DIR on one host, redis://HOST:PORT across hosts); dtensor-run sets it",
              r.world_size);
  }
  check_arg(r.world_size == 1 || !r.store.empty(), "init", "DTENSOR_STORE is empty");
}

}  // namespace

ResolvedInit resolve_init_options(const InitOptions& o) {
  ResolvedInit r;
  // Throws for any bad DTENSOR_* value, naming it.
  const Config& cfg = refresh_config_from_environment();
  r.backend = o.backend.value_or(cfg.backend.value_or(default_backend(cfg)));
  if (r.backend == kMpiBackend)
    resolve_under_mpi(o, cfg, r);
  else
    resolve_with_store(o, cfg, r);

  if (o.timeout)
    r.timeout = *o.timeout;
  else if (cfg.timeout)
    r.timeout = *cfg.timeout;
  check_arg(r.timeout.count() > 0, "init", "timeout must be positive");
  // A heartbeat timeout of one interval or less reports healthy ranks as
  // stalled: every job would die within seconds of its start.
  DTENSOR_CHECK_ARG(
      cfg.heartbeat_timeout > cfg.heartbeat_interval, "init",
      "DTENSOR_HEARTBEAT_TIMEOUT={:g} must be greater than DTENSOR_HEARTBEAT_INTERVAL={:g} "
      "(a few intervals: a rank is reported stalled when it misses the heartbeat timeout)",
      cfg.heartbeat_timeout.count() / 1000.0, cfg.heartbeat_interval.count() / 1000.0);

  r.hostname = o.hostname.value_or(cfg.hostname.value_or(""));
  r.iface = o.iface.value_or(cfg.ifname.value_or(""));
  return r;
}

std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& options) {
  ResolvedInit r = resolve_init_options(options);
  // First: a rank stopped during the rendezvous keeps what it printed too.
  detail::protect_output(config());
  // Only "auto" looks at the devices (loading the CUDA module to count them):
  // CPU-only programs never load it nor wake the driver.
  auto cuda_ops = r.backend == "auto" ? detail::find_device_ops(DeviceType::CUDA) : nullptr;
  const detail::BackendPlan plan =
      detail::plan_backends(r.backend, cuda_ops ? cuda_ops->device_count() : 0);
  // Backend nccl comes with the CUDA module: load it before the factories are
  // looked up (its registration takes g_mutex).
  const bool wants_nccl = plan.cpu == kNcclBackend || plan.cuda == kNcclBackend;
  if (wants_nccl) detail::load_device_module(DeviceType::CUDA);
  // Backend mpi is the MPI module's, loaded the same way.
  const bool wants_mpi = plan.cpu == kMpiBackend || plan.cuda == kMpiBackend;
  if (wants_mpi) detail::load_module(detail::Module::Mpi);
  check_backends_known(plan,
                       options.backend    ? "InitOptions::backend"
                       : config().backend ? "DTENSOR_BACKEND"
                                          : "the default backend",
                       r.backend);
  ProcessGroupFactory cpu_factory, cuda_factory;
  {
    std::lock_guard lock(g_mutex);
    check_arg(!g_world, "init", "init_process_group was already called");
    auto find = [](const std::string& name) {
      auto it = factories().find(name);
      if (it == factories().end() && name == kNcclBackend)
        throw NotSupported(
            "init", fmt::format("backend nccl: {}", detail::device_module_error(DeviceType::CUDA)));
      if (it == factories().end() && name == kMpiBackend)
        throw NotSupported(
            "init", fmt::format("backend mpi: {}", detail::module_error(detail::Module::Mpi)));
      check_arg(it != factories().end(), "init", "backend: unknown backend '{}'", name);
      return it->second;
    };
    cpu_factory = find(plan.cpu);
    if (plan.routed() && !plan.cuda_staged()) cuda_factory = find(plan.cuda);
  }
  // A rank picks its GPU from its local rank before any backend touches one
  // (a device module loaded later picks it when it registers).
  detail::set_device_local_rank(r.local_rank);
  if (r.store.empty() && !wants_mpi) {
    // One process started without a launcher: a private store it removes at
    // exit. Under $TMPDIR like the launcher's and the harness's directories,
    // with its owner recorded: what a killed or crashed one left behind is
    // removed by the next launch (this one first).
    temp_dirs::remove_abandoned();
    std::string tmpl = temp_dirs::temp_root() + "/dtensor-solo-XXXXXX";
    if (!mkdtemp(tmpl.data()))
      throw CommError("init", fmt::format("cannot create a temporary store directory {}", tmpl));
    temp_dirs::claim(tmpl);
    g_private_store_dir = tmpl;
    r.store = "file:" + tmpl;
  }
  if (r.rank >= 0) log::set_rank(r.rank);
  log::reload_level_from_env();
  detail::warn_if_oversubscribed(config());
  // MPI needs no store; one named anyway is opened (and so checked).
  auto store = r.store.empty()
                   ? nullptr
                   : open_store(r.store, r.timeout, options.store ? "store" : "DTENSOR_STORE");
  const BackendInit init{r.rank, r.world_size, r.local_rank, store, r.timeout, r.hostname, r.iface};
  // Every backend's group behind the one contract (validating_process_group.h).
  std::shared_ptr<ProcessGroup> pg =
      detail::ValidatingProcessGroup::wrap(simulate_link(cpu_factory(init), plan.cpu, config()));
  log::set_rank(pg->rank());
  // The router gets a layer of its own in front: a batch mixing devices is
  // then checked whole before either backend posts any of it.
  if (plan.routed())
    pg = detail::ValidatingProcessGroup::wrap(std::make_shared<detail::RoutingProcessGroup>(
        pg, cuda_factory ? detail::ValidatingProcessGroup::wrap(cuda_factory(init)) : nullptr));
  pg = monitor_world(std::move(pg), r, config());
  if (config().profile) {
    set_operator_profiling(true);
    print_operator_profile_at_exit();
  }
  log::info("initialised: rank {}/{} backend {} store {} job '{}'", pg->rank(), pg->size(),
            pg->backend_name(), r.store.empty() ? "(none)" : redact_store_url(r.store),
            config().job_id);
  std::lock_guard lock(g_mutex);
  g_world = pg;
  g_local_rank = r.local_rank;
  if (config().profile) g_profile_rank = pg->rank();
  return pg;
}

bool is_initialized() {
  std::lock_guard lock(g_mutex);
  return g_world != nullptr;
}

std::shared_ptr<ProcessGroup> world() {
  std::lock_guard lock(g_mutex);
  check_arg(g_world != nullptr, "init",
            "the process group is not initialised: call dtensor::init_process_group() first");
  return g_world;
}

int get_rank() {
  return world()->rank();
}
int get_world_size() {
  return world()->size();
}
int get_local_rank() {
  world();
  return g_local_rank;
}

void destroy_process_group() {
  std::shared_ptr<ProcessGroup> pg;
  {
    std::lock_guard lock(g_mutex);
    pg = std::move(g_world);
  }
  // Before the final barrier, which is no call of the program's.
  print_operator_profile();
  if (pg) {
    try {
      pg->barrier();
    } catch (const std::exception& e) {
      log::warn("final barrier failed: {}", e.what());
    }
  }
  if (auto monitor = detail::fault_monitor()) {
    monitor->stop(/*left=*/true, std::chrono::seconds(2));
    detail::set_fault_monitor(nullptr);
  }
  pg.reset();
  if (!g_private_store_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(g_private_store_dir, ec);
    g_private_store_dir.clear();
  }
}

}  // namespace dtensor
