#include "tools/dtensor-run/options.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <optional>
#include <utility>

#include <CLI/CLI.hpp>

#include "dtensor/core/store_url.h"

namespace dtensor::run {
namespace {

// A flag given a value ("--bind-cores=1"), set aside for CLI11 as an argument
// it will not read.
constexpr char kFlagWithValue = '\x1f';

// Caps that catch typos (-n 40000) before they fork thousands of processes;
// far above what one host or one job of this library uses.
constexpr int kMaxProcs = 4096;
constexpr int kMaxNodes = 65536;

int parse_count(const std::string& name, const std::string& value, int min, int max) {
  int out = 0;
  const char* end = value.data() + value.size();
  auto [p, ec] = std::from_chars(value.data(), end, out);
  if (value.empty() || p != end || (ec != std::errc() && ec != std::errc::result_out_of_range))
    throw UsageError(name + ": '" + value + "' is not a whole number");
  if (ec == std::errc::result_out_of_range || out < min || out > max)
    throw UsageError(name + ": " + value + " is out of range (" + std::to_string(min) + " to " +
                     std::to_string(max) + ")");
  return out;
}

// At most ~31 years, the library's own bound on DTENSOR_TIMEOUT: found by the
// fuzzer, "--deadline 4e41" overflowed the conversion to milliseconds
// (undefined behaviour), and "--timeout 1e300" passed here only for every
// rank to refuse it.
constexpr double kMaxSeconds = 1e9;

double parse_seconds(const std::string& name, const std::string& value) {
  char* end = nullptr;
  const double s = std::strtod(value.c_str(), &end);
  if (value.empty() || end != value.c_str() + value.size() || !std::isfinite(s) || s <= 0 ||
      s > kMaxSeconds)
    throw UsageError(name + ": '" + value + "' is not a positive number of seconds (at most 1e9)");
  return s;
}

// The forms the library's open_store accepts (the same parser,
// include/dtensor/core/store_url.h), checked here so that a typo fails before
// any process starts. Unlike the library, a plain path needs its "file:".
void check_store(const std::string& name, const std::string& url) {
  const StoreUrl u = parse_store_url(url);
  const std::string shown = redact_store_url(url);
  if (url.rfind("redis://", 0) == 0 || url.rfind("rediss://", 0) == 0) {
    if (u.problem == StoreUrl::Problem::BadPort)
      throw UsageError(name + ": '" + shown + "': port " + std::to_string(u.port) +
                       " is out of range");
    if (u.problem == StoreUrl::Problem::BadCredentials)
      throw UsageError(name + ": '" + shown +
                       "': the credentials before '@' must be USER:PASSWORD or :PASSWORD");
    if (u.kind != StoreUrl::Kind::Redis)
      throw UsageError(name + ": '" + shown +
                       "' is not a valid Redis URL (expected redis://[USER:PASSWORD@]HOST:PORT)");
    return;
  }
  if (url.rfind("file:", 0) == 0) {
    if (u.kind != StoreUrl::Kind::File)
      throw UsageError(name + ": '" + url + "' names no directory (expected file:DIR)");
    return;
  }
  throw UsageError(name + ": '" + shown +
                   "' is not a store (expected file:DIR or redis://HOST:PORT)");
}

// --store-file FILE: the URL on its first line (a trailing '\r' dropped).
std::string read_store_file(const std::string& file) {
  std::ifstream in(file);
  std::string line;
  if (!in || !std::getline(in, line))
    throw UsageError("--store-file: cannot read '" + file + "'" + (in ? "" : " (no such file?)"));
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (line.empty())
    throw UsageError("--store-file: the first line of '" + file +
                     "' is empty (it must be the "
                     "store URL)");
  check_store("--store-file", line);
  return line;
}

}  // namespace

Options parse_options(const std::vector<std::string>& args) {
  return parse_options(args, [](const char* name) { return std::getenv(name); });
}

Options parse_options(const std::vector<std::string>& args, const EnvLookup& env) {
  Options o;
  std::optional<std::string> store_from;  // the option that gave the store
  std::optional<std::string> nproc_name;  // as spelled, for messages
  bool node_rank_given = false;

  // CLI11 reads the options ("-n P", "-nP", "--opt value", "--opt=value", the
  // flag); unknown options are kept aside (remaining()). Reading goes on
  // after the first mistake so that `--help` anywhere before PROGRAM still
  // shows the help; the first mistake on the line is the one reported, and
  // `extras_before` tells whether an unknown option came before it.
  CLI::App app{"dtensor-run", "dtensor-run"};
  app.set_help_flag();  // -h and --help are picked out below, with PROGRAM
  app.allow_extras();
  std::optional<UsageError> first_error;
  std::size_t extras_before = 0;
  auto attempt = [&](auto&& f) {
    try {
      f();
    } catch (const UsageError& e) {
      if (!first_error) {
        first_error = e;
        extras_before = app.remaining().size();
      }
    }
  };
  auto with_value = [&](const std::string& name, std::function<void(const std::string&)> set) {
    app.add_option(name,
                   [&attempt, name, set](const CLI::results_t& r) {
                     attempt([&] { set(r.back()); });
                     return true;
                   })
        ->trigger_on_parse();
  };
  for (const char* name : {"-n", "--nproc-per-node"})
    with_value(name, [&, name](const std::string& v) {
      nproc_name = name;
      o.nproc = parse_count(name, v, 1, kMaxProcs);
    });
  with_value("--nnodes",
             [&](const std::string& v) { o.nnodes = parse_count("--nnodes", v, 1, kMaxNodes); });
  with_value("--node-rank", [&](const std::string& v) {
    node_rank_given = true;
    o.node_rank = parse_count("--node-rank", v, 0, kMaxNodes - 1);
  });
  with_value("--store", [&](const std::string& v) {
    if (store_from && *store_from != "--store")
      throw UsageError("--store and " + *store_from + ": give one of them");
    check_store("--store", v);
    o.store = v;
    store_from = "--store";
  });
  with_value("--store-file", [&](const std::string& v) {
    if (store_from && *store_from != "--store-file")
      throw UsageError("--store-file and " + *store_from + ": give one of them");
    o.store = read_store_file(v);
    store_from = "--store-file";
  });
  with_value("--timeout", [&](const std::string& v) {
    parse_seconds("--timeout", v);
    o.timeout = v;
  });
  with_value("--deadline", [&](const std::string& v) {
    o.deadline = std::chrono::milliseconds(
        static_cast<std::int64_t>(std::ceil(parse_seconds("--deadline", v) * 1000)));
  });
  with_value("--job-id", [&](const std::string& v) {
    bool ok = !v.empty() && v.size() <= 128;
    for (char c : v)
      ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-');
    if (!ok) throw UsageError("--job-id: '" + v + "' is not 1 to 128 characters of [A-Za-z0-9._-]");
    o.job_id = v;
  });
  app.add_flag("--bind-cores", o.bind_cores)->trigger_on_parse();

  // The options end at "--" or at PROGRAM, the first argument that is not an
  // option nor an option's value: the rest is the program's, "--help"
  // included. Two spellings are rewritten where CLI11 reads them otherwise:
  // "--opt=" (an empty value: CLI11 would take the next argument) becomes
  // "--opt" "", and "--flag=VALUE" (CLI11 would read VALUE as true or false)
  // becomes an argument it sets aside, refused as an unknown option.
  std::vector<std::string> line;
  std::size_t i = 0;
  for (bool is_value = false; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (std::exchange(is_value, false)) {
      line.push_back(a);
      continue;
    }
    if (a == "--") {
      ++i;
      break;
    }
    if (a.empty() || a[0] != '-' || a == "-") break;  // PROGRAM
    if (a == "-h" || a == "--help") {
      o.help = true;
      continue;
    }
    const auto eq = a.rfind("--", 0) == 0 ? a.find('=') : std::string::npos;
    const CLI::Option* opt = app.get_option_no_throw(a.substr(0, eq));
    if (opt && opt->get_expected_max() == 0 && eq != std::string::npos) {
      line.push_back(kFlagWithValue + a);
    } else if (opt && eq == std::string::npos) {
      is_value = opt->get_expected_max() > 0;
      line.push_back(a);
    } else if (opt && eq + 1 == a.size()) {
      line.push_back(a.substr(0, eq));
      line.emplace_back();
    } else {
      line.push_back(a);
    }
  }
  o.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());

