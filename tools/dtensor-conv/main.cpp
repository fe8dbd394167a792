// dtensor-conv: `dtensor-op conv` (tools/dtensor-op/run.h) under the
// convolution command's own face: its command line (options.h, no OP word,
// no --padding-mode), its report and --json fields (gflops and the memory
// ratios of passes run twice), its dump format ("dtensor-conv dump 1") and
// its --bench (the local kernel alone on the rank's window). See
// `dtensor-conv --help` and docs/cli.md.
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tools/cli/json.h"
#include "tools/dtensor-conv/options.h"
#include "tools/dtensor-conv/window_bench.h"
#include "tools/dtensor-op/dump.h"
#include "tools/dtensor-op/run.h"

namespace dtensor::conv_cli {
namespace {

using cli::JsonObject, cli::JsonValue, op_cli::RunReport;

// dtensor-conv's command line, as dtensor-op's conv options: every list
// spelled out per spatial dim, the default output channels filled in.
op_cli::Options parse(const std::vector<std::string>& args) {
  const Options c = parse_options(args);
  op_cli::Options o;
  o.op = op_cli::OpKind::Conv;
  o.help = c.help;
  if (c.help) return o;
  o.mesh = c.mesh;
  o.placements = c.placements;
  o.input = c.input;
  o.dtype = c.dtype;
  o.device = c.device;
  o.seed = c.seed;
  o.backward = c.backward;
  o.check = c.check;
  o.dump = c.dump;
  o.bench = c.bench;
  o.iters = c.iters;
  o.warmup = c.warmup;
  o.json = c.json;
  const ConvParams p = c.conv_params();
  const Shape w = c.weight_shape();
  o.kernel.assign(w.begin() + 2, w.end());
  o.stride = p.stride;
  o.dilation = p.dilation;
  o.padding = p.padding;
  o.groups = p.groups;
  o.out_channels = w[0];
  o.bias = c.bias;
  o.output_padding.assign(o.kernel.size(), 0);
  return o;
}

std::string npy_dtype(DType dtype) {
  // numpy has no bfloat16: bf16 tensors are stored widened (exactly) to float32.
  return dtype == DType::F64 ? "float64" : dtype == DType::F16 ? "float16" : "float32";
}

std::string dump_meta(const op_cli::Options& o, int world_size, const Placements& output_placements,
                      const op_cli::GlobalTensors& g) {
  const ConvParams p = o.conv_params();
  const Shape weight = o.weight_shape();
  JsonValue padding = JsonValue::array();
  for (const auto& [l, r] : p.padding)
    padding.push_back({l, r});
  JsonObject files;
  for (const auto& [name, file] : op_cli::dump_files(g))
    files.add(name, file);

  JsonObject meta;
  meta.add("format", "dtensor-conv dump 1")
      .add("spatial_dims", o.spatial_dims())
      .add("input_shape", o.input)
      .add("weight_shape", weight)
      .add("output_shape", g.output.shape())
      .add("out_channels", weight[0])
      .add("kernel", Shape(weight.begin() + 2, weight.end()))
      .add("stride", p.stride)
      .add("padding", padding)
      .add("dilation", p.dilation)
      .add("groups", p.groups)
      .add("bias", o.bias)
      .add("backward", o.backward)
      .add("dtype", std::string(dtype_name(o.dtype)))
      .add("npy_dtype", npy_dtype(o.dtype))
      .add("seed", o.seed)
      .add("world_size", world_size)
      .add("mesh", o.mesh)
      .add("placements", op_cli::placement_strings(o.placements))
      .add("output_placements", op_cli::placement_strings(output_placements))
      .add("files", files);
  return meta.str();
}

std::optional<double> ratio(const std::optional<double>& a, const std::optional<double>& b) {
  if (!a || !b || *b <= 0) return std::nullopt;
  return *a / *b;
}

std::optional<double> gflops(double flops, const std::optional<double>& ms) {
  if (!ms || *ms <= 0) return std::nullopt;
  return flops / (*ms * 1e-3) / 1e9;
}

void report(const RunReport& r) {
  const op_cli::Options& o = r.options;
  const DTensor& y = r.forward.output;
  const Shape& ws = r.operands.weight->shape();
  // 2 * N * OC * prod(O) * C/groups * prod(k), the dense forward's flops.
  double flops = 2.0 * static_cast<double>(shape_numel(y.shape()));
  for (std::size_t i = 1; i < ws.size(); ++i)
    flops *= static_cast<double>(ws[i]);  // C/groups * prod(k)

  std::cout << fmt::format(
      "dtensor-conv: {} rank(s), mesh {} on {}, input {} {} placed {}, weight {}{}\n"
      "  {}\n  output {} placed {}; one forward sent {} bytes per rank (max), {} in all\n",
      r.world_size, shape_str(o.mesh), r.device, shape_str(o.input), dtype_name(o.dtype),
      placements_str(o.placements), shape_str(ws), o.bias ? " + bias" : "", o.conv_params().str(),
      shape_str(y.shape()), placements_str(y.placements()), r.bytes_max, r.bytes_total);
  for (const auto& c : r.checks)
    std::cout << fmt::format("  check {:<12} max|err| {:.3e}  tol {:.3e}  (max|ref| {:.3e})  {}\n",
                             c.name, c.max_abs_err, c.tolerance, c.ref_max,
                             c.ok ? "ok" : "OVER TOLERANCE");
  if (r.bench) {
    std::cout << fmt::format("  bench forward  {:.3f} ms, local kernel {:.3f} ms ({} iters)\n",
                             *r.bench->fwd_ms, *r.bench->local_fwd_ms, o.iters);
    if (r.bench->bwd_ms)
      std::cout << fmt::format("  bench backward {:.3f} ms, local kernel {:.3f} ms\n",
                               *r.bench->bwd_ms, *r.bench->local_bwd_ms);
  }
  if (o.dump && r.status != exit_code::kError) std::cout << "  dump written to " << *o.dump << "\n";
  if (!o.json) return;

  JsonObject errs, tols;
  for (const auto& c : r.checks) {
    errs.add(c.name, c.max_abs_err);
    tols.add(c.name, c.tolerance);
  }
  const op_cli::BenchTimes b = r.bench.value_or(op_cli::BenchTimes{});
  const op_cli::MemoryFigures m = r.memory.value_or(op_cli::MemoryFigures{});
  JsonObject j;
  j.add("ok", r.status == exit_code::kOk);
  if (o.check)
    j.add("max_abs_err", errs).add("tolerance", tols);
  else
    j.add_null("max_abs_err").add_null("tolerance");
  j.add("fwd_ms", b.fwd_ms)
      .add("bwd_ms", b.bwd_ms)
      .add("local_fwd_ms", b.local_fwd_ms)
      .add("local_bwd_ms", b.local_bwd_ms)
      .add("overhead_fwd", ratio(b.fwd_ms, b.local_fwd_ms))
      .add("overhead_bwd", ratio(b.bwd_ms, b.local_bwd_ms))
      .add("gflops_fwd", gflops(flops, b.fwd_ms))
      .add("gflops_bwd", gflops(2.0 * flops, b.bwd_ms))
      .add("halo_bytes_sent_per_rank", std::optional(r.bytes_max))
      .add("halo_bytes_sent_total", std::optional(r.bytes_total))
      .add("peak_rss_mb", std::optional(r.peak_rss_mb))
      .add("passes_peak_rss_mb", std::optional(m.passes_peak_rss_mb))
      .add("tensor_mb", std::optional(m.tensor_mb))
      .add("rss_ratio", std::optional(m.rss_ratio))
      .add("rss_ratio_net", std::optional(m.rss_ratio_net))
      .add("rss_ratio_private", m.rss_ratio_private)
      .add("world_size", r.world_size)
      .add("mesh", o.mesh)
      .add("placements", op_cli::placement_strings(o.placements))
      .add("output_placements", op_cli::placement_strings(y.placements()))
      .add("input", o.input)
      .add("weight", ws)
      .add("output", y.shape())
      .add("dtype", std::string(dtype_name(o.dtype)))
      .add("device", r.device)
      .add("iters", o.bench ? o.iters : 0);
  std::cout << j.str() << "\n";
}

}  // namespace
}  // namespace dtensor::conv_cli

int main(int argc, char** argv) {
  using namespace dtensor::conv_cli;
  dtensor::op_cli::Face face;
  face.program = "dtensor-conv";
  face.parse = parse;
  face.usage_line = usage_line;
  face.help_text = help_text;
  face.invalid_argument_is_usage = false;
  face.oom_sizes_hint = " (with --out-channels and --kernel)";
  face.measure_memory = true;
  face.bench = run_window_bench;
  face.dump_meta = dump_meta;
  face.report = report;
  return dtensor::op_cli::tool_main(face, argc, argv);
}
