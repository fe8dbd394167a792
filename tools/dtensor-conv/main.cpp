// dtensor-conv: runs one tensor-parallel convolution on seeded data and checks
// (--check), dumps (--dump) and times (--bench) it. See `dtensor-conv --help`
// and docs/cli.md.
//
// Failure policy: argument errors are found before init_process_group, from
// the arguments and the launcher's environment alone, so every rank reaches
// the same verdict and exits 2 without waiting for anyone. After init, rank 0
// decides --check and --dump outcomes and broadcasts them, so every rank exits
// with the same status. A library error exits 3 at once (_Exit, no final
// barrier: a peer that did not fail would wait in it; our closed connections
// make such peers fail instead, and dtensor-run stops them anyway).
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dtensor/core/distributed.h"
#include "dtensor/core/errors.h"
#include "dtensor/cuda.h"
#include "dtensor/ops/convolution.h"
#include "tools/dtensor-conv/bench.h"
#include "tools/dtensor-conv/check.h"
#include "tools/dtensor-conv/dump.h"
#include "tools/dtensor-conv/failure.h"
#include "tools/dtensor-conv/json.h"
#include "tools/dtensor-conv/memory.h"
#include "tools/dtensor-conv/options.h"
#include "tools/dtensor-conv/problem.h"

namespace dtensor::conv_cli {
namespace {

int usage_error(const std::string& message) {
  std::cerr << "dtensor-conv: " << message << "\n" << usage_line() << std::endl;
  return exit_code::kUsage;
}

double all_max(double v) {
  Tensor t = Tensor::full({1}, v, DType::F64);
  world()->allreduce(t, ReduceOp::Max);
  return t.item({0});
}

double all_sum(double v) {
  Tensor t = Tensor::full({1}, v, DType::F64);
  world()->allreduce(t, ReduceOp::Sum);
  return t.item({0});
}

double mb(const Tensor& t) {
  return static_cast<double>(t.numel() * static_cast<std::int64_t>(dtype_size(t.dtype()))) /
         (1024.0 * 1024.0);
}

std::optional<double> ratio(const std::optional<double>& a, const std::optional<double>& b) {
  if (!a || !b || *b <= 0) return std::nullopt;
  return *a / *b;
}

std::optional<double> gflops(double flops, const std::optional<double>& ms) {
  if (!ms || *ms <= 0) return std::nullopt;
  return flops / (*ms * 1e-3) / 1e9;
}

std::vector<std::string> strings(const Placements& ps) {
  std::vector<std::string> out;
  for (const auto& p : ps)
    out.push_back(p.str());
  return out;
}

std::optional<double> opt(double v) {
  return v;
}

// CUDA tensors need a backend that serves them: NCCL unless DTENSOR_BACKEND
// names one (e.g. cpu:gloo,cuda:gloo for ranks that share a GPU).
InitOptions init_options(const Options& o) {
  InitOptions io;
  if (o.device == DeviceType::CUDA && !std::getenv("DTENSOR_BACKEND")) io.backend = "nccl";
  return io;
}

// One forward (and backward, with --backward) on the operands, and what it
// cost.
struct Passes {
  DTensor y;
  std::optional<DTensor> grad_output;
  std::optional<ConvGrads> grads;
  // Everything this rank sent during the forward: the halos, and whatever
  // redistribution the propagator asked for.
  double forward_bytes_sent = 0;
  // The MiB this rank must hold for the passes: its input, the halo it
  // received, weights, output, and in backward grad_output and the gradients.
  double tensor_mb = 0;
};

Passes run_passes(const Options& o, const DeviceMesh& mesh, const Operands& ops,
                  const ConvParams& params, const Seeds& seeds) {
  const Traffic before = traffic(mesh);
  Passes p{convolution(ops.input, ops.weight, ops.bias, params), std::nullopt, std::nullopt};
  const Traffic after = traffic(mesh);
  p.forward_bytes_sent = static_cast<double>(after.sent - before.sent);
  if (o.backward) {
    p.grad_output = make_grad_output(o, p.y, seeds);
    p.grads =
        convolution_backward(*p.grad_output, ops.input, ops.weight, params, {true, true, o.bias});
  }
  double& t = p.tensor_mb;
  t = mb(ops.input.to_local()) + mb(ops.weight.to_local()) + mb(p.y.to_local()) +
      static_cast<double>(after.received - before.received) / (1024.0 * 1024.0);
  if (ops.bias) t += mb(ops.bias->to_local());
  if (p.grad_output) t += mb(p.grad_output->to_local());
  if (p.grads)
    for (const auto* g : {&p.grads->grad_input, &p.grads->grad_weight, &p.grads->grad_bias})
      if (*g) t += mb((*g)->to_local());
  return p;
}

int run(const Options& o) {
  init_process_group(init_options(o));
  const int rank = get_rank(), world_size = get_world_size();
  const DeviceMesh mesh(o.device, o.mesh);
  const Seeds seeds = Seeds::from(o.seed);
  const ConvParams params = o.conv_params();
  // What the process holds before any tensor exists: code, libraries, runtime.
  const ResidentSet base = resident_now();
  const Operands ops = make_operands(o, mesh, seeds);

  // The first passes page in library code and JIT-compile oneDNN's kernels:
  // their peak is what a process's first step costs (`rss_ratio`). Their
  // results are dropped, the peak is reset, and the same passes run again:
  // the second peak, less mapped files, is the private memory a rank holds
  // step after step (`rss_ratio_private`). The second passes' results are
  // the ones reported, checked and dumped.
  run_passes(o, mesh, ops, params, seeds);  // the results go at once
  const double first_rss = peak_rss_mb();
  const bool peak_was_reset = reset_peak_rss();
  const Passes passes = run_passes(o, mesh, ops, params, seeds);
  const double tensors = passes.tensor_mb;
  const DTensor& y = passes.y;
  const std::optional<DTensor>& gy = passes.grad_output;
  const std::optional<ConvGrads>& grads = passes.grads;
  const double fwd_bytes = passes.forward_bytes_sent;
  const double steady_rss = peak_rss_mb();
  const ResidentSet steady = resident_now();
  // Private memory at the second passes' peak: their peak less the mapped
  // files (which no longer grow by then: the first passes paged them in),
  // over what the process held before any tensor existed.
  const double private_mb = steady_rss - steady.file_mb - steady.shmem_mb - base.anon_mb;

  // The rank whose peak is highest relative to what it holds speaks for all.
  const double rss_ratio = all_max(first_rss / tensors);
  const double rss_ratio_net = all_max((first_rss - base.total_mb()) / tensors);
  // Null unless every rank could reset its peak (a collective: all ask).
  const bool all_reset = all_max(peak_was_reset ? 0.0 : 1.0) == 0;
  const double private_ratio = all_max(private_mb / tensors);
  const std::optional<double> rss_ratio_private =
      all_reset ? std::optional(private_ratio) : std::nullopt;
  const double tensors_max = all_max(tensors), passes_rss_max = all_max(first_rss);
  const double bytes_max = all_max(fwd_bytes), bytes_total = all_sum(fwd_bytes);

  std::optional<BenchTimes> bench;
  if (o.bench) bench = run_bench(o, mesh, ops, seeds);

  // Rank 0 judges; the verdict is broadcast so that every rank exits alike.
  int status = exit_code::kOk;
  std::vector<TensorCheck> checks;
  if (o.check || o.dump) {
    const GlobalTensors g = gather_global(o, seeds, y, gy, grads);
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
          std::cerr << "dtensor-conv: " << e.what() << std::endl;
          status = exit_code::kError;
        }
      }
    }
  }
  Tensor verdict = Tensor::full({1}, status, DType::F64);
  world()->broadcast(verdict, 0);
  status = static_cast<int>(verdict.item({0}));
  const double rss = all_max(std::max(first_rss, peak_rss_mb()));

  if (rank == 0) {
    const Shape& ws = ops.weight.shape();
    // 2 * N * OC * prod(O) * C/groups * prod(k), the dense forward's flops.
    double flops = 2.0 * static_cast<double>(shape_numel(y.shape()));
    for (std::size_t i = 1; i < ws.size(); ++i)
      flops *= static_cast<double>(ws[i]);  // C/groups * prod(k)

    std::cout << fmt::format(
        "dtensor-conv: {} rank(s), mesh {} on {}, input {} {} placed {}, weight {}{}\n"
        "  {}\n  output {} placed {}; one forward sent {} bytes per rank (max), {} in all\n",
        world_size, shape_str(o.mesh), mesh.device().str(), shape_str(o.input), dtype_name(o.dtype),
        placements_str(o.placements), shape_str(ws), o.bias ? " + bias" : "", params.str(),
        shape_str(y.shape()), placements_str(y.placements()), bytes_max, bytes_total);
    for (const auto& c : checks)
      std::cout << fmt::format(
          "  check {:<12} max|err| {:.3e}  tol {:.3e}  (max|ref| {:.3e})  {}\n", c.name,
          c.max_abs_err, c.tolerance, c.ref_max, c.ok ? "ok" : "OVER TOLERANCE");
    if (bench) {
      std::cout << fmt::format("  bench forward  {:.3f} ms, local kernel {:.3f} ms ({} iters)\n",
                               *bench->fwd_ms, *bench->local_fwd_ms, o.iters);
      if (bench->bwd_ms)
        std::cout << fmt::format("  bench backward {:.3f} ms, local kernel {:.3f} ms\n",
                                 *bench->bwd_ms, *bench->local_bwd_ms);
    }
    if (o.dump && status != exit_code::kError) std::cout << "  dump written to " << *o.dump << "\n";

    if (o.json) {
      JsonObject errs, tols;
      for (const auto& c : checks) {
        errs.add(c.name, c.max_abs_err);
        tols.add(c.name, c.tolerance);
      }
      const BenchTimes b = bench.value_or(BenchTimes{});
      JsonObject j;
      j.add("ok", status == exit_code::kOk);
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
          .add("halo_bytes_sent_per_rank", opt(bytes_max))
          .add("halo_bytes_sent_total", opt(bytes_total))
          .add("peak_rss_mb", opt(rss))
          .add("passes_peak_rss_mb", opt(passes_rss_max))
          .add("tensor_mb", opt(tensors_max))
          .add("rss_ratio", opt(rss_ratio))
          .add("rss_ratio_net", opt(rss_ratio_net))
          .add("rss_ratio_private", rss_ratio_private)
          .add("world_size", world_size)
          .add("mesh", o.mesh)
          .add("placements", strings(o.placements))
          .add("output_placements", strings(y.placements()))
          .add("input", o.input)
          .add("weight", ws)
          .add("output", y.shape())
          .add("dtype", std::string(dtype_name(o.dtype)))
          .add("device", mesh.device().str())
          .add("iters", o.bench ? o.iters : 0);
      std::cout << j.str() << "\n";
    }
    std::cout << std::flush;
  }
  destroy_process_group();
  return status;
}

}  // namespace
}  // namespace dtensor::conv_cli

int main(int argc, char** argv) {
  using namespace dtensor::conv_cli;
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
  } catch (const std::bad_alloc&) {
    fail_now(error_prefix("dtensor-conv") +
                 out_of_memory(fmt::format("--input {} (with --out-channels and --kernel)",
                                           fmt::join(o.input, ","))),
             exit_code::kUsage);
  } catch (const std::exception& e) {
    fail_now(error_prefix("dtensor-conv") + e.what(), exit_code::kError);
  }
}