  try {
    app.parse(std::vector<std::string>(line.rbegin(), line.rend()));  // CLI11 reads from the back
  } catch (const CLI::ArgumentMismatch&) {
    // Only the last option can lack its value.
    attempt([&] { throw UsageError(line.back() + ": missing value"); });
  } catch (const CLI::ParseError& e) {
    attempt([&] { throw UsageError(e.what()); });
  }
  if (o.help) return o;
  if (const auto extras = app.remaining(); !extras.empty() && (!first_error || extras_before > 0)) {
    const std::string& a = extras.front();
    throw UsageError("unknown option '" + (a.rfind(kFlagWithValue, 0) == 0 ? a.substr(1) : a) +
                     "'");
  }
  if (first_error) throw *first_error;

  if (!store_from) {
    if (const char* v = env("DTENSOR_STORE"); v && *v) {
      check_store("DTENSOR_STORE", v);
      o.store = v;
    }
  }
  if (!nproc_name) throw UsageError("missing -n P: the number of processes to start");
  if (o.command.empty()) throw UsageError("missing PROGRAM: the program each rank runs");
  if (o.node_rank >= o.nnodes)
    throw UsageError("--node-rank " + std::to_string(o.node_rank) + " must be less than --nnodes " +
                     std::to_string(o.nnodes) +
                     (node_rank_given && o.nnodes == 1 ? " (did you forget --nnodes?)" : ""));
  if (o.nnodes > 1 && o.store.empty())
    throw UsageError(
        "--nnodes " + std::to_string(o.nnodes) +
        ": the ranks on all nodes need one store they can all reach, and the default one is "
        "private to this node: pass --store redis://HOST:PORT (or --store file:DIR with DIR on a "
        "shared file system; with a password, --store-file FILE or DTENSOR_STORE keep it off the "
        "command line)");
  return o;
}

