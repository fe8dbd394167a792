// The one run of dtensor-op, and the commands over it. A Face is what a
// command shows of the run: how it reads its command line, what it reports,
// how it times and dumps. `dtensor-op OP` is one face; `dtensor-conv` is
// `dtensor-op conv` under another, the convolution command's own options,
// report, JSON and dump format (tools/dtensor-conv/main.cpp).
//
// Failure policy (both commands'): argument errors are found before
// init_process_group, from the arguments and the launcher's environment
// alone, so every rank exits 2 without waiting for anyone. After init, rank
// 0 decides the --check and --dump outcomes and broadcasts them, so every
// rank exits with the same status. A library error exits 3 at once (_Exit,
// no final barrier: a peer that did not fail would wait in it; our closed
// connections make such peers fail instead, and dtensor-run stops them
// anyway).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dtensor/core/device_mesh.h"
#include "tools/dtensor-op/bench.h"
#include "tools/dtensor-op/check.h"
#include "tools/dtensor-op/options.h"
#include "tools/dtensor-op/problem.h"

namespace dtensor::op_cli {

/// What a rank holds against what its process took, from passes run twice
/// (docs/cli.md, dtensor-conv's --json). Max over ranks.
struct MemoryFigures {
  double passes_peak_rss_mb = 0;  // the first passes' peak
  double tensor_mb = 0;           // operands, halo received, results
  double rss_ratio = 0, rss_ratio_net = 0;
  std::optional<double> rss_ratio_private;  // null where a peak could not be reset
};

/// What one run measured and decided, for rank 0's report.
struct RunReport {
  const Options& options;
  int world_size;
  std::string device;  // "cpu", "cuda:0"
  const Operands& operands;
  const Forward& forward;
  double bytes_max = 0, bytes_total = 0;  // one forward's sends: max over ranks, sum
  double peak_rss_mb = 0;                 // the whole run's, max over ranks
  std::optional<MemoryFigures> memory;    // with Face::measure_memory
  std::vector<TensorCheck> checks;        // with --check
  std::optional<BenchTimes> bench;        // with --bench
  int status = 0;                         // the exit status every rank returns
};

struct Face {
  std::string_view program;  // "dtensor-op": the messages' prefix
  Options (*parse)(const std::vector<std::string>& args) = nullptr;
  std::string (*usage_line)() = nullptr;
  std::string (*help_text)() = nullptr;
  /// An InvalidArgument the library raises while running (alike on every
  /// rank) exits 2 naming the op; otherwise it is a library error (exit 3).
  bool invalid_argument_is_usage = true;
  /// After "--input N,C,..." in the out-of-memory message.
  std::string_view oom_sizes_hint;
  /// Run the passes twice and measure memory (MemoryFigures).
  bool measure_memory = false;
  /// --bench's timing.
  BenchTimes (*bench)(const Options&, const DeviceMesh&, const Operands&, const Seeds&) = run_bench;
  /// meta.json's text for --dump.
  std::string (*dump_meta)(const Options&, int world_size, const Placements& output_placements,
                           const GlobalTensors&) = nullptr;
  /// Rank 0's stdout.
  void (*report)(const RunReport&) = nullptr;
};

/// The command: parses argv (every rank alike), runs, reports; returns the
/// exit status (or ends the process at once on a library error).
int tool_main(const Face& face, int argc, char** argv);

}  // namespace dtensor::op_cli
