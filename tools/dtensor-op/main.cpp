// dtensor-op: runs one tensor-parallel operator (the window operators conv,
// conv_transpose, the pools, pad; and the U-Net operators upsample, the norms,
// cat, the activations, the losses) on seeded data and checks (--check),
// dumps (--dump) and times (--bench) it. See `dtensor-op --help` and
// docs/cli.md.
//
// Failure policy (dtensor-conv's): argument errors are found before
// init_process_group, from the arguments and the launcher's environment
// alone, so every rank exits 2 without waiting for anyone. After init, rank
// 0 decides the --check and --dump outcomes and broadcasts them, so every
// rank exits with the same status. An InvalidArgument the library raises
// while running (identically on every rank) exits 2 naming it; any other
// library error exits 3 at once (_Exit, no final barrier).
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "dtensor/core/distributed.h"
#include "dtensor/core/errors.h"
#include "dtensor/cuda.h"
#include "tools/dtensor-conv/failure.h"
#include "tools/dtensor-conv/memory.h"
#include "tools/dtensor-op/bench.h"
#include "tools/dtensor-op/check.h"
#include "tools/dtensor-op/dump.h"
#include "tools/dtensor-op/op_table.h"
#include "tools/dtensor-op/options.h"
#include "tools/dtensor-op/problem.h"

namespace dtensor::op_cli {
namespace {

using json = nlohmann::ordered_json;

int usage_error(const std::string& message) {
  std::cerr << "dtensor-op: " << message << "\n" << usage_line() << std::endl;
  return exit_code::kUsage;
}

double all_reduce(double v, ReduceOp op) {
  Tensor t = Tensor::full({1}, v, DType::F64);
  world()->allreduce(t, op);
  return t.item({0});
}

std::vector<std::string> strings(const Placements& ps) {
  std::vector<std::string> out;
  for (const auto& p : ps)
    out.push_back(p.str());
  return out;
}

json number_or_null(const std::optional<double>& v) {
  return v ? json(*v) : json(nullptr);
}

json ratio(const std::optional<double>& a, const std::optional<double>& b) {
  if (!a || !b || *b <= 0) return nullptr;
  return *a / *b;
}

InitOptions init_options(const Options& o) {
  InitOptions io;
  if (o.device == DeviceType::CUDA && !std::getenv("DTENSOR_BACKEND")) io.backend = "nccl";
  return io;
}

int run(const Options& o) {
  init_process_group(init_options(o));
  const int rank = get_rank(), world_size = get_world_size();
  const DeviceMesh mesh(o.device, o.mesh);
  const Seeds seeds = Seeds::from(o.seed);
  const Operands ops = make_operands(o, mesh, seeds);

  const conv_cli::Traffic before = conv_cli::traffic(mesh);
  const Forward forward = run_forward(o, ops);
  const DTensor& y = forward.output;
  const conv_cli::Traffic after = conv_cli::traffic(mesh);
  std::optional<DTensor> gy;
  Grads grads;
  if (o.backward) {
    if (o.has_grad_output()) gy = make_grad_output(o, y, seeds);
    grads = run_backward(o, ops, gy);
  }
  const double fwd_bytes = static_cast<double>(after.sent - before.sent);
  const double bytes_max = all_reduce(fwd_bytes, ReduceOp::Max);
  const double bytes_total = all_reduce(fwd_bytes, ReduceOp::Sum);

  std::optional<BenchTimes> bench;
  if (o.bench) bench = run_bench(o, mesh, ops, seeds);

  // Rank 0 judges; the verdict is broadcast so that every rank exits alike.
  int status = exit_code::kOk;
  std::vector<TensorCheck> checks;
  if (o.check || o.dump) {
    const GlobalTensors g = gather_global(o, seeds, forward, gy, grads);
    if (rank == 0) {
      if (o.check) {
        checks = check_against_reference(o, g, world_size);
        for (const auto& c : checks)
          if (!c.ok) status = exit_code::kCheckFailed;
      }
      if (o.dump) {
        try {
          write_dump(*o.dump, o, world_size, y.placements(), g);
        } catch (const std::exception& e) {
          std::cerr << "dtensor-op: " << e.what() << std::endl;
          status = exit_code::kError;
        }
      }
    }
  }
  Tensor verdict = Tensor::full({1}, status, DType::F64);
  world()->broadcast(verdict, 0);
  status = static_cast<int>(verdict.item({0}));
  const double rss = all_reduce(conv_cli::peak_rss_mb(), ReduceOp::Max);

  if (rank == 0) {
    std::cout << fmt::format(
        "dtensor-op {}: {} rank(s), mesh {} on {}, input {} {} placed {}{}\n"
        "  {}\n  output {} placed {}; one forward sent {} bytes per rank (max), {} in all\n",
        op_name(o.op), world_size, shape_str(o.mesh), mesh.device().str(), shape_str(o.input),
        dtype_name(o.dtype), placements_str(o.placements),
        o.has_weight()
            ? fmt::format(", weight {}{}", shape_str(o.weight_shape()), o.bias ? " + bias" : "")
        : o.op == OpKind::Cat ? fmt::format(" (and {} more input(s))", o.inputs - 1)
                              : std::string(),
        op_entry(o.op).params_line(o), shape_str(y.shape()), placements_str(y.placements()),
        bytes_max, bytes_total);
    for (const auto& c : checks)
      std::cout << fmt::format(
          "  check {:<12} max|err| {:.3e}  tol {:.3e}  (max|ref| {:.3e})  {}\n", c.name,
          c.max_abs_err, c.tolerance, c.ref_max, c.ok ? "ok" : "OVER TOLERANCE");
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
      j["placements"] = strings(o.placements);
      j["output_placements"] = strings(y.placements());
      j["input"] = o.input;
      if (o.has_weight()) j["weight"] = o.weight_shape();
      j["output"] = y.shape();
      j["dtype"] = std::string(dtype_name(o.dtype));
      j["device"] = mesh.device().str();
      j["iters"] = o.bench ? o.iters : 0;
      std::cout << j.dump() << "\n";
    }
    std::cout << std::flush;
  }
  destroy_process_group();
  return status;
}

}  // namespace
}  // namespace dtensor::op_cli

