#include "tools/dtensor-op/run.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <new>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dtensor/core/distributed.h"
#include "dtensor/core/errors.h"
#include "dtensor/cuda.h"
#include "tools/cli/failure.h"
#include "tools/cli/memory.h"
#include "tools/cli/traffic.h"
#include "tools/dtensor-op/dump.h"

namespace dtensor::op_cli {
namespace {

double all_reduce(double v, ReduceOp op) {
  Tensor t = Tensor::full({1}, v, DType::F64);
  world()->allreduce(t, op);
  return t.item({0});
}

double mb(const Tensor& t) {
  return static_cast<double>(t.numel() * static_cast<std::int64_t>(dtype_size(t.dtype()))) /
         (1024.0 * 1024.0);
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
  Forward forward;
  std::optional<DTensor> grad_output;
  Grads grads;
  // Everything this rank sent during the forward: the halos, and whatever
  // redistribution the propagator asked for.
  double forward_bytes_sent = 0;
  // The MiB this rank must hold for the passes: its operands, the halo it
  // received, the output, and in backward grad_output and the gradients.
  double tensor_mb = 0;
};

Passes run_passes(const Options& o, const DeviceMesh& mesh, const Operands& ops,
                  const Seeds& seeds) {
  const cli::Traffic before = cli::traffic(mesh);
  Passes p{run_forward(o, ops), std::nullopt, {}};
  const cli::Traffic after = cli::traffic(mesh);
  p.forward_bytes_sent = static_cast<double>(after.sent - before.sent);
  if (o.backward) {
    if (o.has_grad_output()) p.grad_output = make_grad_output(o, p.forward.output, seeds);
    p.grads = run_backward(o, ops, p.grad_output);
  }
  double& t = p.tensor_mb;
  t = static_cast<double>(after.received - before.received) / (1024.0 * 1024.0);
  for (const std::optional<DTensor>* d : std::initializer_list<const std::optional<DTensor>*>{
           &ops.weight, &ops.bias, &ops.running_mean, &ops.running_var, &ops.target, &ops.other,
           &p.grad_output, &p.grads.grad_input, &p.grads.grad_weight, &p.grads.grad_bias,
           &p.grads.grad_other})
    if (*d) t += mb((*d)->to_local());
  t += mb(ops.input.to_local()) + mb(p.forward.output.to_local());
  for (const auto& x : ops.more_inputs)
    t += mb(x.to_local());
  for (const auto& x : p.grads.grad_more_inputs)
    t += mb(x.to_local());
  return p;
}

int run(const Options& o, const Face& face) {
  init_process_group(init_options(o));
  const int rank = get_rank(), world_size = get_world_size();
  const DeviceMesh mesh(o.device, o.mesh);
  const Seeds seeds = Seeds::from(o.seed);
  // What the process holds before any tensor exists: code, libraries,
  // runtime (read only where the face measures memory).
  const cli::ResidentSet base = face.measure_memory ? cli::resident_now() : cli::ResidentSet{};
  const Operands ops = make_operands(o, mesh, seeds);

  // With measure_memory, the first passes page in library code and
  // JIT-compile oneDNN's kernels: their peak is what a process's first step
  // costs (`rss_ratio`). Their results are dropped, the peak is reset, and
  // the same passes run again: the second peak, less mapped files, is the
  // private memory a rank holds step after step (`rss_ratio_private`). The
  // second passes' results are the ones reported, checked and dumped.
  double first_rss = 0;
  std::optional<MemoryFigures> memory;
  bool peak_was_reset = false;
  if (face.measure_memory) {
    run_passes(o, mesh, ops, seeds);  // the results go at once
    first_rss = cli::peak_rss_mb();
    peak_was_reset = cli::reset_peak_rss();
  }
  const Passes passes = run_passes(o, mesh, ops, seeds);
  if (face.measure_memory) {
    const double tensors = passes.tensor_mb;
    const double steady_rss = cli::peak_rss_mb();
    const cli::ResidentSet steady = cli::resident_now();
    // Private memory at the second passes' peak: their peak less the mapped
    // files (which no longer grow by then: the first passes paged them in),
    // over what the process held before any tensor existed.
    const double private_mb = steady_rss - steady.file_mb - steady.shmem_mb - base.anon_mb;
    // The rank whose peak is highest relative to what it holds speaks for all.
    MemoryFigures m;
    m.rss_ratio = all_reduce(first_rss / tensors, ReduceOp::Max);
    m.rss_ratio_net = all_reduce((first_rss - base.total_mb()) / tensors, ReduceOp::Max);
    // Null unless every rank could reset its peak (a collective: all ask).
    const bool all_reset = all_reduce(peak_was_reset ? 0.0 : 1.0, ReduceOp::Max) == 0;
    const double private_ratio = all_reduce(private_mb / tensors, ReduceOp::Max);
    if (all_reset) m.rss_ratio_private = private_ratio;
    m.tensor_mb = all_reduce(tensors, ReduceOp::Max);
    m.passes_peak_rss_mb = all_reduce(first_rss, ReduceOp::Max);
    memory = m;
  }
  const double bytes_max = all_reduce(passes.forward_bytes_sent, ReduceOp::Max);
  const double bytes_total = all_reduce(passes.forward_bytes_sent, ReduceOp::Sum);

  std::optional<BenchTimes> bench;
  if (o.bench) bench = face.bench(o, mesh, ops, seeds);

  // Rank 0 judges; the verdict is broadcast so that every rank exits alike.
  const DTensor& y = passes.forward.output;
  int status = exit_code::kOk;
  std::vector<TensorCheck> checks;
  if (o.check || o.dump) {
    const GlobalTensors g =
        gather_global(o, seeds, passes.forward, passes.grad_output, passes.grads);
    if (rank == 0) {
      if (o.check) {
        checks = check_against_reference(o, g, world_size);
        for (const auto& c : checks)
          if (!c.ok) status = exit_code::kCheckFailed;
      }
      if (o.dump) {
        try {
          write_dump(*o.dump, face.dump_meta(o, world_size, y.placements(), g), g);
        } catch (const std::exception& e) {
          std::cerr << face.program << ": " << e.what() << std::endl;
          status = exit_code::kError;
        }
      }
    }
  }
  Tensor verdict = Tensor::full({1}, status, DType::F64);
  world()->broadcast(verdict, 0);
  status = static_cast<int>(verdict.item({0}));
  const double rss = all_reduce(std::max(first_rss, cli::peak_rss_mb()), ReduceOp::Max);

  if (rank == 0) {
    face.report(RunReport{o, world_size, mesh.device().str(), ops, passes.forward, bytes_max,
                          bytes_total, rss, memory, checks, bench, status});
    std::cout << std::flush;
  }
  destroy_process_group();
  return status;
}

int usage_error(const Face& face, const std::string& message) {
  std::cerr << face.program << ": " << message << "\n" << face.usage_line() << std::endl;
  return exit_code::kUsage;
}

}  // namespace

int tool_main(const Face& face, int argc, char** argv) {
  using cli::error_prefix, cli::fail_now, cli::out_of_memory;
  Options o;
  try {
    o = face.parse(std::vector<std::string>(argv + 1, argv + argc));
    if (o.help) {
      std::cout << face.help_text();
      return exit_code::kOk;
    }
    // The world size comes from the launcher's environment, which every rank
    // reads alike: checking against it needs no communication.
    const int world_size = dtensor::resolve_init_options({}).world_size;
    cli::resolve_mesh(o.mesh, o.placements, o.input, world_size);
    cli::check_device(o.device, [] {
      return cli::CudaAvailability{dtensor::cuda::is_available(),
                                   dtensor::cuda::unavailable_reason()};
    });
  } catch (const UsageError& e) {
    return usage_error(face, e.what());
  } catch (const dtensor::Error& e) {
    return usage_error(face, e.what());  // e.g. a malformed DTENSOR_WORLD_SIZE
  }
  try {
    return run(o, face);
  } catch (const dtensor::InvalidArgument& e) {
    if (!face.invalid_argument_is_usage)
      fail_now(error_prefix(face.program) + e.what(), exit_code::kError);
    // Raised alike on every rank from the same global shapes: an argument the
    // checks above let through.
    fail_now(fmt::format("{}invalid {}: {}\n{}", error_prefix(face.program), o.name(), e.what(),
                         face.usage_line()),
             exit_code::kUsage);
  } catch (const std::bad_alloc&) {
    fail_now(error_prefix(face.program) +
                 out_of_memory(
                     fmt::format("--input {}{}", fmt::join(o.input, ","), face.oom_sizes_hint)),
             exit_code::kUsage);
  } catch (const std::exception& e) {
    fail_now(error_prefix(face.program) + e.what(), exit_code::kError);
  }
}

}  // namespace dtensor::op_cli
