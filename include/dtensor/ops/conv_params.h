// Convolution hyper-parameters and the shape rules every convolution path shares
// (the local kernels, the halo plan, the sharding rules).
//
// Padding is a (left, right) pair per spatial dim because the halo algorithm runs
// local convolutions on windows whose edge padding differs per side (docs/design.md §5);
// a symmetric-only type could not describe them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dtensor/core/shape.h"

namespace dtensor {

/// nn.Conv*d's padding_mode: what the padding reads. Zeros: nothing (the
/// window stops at the edge); reflect, replicate, circular: values of the
/// input mirrored, repeated or wrapped around the whole global dim (on a
/// sharded dim they come from the ranks that own them).
enum class PaddingMode { Zeros, Reflect, Replicate, Circular };
std::string_view padding_mode_name(PaddingMode m);

struct ConvParams {
  using Padding = std::vector<std::pair<std::int64_t, std::int64_t>>;

  /// One entry per spatial dim, or a single entry applied to all of them.
  /// An empty list means the default (stride 1, padding 0, dilation 1).
  /// The order matches the designated-initializer example of docs/design.md §8.
  std::vector<std::int64_t> stride{1};
  Padding padding{{0, 0}};
  std::vector<std::int64_t> dilation{1};
  std::int64_t groups = 1;
  PaddingMode padding_mode = PaddingMode::Zeros;

  /// {1, 2} -> {{1, 1}, {2, 2}}: PyTorch-style symmetric padding.
  static Padding symmetric_padding(const std::vector<std::int64_t>& pads);

  /// These parameters with every list spelled out for `spatial_dims` dims.
  /// Throws InvalidArgument naming the list ("stride", "padding", "dilation") when
  /// its length is neither 0, 1 nor `spatial_dims`.
  ConvParams expanded(std::int64_t spatial_dims) const;

  /// "stride=[1, 1] padding=[(1, 1), (0, 2)] dilation=[1, 1] groups=1".
  std::string str() const;

  bool operator==(const ConvParams&) const = default;
};

/// Span of a dilated kernel: d*(K-1) + 1 input positions.
std::int64_t conv_kernel_extent(std::int64_t kernel, std::int64_t dilation);

/// floor((L + pl + pr - E) / s) + 1 with E = conv_kernel_extent(K, d). Not
/// validated: the result is < 1 when the padded input is shorter than E.
/// Throws InvalidArgument naming the padding when L + pl + pr is past 64 bits,
/// the stride when it is < 1, the dilation as conv_kernel_extent does.
std::int64_t conv_output_length(std::int64_t length, std::int64_t kernel, std::int64_t stride,
                                std::int64_t dilation, std::int64_t pad_left,
                                std::int64_t pad_right);

/// The input a range of outputs reads along one dim: outputs [out_lo, out_hi)
/// of a convolution over `length` inputs read [lo, hi), and a convolution of
/// just those inputs with padding (pad_lo, pad_hi) yields exactly those
/// outputs. `lo >= hi` when they read only padding. (The halo plan's maths,
/// docs/design.md §5, for one range: used to split one convolution into pieces.)
/// Throws InvalidArgument naming the stride when a bound is past 64 bits.
struct ConvInputRange {
  std::int64_t lo = 0, hi = 0, pad_lo = 0, pad_hi = 0;
};
ConvInputRange conv_input_range(std::int64_t length, std::int64_t kernel, std::int64_t stride,
                                std::int64_t dilation, std::int64_t pad_left, std::int64_t out_lo,
                                std::int64_t out_hi);

/// Checks a convolution's operands: input [N, C, spatial...] with 1..3 spatial
/// dims, weight [OC, C/groups, k...], bias [OC] (nullopt: no bias), and the
/// parameters (stride, dilation >= 1, padding >= 0, groups dividing C and OC,
/// every output extent >= 1). Returns the parameters expanded to the input's
/// spatial dims. Throws InvalidArgument whose message starts with the offending
/// parameter ("input", "weight", "bias", "stride", "padding", "dilation", "groups").
/// Zero extents in N, C, OC or the spatial input dims are accepted (empty shards).
ConvParams check_conv_args(const Shape& input, const Shape& weight,
                           const std::optional<Shape>& bias, const ConvParams& params);

/// [N, OC, O...] after check_conv_args(input, weight, nullopt, params).
Shape conv_output_shape(const Shape& input, const Shape& weight, const ConvParams& params);

}  // namespace dtensor
