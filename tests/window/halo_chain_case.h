// The random chains of tests/window/halo_chain_*tests.cpp: a chain of
// "same" convolutions, group and batch norms, activations, pools, upsamples
// and transposed convolutions drawn at random (Case), run fused and layer by
// layer on real ranks (run), compared in f64 to 1e-12 relative
// (max_relative_error, run_cases); and a counter of the "halo_chain" calls a
// program makes (ChainCounter).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dtensor/core/device_mesh.h"
#include "dtensor/ops/conv_params.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/halo_chain.h"
#include "dtensor/ops/registry.h"
#include "dtensor/ops/window_ops.h"
#include "dtensor/placement/dtensor.h"

namespace dtensor::testing::chain {

// A layer with its global parameters (f64), drawn once, distributed per run.
struct LayerSpec {
  bool conv = false;
  Tensor weight, bias;  // undefined: none
  ConvParams params;
  std::int64_t groups = 1;
  bool relu = false;
  bool batch = false;                               // a norm: batch_norm, else group_norm
  bool training = true;                             // a batch norm's
  Tensor running_mean, running_var;                 // a batch norm's; undefined: none
  std::optional<ChainActivation> activation{};      // set: an activation layer
  std::optional<ChainPool> pool{};                  // set: a pool layer
  std::optional<ChainUpsample> upsample{};          // set: an upsample layer
  std::optional<ConvTransposeParams> transposed{};  // set: a transposed convolution (weight, bias)
};

struct Case {
  Shape shape;
  Placements placements;
  std::vector<LayerSpec> layers;
  bool input_grad = true;      // the input requires grad (else only the parameters)
  bool ring_too_wide = false;  // drawn circular, but a padding wraps more than once
  bool resamples = false;      // a layer has a stride or padding that is not "same"
  bool upsamples = false;      // an upsample layer (then nothing strided)
  std::string what;
};

// The forward output and every gradient (input first, then each parameter
// in order), then the batch norms' updated running statistics, as whole
// tensors; `fused`: as one halo_chain, else layer by layer.
std::vector<Tensor> run(const Case& c, const DeviceMesh& mesh, bool fused, std::uint64_t seed,
                        DType dtype);

// Relative to the larger of the reference's largest value and 1: a gradient
// that is zero analytically (a norm's weight before another norm over the
// same group) comes out as rounding noise either way.
double max_relative_error(const Tensor& a, const Tensor& b);

// `cases` random chains on `mesh`, each fused and layer by layer: every
// result equal within `tolerance` (or the unfused run's own rounding), and
// the draw reaching every kind of layer.
void run_cases(const DeviceMesh& mesh, int cases, std::uint64_t seed, DType dtype = DType::F64,
               double tolerance = 1e-12);

// Counts the calls of "halo_chain" while alive.
class ChainCounter {
 public:
  ChainCounter() {
    HandlerOptions options;
    auto builtin = *current_handler("halo_chain", &options);
    register_op_handler(
        "halo_chain",
        [this, builtin](OpCall& call) {
          ++count;
          arguments.push_back(call.schema().size());
          return builtin(call);
        },
        true, options);
    builtin_ = builtin;
    options_ = options;
  }
  ~ChainCounter() { register_op_handler("halo_chain", builtin_, true, options_); }
  int count = 0;
  std::vector<std::size_t> arguments;  // each chain's: its layers and their kinds, by size

 private:
  OpHandler builtin_;
  HandlerOptions options_;
};

}  // namespace dtensor::testing::chain
