// The layers of torch.nn, with its names, arguments, parameter names and
// default initialisations (kaiming-uniform weights with a = sqrt(5) and
// uniform(+-1/sqrt(fan_in)) biases for convolutions; ones and zeros for
// normalisation), drawn from manual_seed()'s generator.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "dtensor/nn/module.h"
#include "dtensor/ops/activations.h"
#include "dtensor/ops/conv_params.h"
#include "dtensor/ops/halo_chain.h"
#include "dtensor/ops/normalization.h"
#include "dtensor/ops/upsample.h"
#include "dtensor/ops/views.h"
#include "dtensor/ops/window_ops.h"

namespace dtensor::nn {

/// Conv{1,2,3}d's padding, as PyTorch's `padding` argument: one value per
/// spatial dim, or one for all, padded on both sides ({1, 2}: 1 row above and
/// below, 2 columns left and right); or "same" (the output as large as the
/// input: stride 1 only, and when the padding a dim needs is odd the extra
/// one goes on the right, as PyTorch does) or "valid" (no padding). A vector
/// of values, so code that reads it as one keeps working.
struct ConvPadding : std::vector<std::int64_t> {
  enum class Rule { Explicit, Same, Valid };
  using std::vector<std::int64_t>::vector;
  // Implicit, both: `.padding = values` and `.padding = "same"` read as PyTorch's.
  ConvPadding(std::vector<std::int64_t> values) : std::vector<std::int64_t>(std::move(values)) {}
  /// "same" or "valid"; anything else is an InvalidArgument naming `padding`.
  ConvPadding(const char* rule);
  Rule rule = Rule::Explicit;
};

/// Conv{1,2,3}d's keyword arguments.
struct ConvOptions {
  std::vector<std::int64_t> stride{1};
  ConvPadding padding{0};
  std::vector<std::int64_t> dilation{1};
  std::int64_t groups = 1;
  bool bias = true;
  PaddingMode padding_mode = PaddingMode::Zeros;
  DType dtype = DType::F32;
};

/// torch.nn.Conv{N}d: weight [out, in / groups, k...], bias [out].
class Conv : public Module {
 public:
  Conv(std::int64_t spatial_dims, std::int64_t in_channels, std::int64_t out_channels,
       std::vector<std::int64_t> kernel_size, const ConvOptions& options = {});
  DTensor forward(const DTensor& input) override;
  const DTensor& weight() const { return value(weight_); }
  /// This layer as a link of a fused chain (dtensor/ops/halo_chain.h).
  ChainConv chain_layer() const { return {value(weight_), value_if(bias_), params_}; }

 private:
  ConvParams params_;
  Ref weight_;
  std::optional<Ref> bias_;
};
struct Conv1d : Conv {
  Conv1d(std::int64_t in, std::int64_t out, std::int64_t k, const ConvOptions& o = {})
      : Conv(1, in, out, {k}, o) {}
};
struct Conv2d : Conv {
  Conv2d(std::int64_t in, std::int64_t out, std::int64_t k, const ConvOptions& o = {})
      : Conv(2, in, out, {k}, o) {}
  /// A rectangular kernel: {kH, kW}, as PyTorch's kernel_size=(kH, kW).
  Conv2d(std::int64_t in, std::int64_t out, std::vector<std::int64_t> k, const ConvOptions& o = {})
      : Conv(2, in, out, std::move(k), o) {}
};
struct Conv3d : Conv {
  Conv3d(std::int64_t in, std::int64_t out, std::int64_t k, const ConvOptions& o = {})
      : Conv(3, in, out, {k}, o) {}
};

struct ConvTransposeOptions {
  std::vector<std::int64_t> stride{1};
  std::vector<std::int64_t> padding{0};
  std::vector<std::int64_t> output_padding{0};
  std::vector<std::int64_t> dilation{1};
  std::int64_t groups = 1;
  bool bias = true;
  DType dtype = DType::F32;
};

/// torch.nn.ConvTranspose{N}d: weight [in, out / groups, k...], bias [out].
class ConvTranspose : public Module {
 public:
  ConvTranspose(std::int64_t spatial_dims, std::int64_t in_channels, std::int64_t out_channels,
                std::vector<std::int64_t> kernel_size, const ConvTransposeOptions& options = {});
  DTensor forward(const DTensor& input) override;
  /// This layer as a link of a fused chain (dtensor/ops/halo_chain.h).
  ChainConvTranspose chain_layer() const { return {value(weight_), value_if(bias_), params_}; }