int main(int argc, char** argv) {
  using namespace dtensor::op_cli;
  using dtensor::conv_cli::error_prefix, dtensor::conv_cli::fail_now,
      dtensor::conv_cli::out_of_memory;
  Options o;
  try {
    o = parse_options(std::vector<std::string>(argv + 1, argv + argc));
    if (o.help) {
      std::cout << help_text();
      return exit_code::kOk;
    }
    // The world size comes from the launcher's environment, which every rank
    // reads alike: checking against it needs no communication.
    const int world_size = dtensor::resolve_init_options({}).world_size;
    resolve_for_world(o, world_size);
    check_device(o, dtensor::cuda::is_available(), dtensor::cuda::unavailable_reason());
  } catch (const UsageError& e) {
    return usage_error(e.what());
  } catch (const dtensor::Error& e) {
    return usage_error(e.what());  // e.g. a malformed DTENSOR_WORLD_SIZE
  }
  try {
    return run(o);
  } catch (const dtensor::InvalidArgument& e) {
    // Raised alike on every rank from the same global shapes: an argument the
    // checks above let through.
    fail_now(fmt::format("{}invalid {}: {}\n{}", error_prefix("dtensor-op"), op_name(o.op),
                         e.what(), usage_line()),
             exit_code::kUsage);
  } catch (const std::bad_alloc&) {
    fail_now(error_prefix("dtensor-op") +
                 out_of_memory(fmt::format("--input {}", fmt::join(o.input, ","))),
             exit_code::kUsage);
  } catch (const std::exception& e) {
    fail_now(error_prefix("dtensor-op") + e.what(), exit_code::kError);
  }
}
