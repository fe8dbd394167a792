// A halo chain's layers as its handlers read them (Chain), decoded once per
// call from its typed form (halo_chain_call.h) and cached on the schema, and
// each window layer's geometry as the plan reads it (halo_chain_plan.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtensor/ops/activations.h"
#include "dtensor/ops/conv_params.h"
#include "dtensor/ops/halo_chain.h"
#include "dtensor/ops/kernels/pool.h"
#include "dtensor/ops/op_schema.h"
#include "dtensor/ops/window.h"
#include "dtensor/ops/window_ops.h"
#include "ops/norm/stat_reduction.h"
#include "ops/window/halo_chain_plan.h"

namespace dtensor::halo::chain {

// A layer as the operators read it: its parameters, and its DTensors'
// indices among the call's DTensor arguments (-1: none).
struct Layer {
  bool conv = false;
  bool pool = false;
  bool upsample = false;
  bool conv_transpose = false;
  bool activation = false;  // none of these: a norm
  bool batch = false;       // a norm: batch_norm, else group_norm
  std::string op{};         // an activation's operator
  double negative_slope = 0;
  GeluApproximate approximate = GeluApproximate::None;
  bool norm() const { return !conv && !pool && !upsample && !conv_transpose && !activation; }
  // A norm whose statistics are the input's (they cross ranks): a group
  // norm, or a batch norm in training. A batch norm in eval mode normalises
  // with its running statistics: element-wise, as an activation.
  bool statistics() const { return norm() && (!batch || training); }
  norm::NormKind kind() const { return batch ? norm::NormKind::Batch : norm::NormKind::Group; }
  // The layers the plan widens the range for (halo_chain_plan.h's steps).
  bool windowed() const { return conv || pool || upsample || conv_transpose; }
  ConvParams params{};   // expanded to the spatial rank; padding explicit
  bool average = false;  // a pool: avg_pool, else max_pool
  PoolParams pool_params{};
  kernels::AvgDivisor divisor{};               // an avg_pool's
  std::vector<WindowDim> resample{};           // an upsample's, per spatial dim
  ConvTransposeParams transposed{};            // a transposed convolution's (expanded)
  std::vector<detail::ChainWindowDim> dims{};  // a window layer's
  Boundary boundary = Boundary::Zeros;         // a convolution's padding mode
  std::int64_t channels = 0;                   // its output's
  std::int64_t num_groups = 1;
  double eps = 0;
  bool relu = false;
  int weight = -1, bias = -1;
  bool training = true;  // a batch norm's
  double momentum = 0;
  int running_mean = -1, running_var = -1;
  // A batch norm that updates its running statistics: the forward's output
  // holding the updated mean (the variance is the next).
  int running_output = -1;
};

// The call as the handlers read it, made once per call from its typed form
// (halo_chain_call.h) and cached on the schema.
struct Chain {
  std::vector<Layer> layers;
  std::size_t num_windowed = 0;  // convolutions, pools, upsamples and transposed convolutions
  int num_running = 0;           // batch norms that update running statistics
  bool resamples = false;        // a window layer changes the length (halo_chain_plan.h)
  Shape output_shape;            // the chain's output's (global)
  // Index of the input among the DTensor arguments (1 in the backward).
  int input = 0;
  // The backward only: whether the input's gradient is wanted (when not,
  // the first convolution's backward-data and the exchange are skipped).
  bool input_grad = true;
};

// A convolution (parameters expanded to the weight's spatial dims) along
// spatial dim `d`, as the plan reads it.
detail::ChainWindowDim conv_dim(const ConvParams& p, const Shape& weight, std::size_t d);
// A pool (parameters expanded) along spatial dim `d`.
detail::ChainWindowDim pool_dim(const PoolParams& p, std::size_t d);
// An upsample by the whole factor output / length along a dim.
detail::ChainWindowDim upsample_dim(std::int64_t length, std::int64_t output, bool linear);
// A transposed convolution (parameters expanded) along spatial dim `d`.
detail::ChainWindowDim conv_transpose_dim(const ConvTransposeParams& p, const Shape& weight,
                                          std::size_t d);
// Whether a window layer changes the length it passes on.
bool resamples(const detail::ChainWindowDim& d);

// The call's chain (`backward`: a halo_chain_backward call's), decoded once.
const Chain& chain_of(const OpSchema& s, bool backward);

// The window layers along spatial dim `d`, as the plan reads them.
std::vector<detail::ChainWindowDim> window_layers(const Chain& c, std::size_t d);
// The chain as one sliding window per spatial dim (the exchange's).
std::vector<WindowDim> window_dims(const Chain& c, std::int64_t spatial);

}  // namespace dtensor::halo::chain