 private:
  ConvTransposeParams params_;
  Ref weight_;
  std::optional<Ref> bias_;
};
struct ConvTranspose1d : ConvTranspose {
  ConvTranspose1d(std::int64_t in, std::int64_t out, std::int64_t k,
                  const ConvTransposeOptions& o = {})
      : ConvTranspose(1, in, out, {k}, o) {}
};
struct ConvTranspose2d : ConvTranspose {
  ConvTranspose2d(std::int64_t in, std::int64_t out, std::int64_t k,
                  const ConvTransposeOptions& o = {})
      : ConvTranspose(2, in, out, {k}, o) {}
};
struct ConvTranspose3d : ConvTranspose {
  ConvTranspose3d(std::int64_t in, std::int64_t out, std::int64_t k,
                  const ConvTransposeOptions& o = {})
      : ConvTranspose(3, in, out, {k}, o) {}
};

/// torch.nn.MaxPool{N}d / AvgPool{N}d (the spatial rank follows the input).
class MaxPool : public Module {
 public:
  explicit MaxPool(PoolParams params) : params_(std::move(params)) {}
  DTensor forward(const DTensor& input) override;
  const PoolParams& params() const { return params_; }
  /// This layer as a link of a fused chain (dtensor/ops/halo_chain.h).
  ChainPool chain_layer() const { return {false, params_}; }

 private:
  PoolParams params_;
};
class AvgPool : public Module {
 public:
  explicit AvgPool(PoolParams params) : params_(std::move(params)) {}
  DTensor forward(const DTensor& input) override;
  const PoolParams& params() const { return params_; }
  /// This layer as a link of a fused chain (dtensor/ops/halo_chain.h).
  ChainPool chain_layer() const { return {true, params_}; }

 private:
  PoolParams params_;
};
class AdaptiveAvgPool : public Module {
 public:
  explicit AdaptiveAvgPool(std::vector<std::int64_t> output_size)
      : output_size_(std::move(output_size)) {}
  DTensor forward(const DTensor& input) override;

 private:
  std::vector<std::int64_t> output_size_;
};
class AdaptiveMaxPool : public Module {
 public:
  explicit AdaptiveMaxPool(std::vector<std::int64_t> output_size)
      : output_size_(std::move(output_size)) {}
  DTensor forward(const DTensor& input) override;

 private:
  std::vector<std::int64_t> output_size_;
};
/// torch.nn.LPPool{N}d: lp_pool (the power-average of each window) with
/// norm_type p, the kernel, the stride (empty: the kernel) and ceil_mode.
class LPPool : public Module {
 public:
  LPPool(double norm_type, std::vector<std::int64_t> kernel, std::vector<std::int64_t> stride = {},
         bool ceil_mode = false)
      : norm_type_(norm_type),
        kernel_(std::move(kernel)),
        stride_(std::move(stride)),
        ceil_mode_(ceil_mode) {}
  DTensor forward(const DTensor& input) override;

 private:
  double norm_type_;
  std::vector<std::int64_t> kernel_, stride_;
  bool ceil_mode_;
};
class Upsample : public Module {
 public:
  explicit Upsample(UpsampleParams params) : params_(std::move(params)) {}
  DTensor forward(const DTensor& input) override;
  /// This layer as a link of a fused chain (dtensor/ops/halo_chain.h).
  ChainUpsample chain_layer() const { return {params_}; }

 private:
  UpsampleParams params_;
};

/// torch.nn.ReflectionPad{N}d, ReplicationPad{N}d, CircularPad{N}d,
/// ZeroPad{N}d and ConstantPad{N}d as one module: pad() with `padding` one
/// (left, right) pair for every spatial dim or one per dim, in dim order
/// (F.pad's list is last dim first). In a Sequential, a Pad (reflect,
/// replicate, circular or zeros) right before a Conv without padding of its
/// own joins a halo chain as that convolution padded in the Pad's mode
/// (nn/halo_region.h).
class Pad : public Module {
 public:
  explicit Pad(ConvParams::Padding padding, PadMode mode = PadMode::Constant, double value = 0.0)
      : padding_(std::move(padding)), mode_(mode), value_(value) {}
  DTensor forward(const DTensor& input) override;
  const ConvParams::Padding& padding() const { return padding_; }
  PadMode mode() const { return mode_; }
  double value() const { return value_; }

 private:
  ConvParams::Padding padding_;
  PadMode mode_;
  double value_;
};

/// torch.nn.BatchNorm{N}d: weight, bias [C] (affine); buffers running_mean,
/// running_var and num_batches_tracked (a 0-d tensor of the module's dtype,
/// where PyTorch has int64) when tracking running statistics.
class BatchNorm : public Module {
 public:
  BatchNorm(std::int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true,
            bool track_running_stats = true, DType dtype = DType::F32);
  DTensor forward(const DTensor& input) override;
  /// This layer as a link of a fused chain (dtensor/ops/halo_chain.h): in
  /// training (or without running statistics) with the batch's statistics,
  /// else with its running ones, as forward() chooses.
  ChainBatchNorm chain_layer() const {
    return {value_if(running_mean_),
            value_if(running_var_),
            value_if(weight_),
            value_if(bias_),
            is_training() || !running_mean_,
            momentum_,
            eps_,
            false};
  }
  /// Keeps a training step's running statistics (the chain's,
  /// halo_chain_updating) as forward() keeps its own: they replace the
  /// buffers, and num_batches_tracked counts one more batch.
  void take_running_stats(const DTensor& mean, const DTensor& var);

