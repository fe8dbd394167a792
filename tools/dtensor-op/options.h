// Command line of dtensor-op, parsed (CLI11) and validated apart from running
// anything, so that the tests can check the rules without starting processes.
//
// The same failure policy as dtensor-conv (tools/cli/command_line.h):
// parse_options (the arguments alone) and resolve_for_world (the world size
// the launcher set) run on every rank before any communication, so every
// rank reaches the same verdict, and a bad argument exits 2 everywhere with
// a message that starts with the offending option.
//
// Every parameter is resolved here: defaults filled in (PyTorch's) and every
// per-dim list spelled out for the input's spatial dims, so that the run,
// the oracle and meta.json all read the same values.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dtensor/core/dtype.h"
#include "dtensor/core/shape.h"
#include "dtensor/ops/activations.h"
#include "dtensor/ops/conv_params.h"
#include "dtensor/ops/kernels/elementwise_math.h"
#include "dtensor/ops/losses.h"
#include "dtensor/ops/upsample.h"
#include "dtensor/ops/window_ops.h"
#include "dtensor/placement/placement.h"
#include "tools/cli/command_line.h"

namespace dtensor::op_cli {

// The exit codes and the usage error are both command lines' (tools/cli).
namespace exit_code = cli::exit_code;
using cli::UsageError;

enum class OpKind {
  // The window operators.
  Conv,
  ConvTranspose,
  MaxPool,
  AvgPool,
  AdaptiveAvgPool,
  AdaptiveMaxPool,
  Pad,
  // The U-Net operators.
  Upsample,
  BatchNorm,
  GroupNorm,
  InstanceNorm,
  LayerNorm,
  Cat,
  LeakyRelu,
  Gelu,
  Silu,
  Sigmoid,
  Tanh,
  Relu,
  MseLoss,
  CrossEntropy,
  // The tensor API: binary operators with broadcasting.
  Add,
  Sub,
  Mul,
  Div,
  Maximum,
  Minimum,
// The tensor API: unary functions, the plain ones by their list's NAME
// (DTENSOR_PLAIN_UNARY_FUNCTIONS: Exp, Log, Sqrt, Rsqrt, Neg, Abs, Square).
#define DTENSOR_PLAIN_KIND(NAME, FUNCTION, OP, POSITIVE, LINEAR) NAME,
  DTENSOR_PLAIN_UNARY_FUNCTIONS(DTENSOR_PLAIN_KIND)
#undef DTENSOR_PLAIN_KIND
      Clamp,
  Pow,
  // Shape operators (views).
  Reshape,
  Permute,
  Transpose,
  Flatten,
  Narrow,
  // Reductions over dims, and softmax / log_softmax along one dim.
  Sum,
  Mean,
  Amax,
  Amin,
  Var,
  Softmax,
  LogSoftmax,
  // Losses of one term per element (beside mse_loss).
  L1Loss,
  SmoothL1Loss,
  HuberLoss,
  BinaryCrossEntropyWithLogits,
  // Dropout (its mask from --seed).
  Dropout,
  // F.linear over the last dim.
  Linear,
};

/// The groups of operators that share the generic code's choices (which
/// operands exist, how the backward is called, which input ranks are valid).
enum class Family {
  Window,      // conv .. pad: spatial input, per-dim windows
  Upsample,    // spatial input, no window
  Norm,        // weight and bias when affine
  Cat,         // K inputs
  Activation,  // one input, one output of its shape
  Loss,        // a target; a 0-d output; no grad_output
  Binary,      // an `other` operand; backward through autograd
  Unary,       // backward through autograd
  View,        // any rank 1..5; backward through autograd
  Reduction,   // backward through autograd
  Softmax,     // backward through autograd
  Dropout,
  Linear,  // weight [K, in] and bias
};

/// "conv", "conv_transpose", "max_pool", ... (the OP argument's spelling).
std::string_view op_name(OpKind op);

struct Options {
  OpKind op = OpKind::Conv;

  // Common options, as dtensor-conv's.
  Shape mesh;             // --mesh; empty until resolve_for_world
  Placements placements;  // --placements; empty until resolve_for_world
  Shape input{2, 4, 16, 16};
  DType dtype = DType::F32;
  DeviceType device = DeviceType::CPU;
  std::uint64_t seed = 0;
  bool backward = false;
  bool check = false;
  std::optional<std::string> dump;
  bool bench = false;
  int iters = 10;
  int warmup = 2;
  bool json = false;
  bool help = false;

  // The operator's parameters, resolved: lists hold one entry per spatial
  // dim; those that do not apply to the op keep their defaults.
  std::vector<std::int64_t> kernel;              // conv, conv_transpose, pools (default 3)
  std::vector<std::int64_t> stride;              // default 1; a pool's: its kernel
  std::vector<std::int64_t> dilation;            // default 1
  ConvParams::Padding padding;                   // (left, right) per dim; default 0
  bool ceil_mode = false;                        // max_pool, avg_pool
  bool count_include_pad = false;                // avg_pool (--count-include-pad)
  std::optional<std::int64_t> divisor_override;  // avg_pool
  std::vector<std::int64_t> output_size;         // adaptive pools (required)
  std::int64_t out_channels = 0;                 // conv, conv_transpose (default C)
  std::int64_t groups = 1;
  bool bias = true;                          // --no-bias clears it; the norms: equal to `affine`
  std::vector<std::int64_t> output_padding;  // conv_transpose (default 0)
  PaddingMode padding_mode = PaddingMode::Zeros;
  PadMode mode = PadMode::Constant;  // pad
  double value = 0.0;                // pad, constant mode

