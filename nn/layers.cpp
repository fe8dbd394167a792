#include "dtensor/nn/layers.h"

#include <cmath>
#include <string>

#include <fmt/ranges.h>

#include "dtensor/core/errors.h"
#include "dtensor/ops/convolution.h"
#include "dtensor/ops/dropout.h"
#include "dtensor/ops/linear.h"
#include "dtensor/ops/normalization.h"
#include "dtensor/ops/pointwise.h"

namespace dtensor::nn {
namespace {

std::vector<std::int64_t> expand(std::vector<std::int64_t> v, std::int64_t n, const char* what) {
  if (v.size() == 1) return std::vector<std::int64_t>(static_cast<std::size_t>(n), v[0]);
  DTENSOR_CHECK_ARG(static_cast<std::int64_t>(v.size()) == n, "nn",
                    "{}: {} values for {} spatial dims", what, v.size(), n);
  return v;
}

std::int64_t product(const std::vector<std::int64_t>& v) {
  std::int64_t p = 1;
  for (auto x : v)
    p *= x;
  return p;
}

// kaiming_uniform_(a = sqrt(5)) gives bound 1 / sqrt(fan_in), as does the bias.
Tensor fan_in_uniform(const Shape& shape, std::int64_t fan_in, DType dtype) {
  const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
  return uniform(shape, -bound, bound, dtype);
}

// PyTorch's padding="same": the kernel's extent minus one, split with the
// odd one on the right (torch.nn.functional's _conv_forward), stride 1 only.
ConvParams::Padding resolved_padding(const ConvPadding& padding, const std::vector<std::int64_t>& k,
                                     const std::vector<std::int64_t>& stride,
                                     const std::vector<std::int64_t>& dilation, std::int64_t n) {
  using Rule = ConvPadding::Rule;
  if (padding.rule == Rule::Explicit)
    return ConvParams::symmetric_padding(expand(padding, n, "padding"));
  ConvParams::Padding out;
  for (std::size_t d = 0; d < static_cast<std::size_t>(n); ++d) {
    if (padding.rule == Rule::Valid) {
      out.emplace_back(0, 0);
      continue;
    }
    DTENSOR_CHECK_ARG(stride[d] == 1, "nn",
                      "padding='same': needs stride 1 in every dim (as PyTorch), stride is [{}]",
                      fmt::join(stride, ", "));
    const std::int64_t total = dilation[d] * (k[d] - 1);
    out.emplace_back(total / 2, total - total / 2);
  }
  return out;
}

}  // namespace

ConvPadding::ConvPadding(const char* rule) {
  const std::string r = rule ? rule : "";
  check_arg(r == "same" || r == "valid", "nn",
            "padding: '{}' is neither \"same\" nor \"valid\" (or give the values)", r);
  this->rule = r == "same" ? Rule::Same : Rule::Valid;
}

Conv::Conv(std::int64_t n, std::int64_t in, std::int64_t out, std::vector<std::int64_t> k,
           const ConvOptions& o) {
  check_arg(n >= 1 && n <= 3, "nn", "Conv: spatial_dims {} is not 1, 2 or 3", n);
  check_arg(o.groups >= 1 && in % o.groups == 0 && out % o.groups == 0, "nn",
            "Conv: groups {} must divide in_channels {} and out_channels {}", o.groups, in, out);
  k = expand(k, n, "kernel_size");
  params_.stride = expand(o.stride, n, "stride");
  params_.dilation = expand(o.dilation, n, "dilation");
  params_.padding = resolved_padding(o.padding, k, params_.stride, params_.dilation, n);
  params_.groups = o.groups;
  params_.padding_mode = o.padding_mode;
  Shape w{out, in / o.groups};
  w.insert(w.end(), k.begin(), k.end());
  const std::int64_t fan_in = in / o.groups * product(k);
  weight_ = register_parameter("weight", fan_in_uniform(w, fan_in, o.dtype));
  if (o.bias) bias_ = register_parameter("bias", fan_in_uniform({out}, fan_in, o.dtype));
}

DTensor Conv::forward(const DTensor& x) {
  return convolution(x, value(weight_), value_if(bias_), params_);
}

ConvTranspose::ConvTranspose(std::int64_t n, std::int64_t in, std::int64_t out,
                             std::vector<std::int64_t> k, const ConvTransposeOptions& o) {
  check_arg(n >= 1 && n <= 3, "nn", "ConvTranspose: spatial_dims {} is not 1, 2 or 3", n);
  check_arg(o.groups >= 1 && in % o.groups == 0 && out % o.groups == 0, "nn",
            "ConvTranspose: groups {} must divide in_channels {} and out_channels {}", o.groups, in,
            out);
  k = expand(k, n, "kernel_size");
  params_.stride = expand(o.stride, n, "stride");
  params_.padding = expand(o.padding, n, "padding");
  params_.output_padding = expand(o.output_padding, n, "output_padding");
  params_.dilation = expand(o.dilation, n, "dilation");
  params_.groups = o.groups;
  Shape w{in, out / o.groups};
  w.insert(w.end(), k.begin(), k.end());
  // PyTorch's fan_in of this weight is its dim 1 times the kernel.
  const std::int64_t fan_in = out / o.groups * product(k);
  weight_ = register_parameter("weight", fan_in_uniform(w, fan_in, o.dtype));
  if (o.bias) bias_ = register_parameter("bias", fan_in_uniform({out}, fan_in, o.dtype));
}

DTensor ConvTranspose::forward(const DTensor& x) {
  return conv_transpose(x, value(weight_), value_if(bias_), params_);
}

DTensor MaxPool::forward(const DTensor& x) {
  return max_pool(x, params_);
}
DTensor AvgPool::forward(const DTensor& x) {
  return avg_pool(x, params_);
}
DTensor AdaptiveAvgPool::forward(const DTensor& x) {
  return adaptive_avg_pool(x, output_size_);
}
DTensor AdaptiveMaxPool::forward(const DTensor& x) {
  return adaptive_max_pool(x, output_size_);
}
DTensor LPPool::forward(const DTensor& x) {
  return lp_pool(x, norm_type_, kernel_, stride_, ceil_mode_);
}
DTensor Upsample::forward(const DTensor& x) {
  return upsample(x, params_);
}
DTensor Pad::forward(const DTensor& x) {
  return pad(x, padding_, mode_, value_);
}

BatchNorm::BatchNorm(std::int64_t c, double eps, double momentum, bool affine, bool track,
                     DType dtype)
    : eps_(eps), momentum_(momentum) {
  if (affine) {
    weight_ = register_parameter("weight", Tensor::full({c}, 1.0, dtype));
    bias_ = register_parameter("bias", Tensor::zeros({c}, dtype));
  }
  if (track) {
    running_mean_ = register_buffer("running_mean", Tensor::zeros({c}, dtype));
    running_var_ = register_buffer("running_var", Tensor::full({c}, 1.0, dtype));
    num_batches_ = register_buffer("num_batches_tracked", Tensor::zeros({}, dtype));
  }
}

DTensor BatchNorm::forward(const DTensor& x) {
  const bool training = is_training() || !running_mean_;
  auto r = batch_norm(x, value_if(weight_), value_if(bias_), value_if(running_mean_),
                      value_if(running_var_), training, momentum_, eps_);
  if (training && running_mean_) take_running_stats(*r.running_mean, *r.running_var);
  return r.output;
}

void BatchNorm::take_running_stats(const DTensor& mean, const DTensor& var) {
  check_arg(running_mean_.has_value(), "nn",
            "BatchNorm: take_running_stats: no running statistics are tracked");
  set_buffer(*running_mean_, mean);
  set_buffer(*running_var_, var);
  const DTensor& n = value(*num_batches_);
  Tensor next = n.to_local().clone();
  next.fill_(next.item_flat(0) + 1);
  set_buffer(*num_batches_, DTensor(next, n.spec()));
}

GroupNorm::GroupNorm(std::int64_t groups, std::int64_t c, double eps, bool affine, DType dtype)
    : groups_(groups), eps_(eps) {
  check_arg(groups >= 1 && c % groups == 0, "nn",
            "GroupNorm: num_groups {} must divide num_channels {}", groups, c);
  if (affine) {
    weight_ = register_parameter("weight", Tensor::full({c}, 1.0, dtype));
    bias_ = register_parameter("bias", Tensor::zeros({c}, dtype));
  }
}

DTensor GroupNorm::forward(const DTensor& x) {
  return group_norm(x, groups_, value_if(weight_), value_if(bias_), eps_, activation_);
}

InstanceNorm::InstanceNorm(std::int64_t c, double eps, bool affine, DType dtype) : eps_(eps) {
  if (affine) {
    weight_ = register_parameter("weight", Tensor::full({c}, 1.0, dtype));
    bias_ = register_parameter("bias", Tensor::zeros({c}, dtype));
  }
}

DTensor InstanceNorm::forward(const DTensor& x) {
  return instance_norm(x, value_if(weight_), value_if(bias_), eps_);
}

LayerNorm::LayerNorm(Shape shape, double eps, bool affine, DType dtype) : eps_(eps) {
  if (affine) {
    weight_ = register_parameter("weight", Tensor::full(shape, 1.0, dtype));
    bias_ = register_parameter("bias", Tensor::zeros(shape, dtype));
  }
}

DTensor LayerNorm::forward(const DTensor& x) {
  return layer_norm(x, value_if(weight_), value_if(bias_), eps_);
}

DTensor ReLU::forward(const DTensor& x) {
  return relu(x);
}
DTensor LeakyReLU::forward(const DTensor& x) {
  return leaky_relu(x, slope);
}
DTensor GELU::forward(const DTensor& x) {
  return gelu(x, approximate);
}
DTensor SiLU::forward(const DTensor& x) {
  return silu(x);
}
DTensor Sigmoid::forward(const DTensor& x) {
  return sigmoid(x);
}
DTensor Tanh::forward(const DTensor& x) {
  return dtensor::tanh(x);
}

Linear::Linear(std::int64_t in, std::int64_t out, bool bias, DType dtype) {
  check_arg(in >= 0 && out >= 0, "nn", "Linear: in_features {} and out_features {} must be >= 0",
            in, out);
  weight_ = register_parameter("weight", fan_in_uniform({out, in}, in, dtype));
  if (bias) bias_ = register_parameter("bias", fan_in_uniform({out}, in, dtype));
}

DTensor Linear::forward(const DTensor& x) {
  return linear(x, value(weight_), value_if(bias_));
}

Dropout::Dropout(double p) : p_(p) {
  check_arg(p >= 0.0 && p <= 1.0, "nn",
            "Dropout: p: dropout probability has to be between 0 and 1, but got {}", p);
}

DTensor Dropout::forward(const DTensor& x) {
  return dropout(x, p_, is_training());
}

}  // namespace dtensor::nn