std::map<std::string, std::string> rank_environment(const Options& o, int local_rank,
                                                    const std::string& store_url) {
  std::map<std::string, std::string> env{
      {"DTENSOR_RANK", std::to_string(o.global_rank(local_rank))},
      {"DTENSOR_WORLD_SIZE", std::to_string(o.world_size())},
      {"DTENSOR_LOCAL_RANK", std::to_string(local_rank)},
      {"DTENSOR_LOCAL_WORLD_SIZE", std::to_string(o.nproc)},
      {"DTENSOR_STORE", store_url},
  };
  if (o.timeout) env["DTENSOR_TIMEOUT"] = *o.timeout;
  return env;
}

std::string usage_line() {
  return "usage: dtensor-run -n P [--store file:DIR|redis://HOST:PORT | --store-file FILE] "
         "[--timeout S] "
         "[--deadline S] [--nnodes N --node-rank R] [--job-id ID] [--bind-cores] [--] PROGRAM "
         "[ARGS...]";
}

std::string help_text() {
  return usage_line() + R"(

Starts P processes of PROGRAM on this host, as ranks of one libdtensor job,
and watches them: when one fails, the others are stopped.

Options:
  -n, --nproc-per-node P  processes to start on this node (1 to 4096)
  --store URL             rendezvous store: file:DIR (one host, or a shared file
                          system) or redis://HOST:PORT. Default: a fresh private
                          directory, /tmp/dtensor-run-XXXXXX/store, removed when
                          the job ends. A file:DIR of your own is kept;
                          use a fresh one per job. Without --store and
                          --store-file: DTENSOR_STORE of our environment
  --store-file FILE       the store URL on FILE's first line: a Redis
                          password given there (or in DTENSOR_STORE) stays
                          off the command line, which every user sees (ps)
  --timeout S             communication timeout of the ranks, in seconds
                          (sets DTENSOR_TIMEOUT). Default: the ranks keep
                          the DTENSOR_TIMEOUT of dtensor-run's environment,
                          else the library's default, 300 s
  --deadline S            stop the whole job after S seconds (exit status 124)
  --nnodes N              nodes in the job; run dtensor-run once per node
                          (needs --store, default 1)
  --node-rank R           this node's index, 0 to N-1 (default 0)
  --job-id ID             the job's namespace in the store ([A-Za-z0-9._-]);
                          give the same on every node. Default: DTENSOR_JOB_ID
                          of our environment, else a fresh random id on one
                          node (on several, the ranks' own default)
  --bind-cores            run each local rank on its own CPUs: the CPUs
                          dtensor-run may use, split into P disjoint slices
                          (with fewer CPUs than ranks, one CPU each, shared
                          evenly); pair with OMP_NUM_THREADS <= the slice
  -h, --help              show this help
  --                      end of options (for a PROGRAM whose name starts with -)

Each rank gets DTENSOR_RANK (R*P + local rank), DTENSOR_WORLD_SIZE (N*P),
DTENSOR_LOCAL_RANK, DTENSOR_LOCAL_WORLD_SIZE (P), DTENSOR_STORE,
DTENSOR_JOB_ID, DTENSOR_JOB_TOKEN (a secret: DTENSOR_JOB_TOKEN of our
environment, else a fresh random one on one node; several nodes must export
the same one) and, with --timeout, DTENSOR_TIMEOUT. When OMP_NUM_THREADS is
not set (or empty), each rank gets OMP_NUM_THREADS = the CPUs dtensor-run may
use (or its container's CPU limit, when lower) / P (at least 1), and a
one-line note on stderr says so; a value of yours is passed on as is.
Every line a rank prints is prefixed with its rank ("[3] "): its stdout on our
stdout, its stderr on our stderr. SIGINT, SIGTERM and SIGHUP are forwarded to
the ranks; ranks still running 10 s later are killed (at once on a second
signal). When a rank fails (non-zero exit or a signal), the others get 1 s to
end on their own (a peer's death usually ends them with an error worth
reading), then SIGTERM, then SIGKILL after 3 s. Their output is read to the
end: nothing a rank printed before it ended is lost (libdtensor flushes a
rank's stdio on SIGTERM).

Exit status:
  0        every rank exited with code 0
  N        the first rank to fail exited with code N (passed on as is)
  128+S    the first rank to fail was killed by signal S (137: SIGKILL), or
           dtensor-run got signal S and stopped the job (130: SIGINT,
           143: SIGTERM)
  2        usage error: nothing was started
  124      --deadline passed and the job was stopped
  125      dtensor-run itself failed (e.g. cannot create the store directory)
  126      PROGRAM is not executable: nothing was started
  127      PROGRAM was not found: nothing was started
A rank's exit code can coincide with one of these; dtensor-run's own message
on stderr ("dtensor-run: ...") says which it was.
)";
}

}  // namespace dtensor::run
