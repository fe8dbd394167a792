#include "tools/dtensor-train-unet/unet.h"

#include "dtensor/nn/halo_region.h"
#include "dtensor/ops/cat.h"
#include "dtensor/ops/pointwise.h"
#include "dtensor/ops/window_ops.h"

namespace dtensor::train {

namespace {
nn::ConvOptions same_3x3(DType dtype) {
  nn::ConvOptions o;
  o.padding = {1};
  o.dtype = dtype;
  return o;
}
}  // namespace

DoubleConv::DoubleConv(std::int64_t in, std::int64_t out, std::int64_t groups, DType dtype) {
  conv1_ = register_module("conv1", std::make_shared<nn::Conv2d>(in, out, 3, same_3x3(dtype)));
  // relu(norm(conv(x))) with the relu fused into the norm's pass.
  norm1_ =
      register_module("norm1", std::make_shared<nn::GroupNorm>(groups, out, 1e-5, true, dtype));
  norm1_->fuse_activation(NormActivation::ReLU);
  conv2_ = register_module("conv2", std::make_shared<nn::Conv2d>(out, out, 3, same_3x3(dtype)));
  norm2_ =
      register_module("norm2", std::make_shared<nn::GroupNorm>(groups, out, 1e-5, true, dtype));
  norm2_->fuse_activation(NormActivation::ReLU);
}

// One halo exchange for the four layers where the input is spatially
// sharded and it pays (nn::forward_fusing_halos); the layers one by one
// otherwise, with the same result.
DTensor DoubleConv::forward(const DTensor& x) {
  return nn::forward_fusing_halos({conv1_, norm1_, conv2_, norm2_}, x);
}

UNet::UNet(const UNetShape& s, DType dtype) {
  enc1_ = register_module("enc1", std::make_shared<DoubleConv>(s.in_ch, s.base, s.groups, dtype));
  enc2_ =
      register_module("enc2", std::make_shared<DoubleConv>(s.base, 2 * s.base, s.groups, dtype));
  nn::ConvTransposeOptions up;
  up.stride = {2};
  up.dtype = dtype;
  up_ = register_module("up", std::make_shared<nn::ConvTranspose2d>(2 * s.base, s.base, 2, up));
  dec1_ =
      register_module("dec1", std::make_shared<DoubleConv>(2 * s.base, s.base, s.groups, dtype));
  nn::ConvOptions head;
  head.dtype = dtype;
  head_ = register_module("head", std::make_shared<nn::Conv2d>(s.base, s.out_ch, 1, head));
}

DTensor UNet::forward(const DTensor& x) {
  const DTensor e1 = (*enc1_)(x);
  PoolParams pool;
  pool.kernel = {2};
  pool.stride = {2};
  const DTensor e2 = (*enc2_)(max_pool(e1, pool));
  const DTensor u = (*up_)(e2);
  return (*head_)((*dec1_)(cat({u, e1}, 1)));
}

}  // namespace dtensor::train
