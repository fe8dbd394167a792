// Interpolation (torch.nn.functional.interpolate / upsample) on DTensors,
// forward and backward, for 1 to 3 spatial dims, on the window engine.
//
// Modes nearest and linear (linear, bilinear, trilinear by the number of
// spatial dims), sized by `size` or by `scale_factor` (non-integer too), with
// align_corners for linear. Source indices are PyTorch's (UpSample.h):
//   nearest: src = min(floor(dst * scale), L - 1), scale = 1 / scale_factor
//            when a scale factor is given, else L / O (a float, as PyTorch's);
//            O == L and O == 2L are exact;
//   linear:  src = align_corners ? dst * (L - 1) / (O - 1)
//                                : max((dst + 0.5) * scale - 0.5, 0),
//            i0 = floor(src), i1 = min(i0 + 1, L - 1), weights 1 - l, l.
// The output length by scale factor is floor(L * scale_factor), and the
// scale factor itself is used for the indices (recompute_scale_factor unset).
//
// On a spatially sharded dim each rank receives the inputs its outputs read
// from the ranks that own them; the output is sharded by the chunk rule on the
// OUTPUT extent, so full_tensor() is the single-process result. Batch and
// channel sharding need no communication; a Partial input passes through
// (interpolation is linear). Argument layout: docs/operators.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dtensor/placement/dtensor.h"

namespace dtensor {

enum class UpsampleMode { Nearest, Linear };
std::string_view upsample_mode_name(UpsampleMode m);

/// F.interpolate's arguments. Give exactly one of `size` and `scale_factor`,
/// each with one value for every spatial dim or one per dim.
struct UpsampleParams {
  UpsampleMode mode = UpsampleMode::Nearest;
  std::vector<std::int64_t> size{};
  std::vector<double> scale_factor{};
  bool align_corners = false;  // linear only (nearest must leave it false)

  std::string str() const;
};

/// [N, C, spatial...] -> [N, C, O...].
DTensor upsample(const DTensor& input, const UpsampleParams& params);
/// The gradient of upsample: each output's gradient is added, with its weight,
/// onto the inputs it read (on the ranks that own them). `input` gives the
/// geometry and placements (its values are not read); the result is placed
/// like `input`.
DTensor upsample_backward(const DTensor& grad_output, const DTensor& input,
                          const UpsampleParams& params);
/// Alias of upsample (F.interpolate's name).
inline DTensor interpolate(const DTensor& input, const UpsampleParams& params) {
  return upsample(input, params);
}

/// The output's global shape (validates as upsample does).
Shape upsample_output_shape(const Shape& input, const UpsampleParams& params);

}  // namespace dtensor