  // upsample: exactly one of size and scale is filled (one entry per dim).
  UpsampleMode upsample_mode = UpsampleMode::Nearest;  // --mode nearest|linear
  std::vector<std::int64_t> size;                      // --size
  std::vector<double> scale;                           // --scale
  bool align_corners = false;                          // --align-corners (linear)

  // Normalisations (PyTorch's defaults).
  std::int64_t num_groups = 0;  // group_norm (required)
  double eps = 1e-5;
  double momentum = 0.1;  // batch_norm
  bool affine = true;     // --no-affine clears it: no weight, no bias
  bool training = true;   // batch_norm; --eval clears it

  // cat: `inputs` tensors, input k of shape `input` with dim 1 = channels[k]
  // (`input` itself is input 0's shape once parsed).
  std::int64_t inputs = 1;             // --inputs (cat: default 2)
  std::vector<std::int64_t> channels;  // cat: one per input
  std::int64_t cat_dim = 1;            // resolved to 0..rank-1

  // Activations.
  double negative_slope = 0.01;                         // leaky_relu
  GeluApproximate approximate = GeluApproximate::None;  // gelu

  // Losses: a seeded target placed like the input.
  LossReduction reduction = LossReduction::Mean;
  double beta = 1.0;   // smooth_l1_loss (>= 0)
  double delta = 1.0;  // huber_loss (> 0)

  // cross_entropy's target and F.cross_entropy's options (--target,
  // --ignore-index, --label-smoothing; PyTorch's defaults).
  bool class_indices = false;  // --target indices: an i64 target [N, spatial...]
  std::int64_t ignore_index = -100;
  double label_smoothing = 0.0;  // in [0, 1]

  // dropout: the probability of zeroing an element (PyTorch's default).
  double p = 0.5;

  // linear: weight [out_features, in_features] (in: the input's last dim).
  std::int64_t out_features = 0;  // --out-features (default: in_features)

  // The tensor API. Binary operators: the other operand's shape,
  // broadcastable to the input's (default: the input's).
  Shape other_shape;
  std::optional<double> min, max;  // clamp: at least one
  double exponent = 1.0;           // pow (required)

  // Shape operators, resolved: reshape's -1 filled in, dims and narrow's
  // start made non-negative.
  Shape shape;                                  // reshape (--shape, required)
  std::vector<std::int64_t> order;              // permute (--order, required)
  std::int64_t dim0 = 0, dim1 = 0;              // transpose (required)
  std::int64_t start_dim = 1, end_dim = -1;     // flatten (defaults 1, -1)
  std::int64_t dim = 0, start = 0, length = 0;  // narrow (required); dim: softmax too
  // Reductions: the reduced dims, resolved (default every dim, negatives
  // made non-negative, sorted); softmax, log_softmax: `dim` above
  // (required, resolved non-negative).
  std::vector<std::int64_t> dims;
  bool keepdim = false;
  double correction = 1.0;  // var

  // The options a row declares for itself (OpEntry::declared_options) that
  // were given: name -> text ("" for a flag). Read through
  // entries/declared_options.h.
  std::map<std::string, std::string, std::less<>> declared;

  std::int64_t spatial_dims() const { return static_cast<std::int64_t>(input.size()) - 2; }
  std::string_view name() const;  // op_name(op)
  Family family() const;          // the op table's row's
  bool is_window() const;         // conv .. pad
  bool is_norm() const;           // batch_norm, group_norm, instance_norm, layer_norm
  bool is_activation() const;     // leaky_relu, gelu, silu, sigmoid, tanh, relu
  bool is_loss() const;           // mse_loss, cross_entropy and the pointwise losses
  /// l1_loss, smooth_l1_loss, huber_loss, binary_cross_entropy_with_logits.
  bool is_pointwise_loss() const;
  bool is_binary() const;     // add, sub, mul, div, maximum, minimum
  bool is_unary() const;      // the plain unary functions, clamp, pow
  bool is_view() const;       // reshape, permute, transpose, flatten, narrow
  bool is_reduction() const;  // sum, mean, amax, amin, var
  bool is_softmax() const;    // softmax, log_softmax
  /// log, sqrt, rsqrt and pow draw their input in [0.5, 1.5) (1 + rand / 2).
  bool positive_input() const;
  /// conv, conv_transpose and linear have a weight (and a bias unless
  /// --no-bias); so do the normalisations unless --no-affine (both or
  /// neither).
  bool has_weight() const;
  /// batch_norm has running statistics (seeded, replicated).
  bool has_running_stats() const { return op == OpKind::BatchNorm; }
  /// The backward starts from a seeded grad_output (the losses' from 1).
  bool has_grad_output() const { return !is_loss(); }
  /// conv: [K, C/g, k...]; conv_transpose: [C, K/g, k...]; linear: [K, in];
  /// the norms' [C] (layer_norm's [C, spatial...]); empty otherwise.
  Shape weight_shape() const;
  /// conv, conv_transpose, linear: [K]; the norms': the weight's.
  Shape bias_shape() const;
  /// Input k's global shape (cat: dim 1 is channels[k]; otherwise `input`).
  Shape input_shape(std::int64_t k = 0) const;
  /// The global output shape, from PyTorch's formulas (computed here); a
  /// loss's is 0-d; a reduction's drops (or, with keepdim, keeps as 1) its dims.
  Shape output_shape() const;

  ConvParams conv_params() const;
  ConvTransposeParams conv_transpose_params() const;
  PoolParams pool_params() const;
  UpsampleParams upsample_params() const;
};

/// Parses the arguments after argv[0] (OP first or anywhere). Throws
/// UsageError naming the option (or "OP"). With --help nothing is checked.
Options parse_options(const std::vector<std::string>& args);

std::string usage_line();
std::string help_text();

}  // namespace dtensor::op_cli