 private:
  double eps_, momentum_;
  std::optional<Ref> weight_, bias_, running_mean_, running_var_, num_batches_;
};
/// torch.nn.GroupNorm(num_groups, num_channels): weight, bias [C] (affine).
class GroupNorm : public Module {
 public:
  GroupNorm(std::int64_t num_groups, std::int64_t num_channels, double eps = 1e-5,
            bool affine = true, DType dtype = DType::F32);
  DTensor forward(const DTensor& input) override;
  /// forward() then returns activation(group_norm(x)) in one pass (and its
  /// backward takes the activation's gradient): relu(norm(x)) with one read
  /// and one write of the tensor fewer. Parameters and state are unchanged.
  GroupNorm& fuse_activation(NormActivation activation) {
    activation_ = activation;
    return *this;
  }
  /// This layer as a link of a fused chain (dtensor/ops/halo_chain.h).
  ChainGroupNorm chain_layer() const {
    return {groups_, eps_, value_if(weight_), value_if(bias_), activation_ == NormActivation::ReLU};
  }

 private:
  std::int64_t groups_;
  double eps_;
  NormActivation activation_ = NormActivation::None;
  std::optional<Ref> weight_, bias_;
};
/// torch.nn.InstanceNorm{N}d (affine off by default, no running statistics).
class InstanceNorm : public Module {
 public:
  InstanceNorm(std::int64_t num_features, double eps = 1e-5, bool affine = false,
               DType dtype = DType::F32);
  DTensor forward(const DTensor& input) override;
  /// This layer as a link of a fused chain: a group norm with a group per
  /// channel, over an input of `channels` channels (dtensor/ops/halo_chain.h).
  ChainGroupNorm chain_layer(std::int64_t channels) const {
    return {channels, eps_, value_if(weight_), value_if(bias_), false};
  }

 private:
  double eps_;
  std::optional<Ref> weight_, bias_;
};
/// torch.nn.LayerNorm(normalized_shape = input.shape[1:]): weight, bias of that shape.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                     DType dtype = DType::F32);
  DTensor forward(const DTensor& input) override;

 private:
  double eps_;
  std::optional<Ref> weight_, bias_;
};

struct ReLU : Module {
  DTensor forward(const DTensor& input) override;
};
struct LeakyReLU : Module {
  explicit LeakyReLU(double negative_slope = 0.01) : slope(negative_slope) {}
  DTensor forward(const DTensor& input) override;
  double slope;
};
struct GELU : Module {
  explicit GELU(GeluApproximate approximate = GeluApproximate::None) : approximate(approximate) {}
  DTensor forward(const DTensor& input) override;
  GeluApproximate approximate;
};
struct SiLU : Module {
  DTensor forward(const DTensor& input) override;
};
struct Sigmoid : Module {
  DTensor forward(const DTensor& input) override;
};
struct Tanh : Module {
  DTensor forward(const DTensor& input) override;
};

// Shape layers (dtensor/ops/views.h; their placements follow the view rules).

/// torch.nn.Flatten: dims start_dim..end_dim merged (defaults: all but the batch dim).
struct Flatten : Module {
  explicit Flatten(std::int64_t start = 1, std::int64_t end = -1)
      : start_dim(start), end_dim(end) {}
  DTensor forward(const DTensor& input) override;
  std::int64_t start_dim, end_dim;
};
/// torch.nn.PixelShuffle: [*, C r^2, H, W] -> [*, C, H r, W r], element
/// (c, h r + i, w r + j) taken from channel c r^2 + i r + j at (h, w).
/// reshape, permute and reshape: a Shard of H or W is kept where the shards
/// line up (H and W multiples of the mesh size), else made whole first.
class PixelShuffle : public Module {
 public:
  explicit PixelShuffle(std::int64_t upscale_factor);
  DTensor forward(const DTensor& input) override;

 private:
  std::int64_t r_;
};
/// torch.nn.PixelUnshuffle: the inverse, [*, C, H r, W r] -> [*, C r^2, H, W].
class PixelUnshuffle : public Module {
 public:
  explicit PixelUnshuffle(std::int64_t downscale_factor);
  DTensor forward(const DTensor& input) override;

 private:
  std::int64_t r_;
};

/// torch.nn.Linear(in_features, out_features, bias): weight [out, in] and
/// bias [out], both U(-1/sqrt(in), 1/sqrt(in)) (PyTorch's kaiming_uniform
/// with a = sqrt(5), and its bias rule). Applies to the input's last dim.
class Linear : public Module {
 public:
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true,
         DType dtype = DType::F32);
  DTensor forward(const DTensor& input) override;
  const DTensor& weight() const { return value(weight_); }

 private:
  Ref weight_;
  std::optional<Ref> bias_;
};

/// torch.nn.Dropout(p): dropout(input, p) in training mode, the input itself
/// in eval mode. The mask comes from dtensor::manual_seed()'s generator (one
/// stream per call), the same on every rank and mesh.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  DTensor forward(const DTensor& input) override;
  double p() const { return p_; }

 private:
  double p_;
};

}  // namespace dtensor::nn
