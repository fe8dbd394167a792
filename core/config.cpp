#include "dtensor/core/config.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "core/detail/trim_spaces.h"
#include "core/detail/whole_integer.h"
#include "dtensor/core/errors.h"

namespace dtensor {
namespace {

constexpr const char* kComponent = "config";
using Lookup = std::function<const char*(const char*)>;

// An unset or empty variable means "the default".
const char* get(const Lookup& lookup, const char* name) {
  const char* v = lookup(name);
  return v && *v ? v : nullptr;
}

std::int64_t integer(const Lookup& lookup, const char* name, std::int64_t dflt, std::int64_t min) {
  const char* v = get(lookup, name);
  if (!v) return dflt;
  const std::optional<std::int64_t> out = detail::whole_integer(v);
  check_arg(out && *out >= min, kComponent, "{}='{}' is not an integer >= {} (default {})", name, v,
            min, dflt);
  return *out;
}

bool flag(const Lookup& lookup, const char* name, bool dflt) {
  const char* v = get(lookup, name);
  if (!v) return dflt;
  const std::string s = v;
  check_arg(s == "0" || s == "1", kComponent, "{}='{}': accepted values are 0 and 1 (default {})",
            name, v, dflt ? 1 : 0);
  return s == "1";
}

template <typename T>
T choice(const Lookup& lookup, const char* name,
         std::initializer_list<std::pair<const char*, T>> opts, T dflt) {
  const char* v = get(lookup, name);
  if (!v) return dflt;
  std::string accepted;
  for (const auto& [text, value] : opts) {
    if (std::string(v) == text) return value;
    accepted += (accepted.empty() ? "" : " | ") + std::string(text);
  }
  throw InvalidArgument(kComponent,
                        fmt::format("{}='{}': accepted values are {}", name, v, accepted));
}

std::optional<std::string> text(const Lookup& lookup, const char* name) {
  const char* v = get(lookup, name);
  return v ? std::optional<std::string>(v) : std::nullopt;
}

// The first of `names` that is set wins (launchers spell the rank differently).
EnvInt first_int(const Lookup& lookup, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    const char* v = lookup(n);
    if (!v) continue;
    const std::optional<std::int64_t> out = detail::whole_integer(v);
    check_arg(
        out && *out >= std::numeric_limits<int>::min() && *out <= std::numeric_limits<int>::max(),
        "init", "environment variable {}='{}' is not an integer", n, v);
    return {static_cast<int>(*out), n};
  }
  return {};
}

std::optional<std::chrono::milliseconds> seconds(const Lookup& lookup, const char* name) {
  const char* t = lookup(name);
  if (!t) return std::nullopt;
  char* end = nullptr;
  const double secs = std::strtod(t, &end);
  // Finite and bounded too: "inf" or "1e300" seconds would overflow the
  // conversion to milliseconds (undefined behaviour).
  constexpr double kMaxSeconds = 1e9;  // ~31 years: "no timeout" for any real job
  check_arg(
      end && *end == '\0' && end != t && std::isfinite(secs) && secs > 0 && secs <= kMaxSeconds,
      "init", "{}='{}' is not a positive number of seconds (at most {:g})", name, t, kMaxSeconds);
  return std::chrono::milliseconds(static_cast<std::int64_t>(secs * 1000));
}

// A launcher's job id as a store namespace: the characters the store keys
// and file names allow, the rest as '_'.
std::string sanitized_job_id(std::string_view id) {
  std::string out(id.substr(0, 128));
  for (char& c : out)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
  return out;
}

void read_job(const Lookup& lookup, Config& c) {
  if (const char* v = get(lookup, "DTENSOR_JOB_ID")) {
    const std::string id = v;
    DTENSOR_CHECK_ARG(
        id.size() <= 128 && sanitized_job_id(id) == id, kComponent,
        "DTENSOR_JOB_ID='{}': accepted values are 1 to 128 characters of [A-Za-z0-9._-]",
        id.substr(0, 200));
    c.job_id = id;
    c.job_id_source = "DTENSOR_JOB_ID";
  } else if (const char* t = get(lookup, "TORCHELASTIC_RUN_ID"); t && std::string(t) != "none") {
    c.job_id = "torchrun." + sanitized_job_id(t);
    c.job_id_source = "TORCHELASTIC_RUN_ID";
  } else if (const char* s = get(lookup, "SLURM_JOB_ID")) {
    const char* step = get(lookup, "SLURM_STEP_ID");
    c.job_id = "slurm." + sanitized_job_id(std::string(s) + (step ? "." + std::string(step) : ""));
    c.job_id_source = "SLURM_JOB_ID";
  } else if (const char* p = get(lookup, "PMIX_NAMESPACE")) {
    c.job_id = "pmix." + sanitized_job_id(p);
    c.job_id_source = "PMIX_NAMESPACE";
  }
  if (const char* token = get(lookup, "DTENSOR_JOB_TOKEN")) {
    // The value is a secret: the message gives its length, never the value.
    DTENSOR_CHECK_ARG(std::strlen(token) >= 16, kComponent,
                      "DTENSOR_JOB_TOKEN is {} characters long: a job token must have at least 16 "
                      "(dtensor-run generates 64)",
                      std::strlen(token));
    c.job_token = token;
  }
}

// DTENSOR_WAIT_SPIN_US: auto (unset, empty) or microseconds, at most a second.
std::optional<std::int64_t> wait_spin(const Lookup& lookup) {
  constexpr const char* kName = "DTENSOR_WAIT_SPIN_US";
  const char* v = get(lookup, kName);
  if (!v || std::string_view(v) == "auto") return std::nullopt;
  const std::optional<std::int64_t> out = detail::whole_integer(v);
  check_arg(out && *out >= 0 && *out <= 1000000, kComponent,
            "{}='{}': accepted values are auto and an integer from 0 to 1000000 (microseconds)",
            kName, v);
  return out;
}

// DTENSOR_SIM_LINK: comma-separated key=value pairs, each key at most once.
std::optional<Config::SimLink> read_sim_link(const Lookup& lookup) {
  constexpr const char* kName = "DTENSOR_SIM_LINK";
  const char* v = get(lookup, kName);
  if (!v) return std::nullopt;
  const auto fail = [&](std::string_view why) {
    return InvalidArgument(
        kComponent,
        fmt::format(
            "{}='{}': {} (accepted: latency_us=MICROSECONDS (0 to 1e9) and/or gbit=GBIT_PER_S "
            "> 0, comma-separated, e.g. latency_us=500,gbit=10)",
            kName, v, why));
  };
  // A finite number, the whole of `s`.
  const auto number = [&](std::string_view key, const std::string& s) {
    char* end = nullptr;
    const double x = std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(x))
      throw fail(fmt::format("{}='{}' is not a number", key, s));
    return x;
  };
  Config::SimLink link;
  bool seen_latency = false, seen_gbit = false;
  std::string_view rest = v;
  while (true) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = detail::trim_spaces(rest.substr(0, comma));
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos) throw fail(fmt::format("'{}' is not key=value", item));
    const std::string_view key = detail::trim_spaces(item.substr(0, eq));
    const std::string value(detail::trim_spaces(item.substr(eq + 1)));
    if (key == "latency_us") {
      if (seen_latency) throw fail("latency_us is given twice");
      seen_latency = true;
      link.latency_us = number(key, value);
      // At most 1e9 us (~17 min): a link no benchmark wants, and no overflow.
      if (link.latency_us < 0 || link.latency_us > 1e9)
        throw fail(fmt::format("latency_us={} is not between 0 and 1e9", value));
    } else if (key == "gbit") {
      if (seen_gbit) throw fail("gbit is given twice");
      seen_gbit = true;
      link.gbit = number(key, value);
      if (*link.gbit <= 0) throw fail(fmt::format("gbit={} is not > 0", value));
    } else {
      throw fail(fmt::format("unknown key '{}'", key));
    }
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return link;
}

