// libFuzzer target: the text parsers users feed directly — placements
// ("S(3),R"), integer lists ("2,3,4" / "2x2"), store URLs, and the command
// lines of dtensor-run and dtensor-conv. The first byte picks the parser, the rest is its input.
// Each must either reject with its typed error naming the parameter, or
// return something consistent (round trips, ranges); never crash or hang.
// Store URLs are also checked against the std::regex the parser replaced
// (on short inputs, where the regex does not overflow the stack).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>
#include <vector>

#include "dtensor/core/errors.h"
#include "dtensor/core/shape.h"
#include "dtensor/core/store_url.h"
#include "dtensor/placement/placement.h"
#include "tools/dtensor-conv/options.h"
#include "tools/dtensor-run/options.h"

using namespace dtensor;

namespace {

[[noreturn]] void fail(const std::string& what, const std::string& input) {
  std::fprintf(stderr, "%s\ninput: '%s'\n", what.c_str(), input.c_str());
  std::abort();
}

bool contains(const std::string& s, const char* needle) {
  return s.find(needle) != std::string::npos;
}

void fuzz_placements(const std::string& text) {
  try {
    const Placements p = parse_placements(text, "--placements");
    if (p.empty()) fail("empty placements accepted", text);
    const std::string again = placements_str(p);
    if (parse_placements(again, "--placements") != p) fail("round trip differs: " + again, text);
  } catch (const InvalidArgument& e) {
    if (!contains(e.what(), "--placements")) fail(std::string("unnamed: ") + e.what(), text);
  }
}

void fuzz_int_list(const std::string& text, char sep) {
  try {
    const Shape s = parse_int_list(text, "--input", sep);
    std::string again;
    for (std::size_t i = 0; i < s.size(); ++i)
      again += (i ? std::string(1, sep) : "") + std::to_string(s[i]);
    if (parse_int_list(again, "--input", sep) != s) fail("round trip differs: " + again, text);
  } catch (const InvalidArgument& e) {
    if (!contains(e.what(), "--input")) fail(std::string("unnamed: ") + e.what(), text);
  }
}

void fuzz_store_url(const std::string& url) {
  const StoreUrl u = parse_store_url(url);
  if (u.kind == StoreUrl::Kind::Redis &&
      (u.host.empty() || u.port < 1 || u.port > 65535 || u.problem != StoreUrl::Problem::None))
    fail("inconsistent redis url", url);
  if (u.kind == StoreUrl::Kind::File && (u.path.empty() || contains(u.path, "://")))
    fail("inconsistent file url", url);
  if ((u.kind == StoreUrl::Kind::Invalid) == (u.problem == StoreUrl::Problem::None))
    fail("kind and problem disagree", url);
  // The previous implementation's rules, as a reference (it had no credentials).
  if (url.size() < 256 && url.rfind("redis://", 0) == 0 && !contains(url, "@")) {
    static const std::regex redis_re(
        R"(^redis://([A-Za-z0-9_.\-]+|\[[0-9a-fA-F:]+\]):([0-9]{1,5})$)");
    std::smatch m;
    const bool shape_ok = std::regex_match(url, m, redis_re);
    const bool ok = shape_ok && std::stoi(m[2]) >= 1 && std::stoi(m[2]) <= 65535;
    if (ok != (u.kind == StoreUrl::Kind::Redis)) fail("differs from the reference regex", url);
  }
}

// NUL-separated arguments, as in /proc/PID/cmdline.
std::vector<std::string> split_args(const std::string& text) {
  std::vector<std::string> args;
  std::string cur;
  for (char c : text) {
    if (c == '\0') {
      args.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  args.push_back(cur);
  return args;
}

void fuzz_run_options(const std::string& text) {
  const std::vector<std::string> args = split_args(text);
  try {
    const run::Options o = run::parse_options(args);
    if (o.help) return;
    if (o.nproc < 1 || o.nproc > 4096) fail("nproc out of range", text);
    if (o.nnodes < 1 || o.node_rank < 0 || o.node_rank >= o.nnodes) fail("node rank", text);
    if (o.command.empty()) fail("no command", text);
    if (o.nnodes > 1 && o.store.empty()) fail("several nodes without a store", text);
    if (!o.store.empty() && parse_store_url(o.store).kind == StoreUrl::Kind::Invalid)
      fail("store accepted by dtensor-run, refused by the library: " + o.store, text);
    const auto env = run::rank_environment(o, o.nproc - 1, "file:/x");
    if (env.at("DTENSOR_WORLD_SIZE") != std::to_string(o.world_size())) fail("world size", text);
  } catch (const run::UsageError& e) {
    if (std::string(e.what()).empty()) fail("empty usage message", text);
  }
}

// dtensor-conv validates on every rank before any communication: whatever it
// accepts, the library's own checks must accept too (else one bad argument
// would surface later, inside a collective).
void fuzz_conv_options(const std::string& text, int world) {
  try {
    conv_cli::Options o = conv_cli::parse_options(split_args(text));
    if (o.help) return;
    conv_cli::resolve_for_world(o, world);
    std::int64_t ranks = 1;
    for (auto m : o.mesh)
      ranks *= m;
    if (ranks != world) fail("mesh does not cover the world", text);
    if (o.placements.size() != o.mesh.size()) fail("placements vs mesh dims", text);
    try {
      check_conv_args(o.input, o.weight_shape(), std::nullopt, o.conv_params());
    } catch (const InvalidArgument& e) {
      fail(std::string("accepted by dtensor-conv, refused by the library: ") + e.what(), text);
    }
  } catch (const conv_cli::UsageError& e) {
    // It names the option, or quotes the argument it could not place.
    if (std::string(e.what()).empty()) fail("empty usage message", text);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 6) {
    case 0:
      fuzz_placements(text);
      break;
    case 1:
      fuzz_int_list(text, ',');
      break;
    case 2:
      fuzz_int_list(text, 'x');
      break;
    case 3:
      fuzz_store_url(text);
      break;
    case 4:
      fuzz_run_options(text);
      break;
    case 5:
      fuzz_conv_options(text, 1 + (data[0] / 6) % 8);
      break;
  }
  return 0;
}
