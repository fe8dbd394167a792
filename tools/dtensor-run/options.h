// Command line of dtensor-run, parsed and validated apart from running
// anything, so that the tests can check every rule without starting processes.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace dtensor::run {

/// Exit codes, documented in help_text(). Values follow the shell and
/// coreutils `timeout` conventions so that scripts can tell them apart.
namespace exit_code {
constexpr int kOk = 0;
constexpr int kUsage = 2;
constexpr int kDeadline = 124;  // --deadline passed (as `timeout`)
constexpr int kLauncher = 125;  // dtensor-run itself failed (as `timeout`)
constexpr int kNotExecutable = 126;
constexpr int kNotFound = 127;
constexpr int kSignalBase = 128;  // + the signal number
}  // namespace exit_code

struct Options {
  int nproc = 0;      // -n: processes started on this node
  int nnodes = 1;     // --nnodes
  int node_rank = 0;  // --node-rank
  /// The store: --store, else the first line of --store-file, else
  /// DTENSOR_STORE of our environment (the last two keep a Redis password
  /// off the command line, which `ps` shows to every user); empty: a private
  /// file store per job, removed at the end.
  std::string store;
  /// --timeout as the user wrote it (validated); becomes DTENSOR_TIMEOUT.
  std::optional<std::string> timeout;
  /// --deadline: the whole job is stopped after this long.
  std::optional<std::chrono::milliseconds> deadline;
  /// --job-id: the job's namespace in the store ([A-Za-z0-9._-], 1-128
  /// characters); the same on every node of a job.
  std::optional<std::string> job_id;
  /// --bind-cores: each local rank runs on its own slice of the CPUs.
  bool bind_cores = false;
  bool help = false;
  std::vector<std::string> command;  // PROGRAM ARGS...

  int world_size() const { return nnodes * nproc; }
  int global_rank(int local_rank) const { return node_rank * nproc + local_rank; }
};

/// A mistake on the command line. The message names the offending argument.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// An environment variable's value, or null when unset.
using EnvLookup = std::function<const char*(const char*)>;

/// Parses the arguments after argv[0], with `env` for DTENSOR_STORE (the
/// process's environment by default). Throws UsageError. With --help the
/// other rules are not checked (help.help is set and nothing else matters).
Options parse_options(const std::vector<std::string>& args, const EnvLookup& env);
Options parse_options(const std::vector<std::string>& args);

/// The environment of one local rank. `store_url` is the store actually used
/// (the private one when Options::store is empty).
std::map<std::string, std::string> rank_environment(const Options& o, int local_rank,
                                                    const std::string& store_url);

/// One line: "usage: dtensor-run -n P ...".
std::string usage_line();
/// The full --help text.
std::string help_text();

}  // namespace dtensor::run