struct Current {
  std::mutex mutex;
  bool overridden = false;  // set_config was called: the environment no longer counts
  // Every configuration ever set stays alive: config() hands out references.
  std::vector<std::unique_ptr<Config>> history;
};
Current& current() {
  static auto* c = new Current();  // never destroyed: read by other statics' destructors
  return *c;
}

}  // namespace

Config Config::from(const Lookup& lookup) {
  Config c;
  c.log_level = choice<std::string>(lookup, "DTENSOR_LOG_LEVEL",
                                    {{"trace", "trace"},
                                     {"debug", "debug"},
                                     {"info", "info"},
                                     {"warn", "warn"},
                                     {"error", "error"},
                                     {"critical", "critical"},
                                     {"off", "off"}},
                                    c.log_level);
  c.debug = flag(lookup, "DTENSOR_DEBUG", c.debug);
  c.check_agreement = flag(lookup, "DTENSOR_CHECK_AGREEMENT", c.check_agreement);
  c.profile = choice(lookup, "DTENSOR_PROFILE", {{"on", true}, {"off", false}}, c.profile);
  c.cpu_cache_mb = integer(lookup, "DTENSOR_CPU_CACHE_MB", c.cpu_cache_mb, 0);
  c.onednn_band_kb = integer(lookup, "DTENSOR_ONEDNN_BAND_KB", c.onednn_band_kb, 0);
  c.halo_fusion =
      choice(lookup, "DTENSOR_HALO_FUSION", {{"on", true}, {"off", false}}, c.halo_fusion);
  c.cudnn_workspace_mb = integer(lookup, "DTENSOR_CUDNN_WORKSPACE_MB", c.cudnn_workspace_mb, 1);
  c.gloo_loop = choice(lookup, "DTENSOR_GLOO_LOOP",
                       {{"batch", GlooLoop::Batch}, {"normal", GlooLoop::Normal}}, c.gloo_loop);
  c.gloo_shm = choice(lookup, "DTENSOR_GLOO_SHM", {{"on", true}, {"off", false}}, c.gloo_shm);
  c.wait_spin_us = wait_spin(lookup);
  c.cuda_module = text(lookup, "DTENSOR_CUDA_MODULE");
  c.mpi_module = text(lookup, "DTENSOR_MPI_MODULE");
  c.backend = text(lookup, "DTENSOR_BACKEND");
  c.store = lookup("DTENSOR_STORE") ? std::optional<std::string>(lookup("DTENSOR_STORE"))
                                    : std::nullopt;  // set but empty is an error at init
  c.timeout = seconds(lookup, "DTENSOR_TIMEOUT");
  c.hostname = text(lookup, "DTENSOR_HOSTNAME");
  c.ifname = text(lookup, "DTENSOR_IFNAME");
  c.heartbeat_interval =
      seconds(lookup, "DTENSOR_HEARTBEAT_INTERVAL").value_or(c.heartbeat_interval);
  c.heartbeat_timeout = seconds(lookup, "DTENSOR_HEARTBEAT_TIMEOUT").value_or(c.heartbeat_timeout);
  c.desync_check_delay =
      seconds(lookup, "DTENSOR_DESYNC_CHECK_DELAY").value_or(c.desync_check_delay);
  c.flight_recorder_size =
      integer(lookup, "DTENSOR_FLIGHT_RECORDER_SIZE", c.flight_recorder_size, 0);
  if (auto dir = text(lookup, "DTENSOR_FLIGHT_RECORDER_DIR"))
    c.flight_recorder_dir = *dir;
  else if (auto tmp = text(lookup, "TMPDIR"))
    c.flight_recorder_dir = *tmp;
  // dtensor-run's, torchrun's, then the MPI launchers' (OpenMPI, MPICH's PMI,
  // PMIx) and Slurm's srun spellings.
  c.rank = first_int(lookup, {"DTENSOR_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                              "PMIX_RANK", "SLURM_PROCID"});
  c.world_size = first_int(lookup, {"DTENSOR_WORLD_SIZE", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE",
                                    "PMI_SIZE", "SLURM_NTASKS"});
  c.local_rank =
      first_int(lookup, {"DTENSOR_LOCAL_RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                         "MPI_LOCALRANKID", "SLURM_LOCALID"});
  c.local_world_size = first_int(lookup, {"DTENSOR_LOCAL_WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                          "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"});
  if (const char* omp = lookup("OMP_NUM_THREADS")) {
    // "8" or "8,4" (per nesting level): the first level is what a rank runs.
    int threads = 0;
    const char* end = omp + std::strlen(omp);
    const auto [p, ec] = std::from_chars(omp, end, threads);
    if (ec == std::errc() && p != omp && (p == end || *p == ',') && threads > 0)
      c.omp_num_threads = threads;
  }
  read_job(lookup, c);
  c.stdout_buffering = choice(lookup, "DTENSOR_STDOUT_BUFFERING",
                              {{"auto", Config::StdoutBuffering::Auto},
                               {"line", Config::StdoutBuffering::Line},
                               {"unchanged", Config::StdoutBuffering::Unchanged}},
                              c.stdout_buffering);
  c.flush_on_stop = flag(lookup, "DTENSOR_FLUSH_ON_STOP", c.flush_on_stop);
  c.sim_link = read_sim_link(lookup);
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (lookup(name)) {
      c.mpi_launcher = name;
      break;
    }
  return c;
}

Config Config::from_environment() {
  return from([](const char* name) -> const char* { return std::getenv(name); });
}

Config Config::from(const std::map<std::string, std::string>& vars) {
  return from([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

const Config& config() {
  auto& c = current();
  std::lock_guard lock(c.mutex);
  if (c.history.empty()) c.history.push_back(std::make_unique<Config>(Config::from_environment()));
  return *c.history.back();
}

void set_config(const Config& cfg) {
  auto& c = current();
  std::lock_guard lock(c.mutex);
  c.history.push_back(std::make_unique<Config>(cfg));
  c.overridden = true;
}

bool config_overridden() {
  auto& c = current();
  std::lock_guard lock(c.mutex);
  return c.overridden;
}

const Config& use_environment_config() {
  const Config fresh = Config::from_environment();  // throws before anything changes
  auto& c = current();
  std::lock_guard lock(c.mutex);
  c.overridden = false;
  c.history.push_back(std::make_unique<Config>(fresh));
  return *c.history.back();
}

const Config& refresh_config_from_environment() {
  if (config_overridden()) return config();
  return use_environment_config();
}

}  // namespace dtensor
