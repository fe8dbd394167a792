// The trainer's model: a two-level 2-D U-Net with PyTorch's layouts,
// defaults and parameter names (docs/training.md has the drawing).
#pragma once

#include <cstdint>
#include <memory>

#include "dtensor/nn/layers.h"

namespace dtensor::train {

/// conv1 (3x3, padding 1) -> norm1 (GroupNorm) -> relu -> conv2 -> norm2 -> relu.
class DoubleConv : public nn::Module {
 public:
  DoubleConv(std::int64_t in, std::int64_t out, std::int64_t groups, DType dtype);
  DTensor forward(const DTensor& x) override;

 private:
  std::shared_ptr<nn::Conv2d> conv1_, conv2_;
  std::shared_ptr<nn::GroupNorm> norm1_, norm2_;
};

struct UNetShape {
  std::int64_t in_ch = 1, out_ch = 1, base = 8, groups = 2;
};

/// enc1 -> max_pool 2 -> enc2 -> up (ConvTranspose 2x2 stride 2) -> cat with
/// enc1 -> dec1 -> head (1x1 conv).
class UNet : public nn::Module {
 public:
  UNet(const UNetShape& shape, DType dtype);
  DTensor forward(const DTensor& x) override;

 private:
  std::shared_ptr<DoubleConv> enc1_, enc2_, dec1_;
  std::shared_ptr<nn::ConvTranspose2d> up_;
  std::shared_ptr<nn::Conv2d> head_;
};

}  // namespace dtensor::train
