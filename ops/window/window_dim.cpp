// WindowDim: the one description of "which inputs an output reads" that
// every window operator gives the engine.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "dtensor/core/errors.h"
#include "dtensor/ops/conv_params.h"
#include "dtensor/ops/window.h"
#include "ops/window/integer_division.h"

namespace dtensor {
namespace {
constexpr const char* kComponent = "window";
}  // namespace

std::string_view boundary_name(Boundary b) {
  switch (b) {
    case Boundary::Zeros:
      return "zeros";
    case Boundary::Reflect:
      return "reflect";
    case Boundary::Replicate:
      return "replicate";
    case Boundary::Circular:
      return "circular";
  }
  return "?";
}

Boundary boundary_of(PaddingMode mode) {
  switch (mode) {
    case PaddingMode::Zeros:
      break;
    case PaddingMode::Reflect:
      return Boundary::Reflect;
    case PaddingMode::Replicate:
      return Boundary::Replicate;
    case PaddingMode::Circular:
      return Boundary::Circular;
  }
  return Boundary::Zeros;
}

WindowDim WindowDim::sliding(std::int64_t kernel, std::int64_t stride, std::int64_t dilation,
                             std::int64_t pad_left, std::int64_t pad_right, Boundary boundary) {
  WindowDim d;
  d.kind = Kind::Sliding;
  d.kernel = kernel;
  d.stride = stride;
  d.dilation = dilation;
  d.pad_left = pad_left;
  d.pad_right = pad_right;
  d.boundary = boundary;
  return d;
}

WindowDim WindowDim::adaptive(std::int64_t output_length) {
  WindowDim d;
  d.kind = Kind::Adaptive;
  d.output_length = output_length;
  return d;
}

WindowDim WindowDim::transposed(std::int64_t kernel, std::int64_t stride, std::int64_t dilation,
                                std::int64_t padding, std::int64_t output_padding) {
  WindowDim d;
  d.kind = Kind::Transposed;
  d.kernel = kernel;
  d.stride = stride;
  d.dilation = dilation;
  d.pad_left = padding;
  d.pad_right = padding - output_padding;
  return d;
}

WindowDim WindowDim::resample(std::int64_t output_length, bool linear, bool align_corners,
                              double scale_factor) {
  WindowDim d;
  d.kind = Kind::Resample;
  d.kernel = linear ? 2 : 1;
  d.output_length = output_length;
  d.align_corners = linear && align_corners;
  d.scale_factor = scale_factor;
  return d;
}

// PyTorch's aten/src/ATen/native/UpSample.h: nearest_idx (a float scale,
// with the exact cases O == L and O == 2L) and area_pixel_compute_scale /
// area_pixel_compute_source_index for linear (computed here in double).
WindowDim::ResampleTap WindowDim::resample_source(std::int64_t length, std::int64_t o,
                                                  bool backward) const {
  const std::int64_t L = length, O = output_length;
  ResampleTap t;
  if (kernel == 1) {
    // PyTorch's nearest forward always computes floor(o * scale); its
    // backward takes shortcuts for O = L and O = 2L that differ from that
    // when a scale_factor is given (e.g. 2.1 on L = 4). Both are followed.
    if (backward && O == L) {
      t.i0 = o;
    } else if (backward && O == 2 * L) {
      t.i0 = o >> 1;
    } else {
      const float scale = scale_factor > 0 ? static_cast<float>(1.0 / scale_factor)
                                           : static_cast<float>(L) / static_cast<float>(O);
      t.i0 = std::min(static_cast<std::int64_t>(std::floor(static_cast<float>(o) * scale)), L - 1);
    }
    t.i1 = t.i0;
    return t;
  }
  if (O == L) {  // PyTorch copies, whatever the scale factor says
    t.i0 = t.i1 = o;
    return t;
  }
  double src = 0;
  if (align_corners) {
    const double scale = O > 1 ? static_cast<double>(L - 1) / static_cast<double>(O - 1) : 0.0;
    src = scale * static_cast<double>(o);
  } else {
    const double scale =
        scale_factor > 0 ? 1.0 / scale_factor : static_cast<double>(L) / static_cast<double>(O);
    src = scale * (static_cast<double>(o) + 0.5) - 0.5;
    if (src < 0) src = 0;
  }
  t.i0 = std::min(static_cast<std::int64_t>(src), L - 1);
  t.i1 = t.i0 + (t.i0 < L - 1 ? 1 : 0);
  t.w1 = src - static_cast<double>(t.i0);
  t.w0 = 1.0 - t.w1;
  return t;
}

std::int64_t WindowDim::output_length_for(std::int64_t length) const {
  check_arg(length >= 0, kComponent, "input: negative length {}", length);
  // Bounds that keep every length computation far from overflowing.
  constexpr std::int64_t kMax = std::int64_t{1} << 40;
  DTENSOR_CHECK_ARG(
      std::abs(kernel) <= kMax && std::abs(stride) <= kMax && std::abs(dilation) <= kMax &&
          std::abs(pad_left) <= kMax && std::abs(pad_right) <= kMax && output_length <= kMax,
      kComponent,
      "padding: kernel, stride, dilation, padding and output size must be at most 2^40 in "
      "magnitude ({})",
      str());
  if (kind == Kind::Resample) {
    check_arg(kernel == 1 || kernel == 2, kComponent,
              "mode: a resampling window reads 1 (nearest) or 2 (linear) inputs, not {}", kernel);
    check_arg(output_length >= 1, kComponent, "output_size: must be >= 1, got {}", output_length);
    check_arg(length >= 1, kComponent, "input: interpolation needs a non-empty input dim");
    check_arg(std::isfinite(scale_factor) && scale_factor >= 0, kComponent,
              "scale_factor: must be positive, got {}", scale_factor);
    check_arg(boundary == Boundary::Zeros, kComponent,
              "padding_mode: a resampling window reads no padding");
    return output_length;
  }
  if (kind == Kind::Adaptive) {
    check_arg(output_length >= 1, kComponent, "output_size: must be >= 1, got {}", output_length);
    check_arg(length >= 1, kComponent, "input: an adaptive pool needs a non-empty input dim");
    return output_length;
  }
  check_arg(kernel >= 1, kComponent, "kernel: must be >= 1, got {}", kernel);
  check_arg(stride >= 1, kComponent, "stride: must be >= 1, got {}", stride);
  check_arg(dilation >= 1, kComponent, "dilation: must be >= 1, got {}", dilation);
  if (boundary != Boundary::Zeros) {
    DTENSOR_CHECK_ARG(kind == Kind::Sliding, kComponent,
                      "padding_mode: {} needs a sliding window (not adaptive or transposed)",
                      boundary_name(boundary));
    DTENSOR_CHECK_ARG(pad_left >= 0 && pad_right >= 0, kComponent,
                      "padding: {} padding must be >= 0, got ({}, {})", boundary_name(boundary),
                      pad_left, pad_right);
    const bool pads = pad_left > 0 || pad_right > 0;
    if (boundary == Boundary::Reflect)
      check_arg(!pads || (pad_left < length && pad_right < length), kComponent,
                "padding: reflect padding ({}, {}) must be less than the input length {}", pad_left,
                pad_right, length);
    if (boundary == Boundary::Circular)
      check_arg(pad_left <= length && pad_right <= length, kComponent,
                "padding: circular padding ({}, {}) must be at most the input length {} (it "
                "wraps around once)",
                pad_left, pad_right, length);
    if (boundary == Boundary::Replicate)
      check_arg(!pads || length >= 1, kComponent,
                "padding: replicate padding of an empty input dim");
  }
  if (kind == Kind::Transposed) {
    check_arg(length >= 1, kComponent, "input: a transposed convolution needs inputs, got 0");
    const std::int64_t o = (length - 1) * stride - pad_left - pad_right + extent();
    check_arg(o >= 1, kComponent,
              "padding: {} on the left with {} on the right leaves no output of a transposed "
              "convolution over {} inputs",
              pad_left, pad_right, length);
    return o;
  }
  if (output_length >= 0) return output_length;
  const std::int64_t span = length + pad_left + pad_right - extent();
  DTENSOR_CHECK_ARG(span >= 0, kComponent,
                    "input: length {} with padding ({}, {}) is shorter than the kernel's extent {}",
                    length, pad_left, pad_right, extent());
  return span / stride + 1;
}

std::pair<std::int64_t, std::int64_t> WindowDim::reads(std::int64_t length, std::int64_t o0,
                                                       std::int64_t o1) const {
  using window::ceil_div;
  using window::floor_div;
  switch (kind) {
    case Kind::Sliding:
      return {o0 * stride - pad_left, (o1 - 1) * stride - pad_left + extent() - 1};
    case Kind::Adaptive:
      return {floor_div(o0 * length, output_length), ceil_div(o1 * length, output_length) - 1};
    case Kind::Transposed: {
      // Input i writes [i*s - pl, i*s - pl + E - 1]: output o hears from
      // ceil((o + pl - E + 1) / s) <= i <= floor((o + pl) / s).
      const std::int64_t first =
          std::max<std::int64_t>(ceil_div(o0 + pad_left - extent() + 1, stride), 0);
      const std::int64_t last =
          std::min<std::int64_t>(floor_div(o1 - 1 + pad_left, stride), length - 1);
      return {first, last};
    }
    case Kind::Resample:  // the source index is non-decreasing in o
      if (o1 <= o0) return {0, -1};
      // Both rules (forward and backward differ for nearest): the window
      // serves the gradient's scatter too.
      return {
          std::min(resample_source(length, o0).i0, resample_source(length, o0, true).i0),
          std::max(resample_source(length, o1 - 1).i1, resample_source(length, o1 - 1, true).i1)};
  }
  return {0, -1};
}

std::string WindowDim::str() const {
  switch (kind) {
    case Kind::Adaptive:
      return fmt::format("adaptive(O={})", output_length);
    case Kind::Transposed:
      return fmt::format("transposed(k={} s={} d={} pad=({}, {}))", kernel, stride, dilation,
                         pad_left, pad_right);
    case Kind::Resample:
      return fmt::format("resample({} O={}{}{})", kernel == 1 ? "nearest" : "linear", output_length,
                         align_corners ? " align_corners" : "",
                         scale_factor > 0 ? fmt::format(" scale_factor={}", scale_factor) : "");
    case Kind::Sliding:
      break;
  }
  return fmt::format("sliding(k={} s={} d={} pad=({}, {}) {}{})", kernel, stride, dilation,
                     pad_left, pad_right, boundary_name(boundary),
                     output_length >= 0 ? fmt::format(" O={}", output_length) : "");
}

}  // namespace dtensor
