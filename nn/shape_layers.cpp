// The shape layers: Flatten, PixelShuffle and PixelUnshuffle, built from the
// view operators (reshape, permute), which carry the placements and the
// gradients.
#include "dtensor/core/errors.h"
#include "dtensor/nn/layers.h"
#include "dtensor/ops/views.h"

namespace dtensor::nn {
namespace {

using Int = std::int64_t;

// The checks of torch's pixel_shuffle / pixel_unshuffle, on the global shape
// (the same on every rank, so every rank raises alike).
void check_pixel_input(const DTensor& x, const char* op) {
  DTENSOR_CHECK_ARG(x.ndim() >= 3, op, "input: expected [*, C, H, W] (at least 3 dims), got {}",
                    shape_str(x.shape()));
}

Shape batch_dims(const Shape& s) {
  return {s.begin(), s.end() - 3};
}

// `first` followed by the dims `rest`.
Shape joined(Shape first, std::initializer_list<Int> rest) {
  first.insert(first.end(), rest);
  return first;
}

// The batch dims kept in place, then the last `n` dims in `order` (relative).
std::vector<Int> batch_then(Int batch, std::initializer_list<Int> order) {
  std::vector<Int> out;
  for (Int d = 0; d < batch; ++d)
    out.push_back(d);
  for (Int d : order)
    out.push_back(batch + d);
  return out;
}

}  // namespace

DTensor Flatten::forward(const DTensor& x) {
  return flatten(x, start_dim, end_dim);
}

PixelShuffle::PixelShuffle(Int upscale_factor) : r_(upscale_factor) {
  check_arg(r_ >= 1, "PixelShuffle", "upscale_factor: must be >= 1, got {}", r_);
}

DTensor PixelShuffle::forward(const DTensor& x) {
  check_pixel_input(x, "PixelShuffle");
  const Shape& s = x.shape();
  const std::size_t n = s.size();
  const Int c = s[n - 3], h = s[n - 2], w = s[n - 1], rr = r_ * r_;
  check_arg(c % rr == 0, "PixelShuffle",
            "input: {} channels are not divisible by upscale_factor^2 = {}", c, rr);
  const Shape batch = batch_dims(s);
  const auto b = static_cast<Int>(batch.size());
  // [*, C, r, r, H, W] -> [*, C, H, r, W, r] -> [*, C, H r, W r]
  const DTensor split = reshape(x, joined(batch, {c / rr, r_, r_, h, w}));
  const DTensor moved = permute(split, batch_then(b, {0, 3, 1, 4, 2}));
  return reshape(moved, joined(batch, {c / rr, h * r_, w * r_}));
}

PixelUnshuffle::PixelUnshuffle(Int downscale_factor) : r_(downscale_factor) {
  check_arg(r_ >= 1, "PixelUnshuffle", "downscale_factor: must be >= 1, got {}", r_);
}

DTensor PixelUnshuffle::forward(const DTensor& x) {
  check_pixel_input(x, "PixelUnshuffle");
  const Shape& s = x.shape();
  const std::size_t n = s.size();
  const Int c = s[n - 3], h = s[n - 2], w = s[n - 1];
  check_arg(h % r_ == 0 && w % r_ == 0, "PixelUnshuffle",
            "input: height {} and width {} must be divisible by downscale_factor {}", h, w, r_);
  const Shape batch = batch_dims(s);
  const auto b = static_cast<Int>(batch.size());
  // [*, C, H, r, W, r] -> [*, C, r, r, H, W] -> [*, C r^2, H, W]
  const DTensor split = reshape(x, joined(batch, {c, h / r_, r_, w / r_, r_}));
  const DTensor moved = permute(split, batch_then(b, {0, 2, 4, 1, 3}));
  return reshape(moved, joined(batch, {c * r_ * r_, h / r_, w / r_}));
}

}  // namespace dtensor::nn
