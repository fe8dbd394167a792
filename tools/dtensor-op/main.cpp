// dtensor-op: runs one tensor-parallel operator (the window operators conv,
// conv_transpose, the pools, pad; and the U-Net operators upsample, the norms,
// cat, the activations, the losses) on seeded data and checks (--check),
// dumps (--dump) and times (--bench) it. See `dtensor-op --help` and
// docs/cli.md.
//
// The run and the failure policy are tools/dtensor-op/run.h's; this file is
// dtensor-op's face: its report.
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tools/dtensor-op/dump.h"
#include "tools/dtensor-op/op_table.h"
#include "tools/dtensor-op/run.h"

namespace dtensor::op_cli {
namespace {

using json = nlohmann::ordered_json;

json number_or_null(const std::optional<double>& v) {
  return v ? json(*v) : json(nullptr);
}

json ratio(const std::optional<double>& a, const std::optional<double>& b) {
  if (!a || !b || *b <= 0) return nullptr;
  return *a / *b;
}

// Rank 0's report: the run in a few lines, the checks, the times, and with
// --json one JSON object on the last line.
void report(const RunReport& r) {
  const Options& o = r.options;
  const DTensor& y = r.forward.output;
  const int status = r.status;
  const int world_size = r.world_size;
  const double bytes_max = r.bytes_max, bytes_total = r.bytes_total, rss = r.peak_rss_mb;
  const std::vector<TensorCheck>& checks = r.checks;
  const std::optional<BenchTimes>& bench = r.bench;
  std::cout << fmt::format(
      "dtensor-op {}: {} rank(s), mesh {} on {}, input {} {} placed {}{}\n"
      "  {}\n  output {} placed {}; one forward sent {} bytes per rank (max), {} in all\n",
      op_name(o.op), world_size, shape_str(o.mesh), r.device, shape_str(o.input),
      dtype_name(o.dtype), placements_str(o.placements),
      o.has_weight()
          ? fmt::format(", weight {}{}", shape_str(o.weight_shape()), o.bias ? " + bias" : "")
      : o.op == OpKind::Cat ? fmt::format(" (and {} more input(s))", o.inputs - 1)
                            : std::string(),
      op_entry(o.op).params_line(o), shape_str(y.shape()), placements_str(y.placements()),
      bytes_max, bytes_total);
  for (const auto& c : checks)
    std::cout << fmt::format("  check {:<12} max|err| {:.3e}  tol {:.3e}  (max|ref| {:.3e})  {}\n",
                             c.name, c.max_abs_err, c.tolerance, c.ref_max,
                             c.ok ? "ok" : "OVER TOLERANCE");
  if (bench) {
    const auto ms = [](const std::optional<double>& v) {
      return v ? fmt::format("{:.3f} ms", *v) : std::string("n/a");
    };
    std::cout << fmt::format("  bench forward  {}, local op {} ({} iters)\n", ms(bench->fwd_ms),
                             ms(bench->local_fwd_ms), o.iters);
    if (bench->bwd_ms)
      std::cout << fmt::format("  bench backward {}, local op {}\n", ms(bench->bwd_ms),
                               ms(bench->local_bwd_ms));
  }
  if (o.dump && status != exit_code::kError) std::cout << "  dump written to " << *o.dump << "\n";

  if (o.json) {
    const BenchTimes b = bench.value_or(BenchTimes{});
    json j = json::object();
    j["ok"] = status == exit_code::kOk;
    j["op"] = std::string(op_name(o.op));
    if (o.check) {
      json errs = json::object(), tols = json::object();
      for (const auto& c : checks) {
        errs[c.name] = c.max_abs_err;  // a missing result (inf) becomes null
        tols[c.name] = c.tolerance;
      }
      j["max_abs_err"] = errs;
      j["tolerance"] = tols;
    } else {
      j["max_abs_err"] = nullptr;
      j["tolerance"] = nullptr;
    }
    j["fwd_ms"] = number_or_null(b.fwd_ms);
    j["bwd_ms"] = number_or_null(b.bwd_ms);
    j["local_fwd_ms"] = number_or_null(b.local_fwd_ms);
    j["local_bwd_ms"] = number_or_null(b.local_bwd_ms);
    j["overhead_fwd"] = ratio(b.fwd_ms, b.local_fwd_ms);
    j["overhead_bwd"] = ratio(b.bwd_ms, b.local_bwd_ms);
    j["halo_bytes_sent_per_rank"] = bytes_max;
    j["halo_bytes_sent_total"] = bytes_total;
    j["peak_rss_mb"] = rss;
    j["world_size"] = world_size;
    j["mesh"] = o.mesh;
    j["placements"] = placement_strings(o.placements);
    j["output_placements"] = placement_strings(y.placements());
    j["input"] = o.input;
    if (o.has_weight()) j["weight"] = o.weight_shape();
    j["output"] = y.shape();
    j["dtype"] = std::string(dtype_name(o.dtype));
    j["device"] = r.device;
    j["iters"] = o.bench ? o.iters : 0;
    std::cout << j.dump() << "\n";
  }
}

}  // namespace
}  // namespace dtensor::op_cli

int main(int argc, char** argv) {
  using namespace dtensor::op_cli;
  Face face;
  face.program = "dtensor-op";
  face.parse = parse_options;
  face.usage_line = usage_line;
  face.help_text = help_text;
  face.dump_meta = dump_metadata;
  face.report = report;
  return tool_main(face, argc, argv);
}
