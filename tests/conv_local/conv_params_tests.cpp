// ConvParams: expansion to N spatial dims, output shapes, and validation
// errors that name the offending parameter.
#include <limits>

#include <catch2/catch.hpp>

#include "dtensor/core/errors.h"
#include "dtensor/ops/conv_params.h"

using namespace dtensor;

TEST_CASE("conv params: single values and defaults expand to every spatial dim", "[params]") {
  ConvParams p;
  p.stride = {2};
  p.padding = {{1, 3}};
  const ConvParams e = p.expanded(3);
  CHECK(e.stride == std::vector<std::int64_t>{2, 2, 2});
  CHECK(e.dilation == std::vector<std::int64_t>{1, 1, 1});
  CHECK(e.padding == ConvParams::Padding{{1, 3}, {1, 3}, {1, 3}});
  const ConvParams empty{{}, {}, {}, 1};
  CHECK(empty.expanded(2).stride == std::vector<std::int64_t>{1, 1});
  CHECK(empty.expanded(2).padding == ConvParams::Padding{{0, 0}, {0, 0}});
  CHECK(ConvParams::symmetric_padding({1, 2}) == ConvParams::Padding{{1, 1}, {2, 2}});
  const ConvParams bad_stride{{1, 2}, {}, {}, 1};
  CHECK_THROWS_WITH(bad_stride.expanded(3), Catch::StartsWith("[dtensor.conv] stride"));
  const ConvParams bad_padding{{}, {{0, 0}, {1, 1}}, {}, 1};
  CHECK_THROWS_WITH(bad_padding.expanded(3), Catch::Contains("padding"));
}

TEST_CASE("conv params: output shape O = floor((L + pl + pr - E) / s) + 1", "[params]") {
  CHECK(conv_kernel_extent(3, 2) == 5);
  // A span past 64 bits is refused, naming the dilation, not wrapped around.
  CHECK_THROWS_WITH(conv_kernel_extent(3, 8200884000848200882), Catch::Contains("dilation"));
  CHECK(conv_output_length(10, 3, 1, 1, 1, 1) == 10);
  CHECK(conv_output_length(10, 3, 2, 1, 1, 1) == 5);
  CHECK(conv_output_length(10, 2, 3, 1, 0, 1) == 4);
  CHECK(conv_output_length(7, 3, 2, 3, 0, 0) == 1);
  CHECK(conv_output_length(6, 3, 2, 3, 0, 0) == 0);  // floor, not truncation toward zero
  CHECK(conv_output_length(0, 1, 1, 1, 0, 6) == 6);
  // Lengths past 64 bits and a stride below 1 are refused, naming them.
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  CHECK_THROWS_WITH(conv_output_length(16, 3, 1, 1, kMax, 0), Catch::Contains("padding:"));
  CHECK_THROWS_WITH(conv_output_length(16, 3, 1, 1, kMax - 20, 5), Catch::Contains("padding:"));
  CHECK(conv_output_length(16, 3, 1, 1, kMax - 20, 0) == kMax - 20 + 16 - 3 + 1);
  CHECK_THROWS_WITH(conv_output_length(16, 3, 0, 1, 1, 1), Catch::Contains("stride:"));
  CHECK_THROWS_WITH(conv_input_range(16, 3, kMax / 2, 1, 0, 0, 4), Catch::Contains("stride:"));
  const ConvInputRange r = conv_input_range(10, 3, 2, 1, 1, 1, 3);  // outputs 1, 2 read 1..5
  CHECK((r.lo == 1 && r.hi == 6 && r.pad_lo == 0 && r.pad_hi == 0));
  ConvParams p{{1, 2}, {{1, 1}, {0, 2}}, {1, 2}, 2};
  CHECK(conv_output_shape({2, 4, 8, 9}, {6, 2, 3, 3}, p) == Shape{2, 6, 8, 4});
  CHECK(conv_output_shape({1, 1, 5}, {1, 1, 5}, ConvParams{}) == Shape{1, 1, 1});
}

TEST_CASE("conv params: validation errors name the parameter", "[params]") {
  const Shape x{2, 4, 8, 8}, w{6, 4, 3, 3};
  const std::optional<Shape> b = Shape{6};
  CHECK_NOTHROW(check_conv_args(x, w, b, ConvParams{}));

  auto fails_naming = [&](const Shape& xs, const Shape& ws, const std::optional<Shape>& bs,
                          const ConvParams& p, const std::string& name) {
    INFO("expecting an error about " << name);
    CHECK_THROWS_AS(check_conv_args(xs, ws, bs, p), InvalidArgument);
    CHECK_THROWS_WITH(check_conv_args(xs, ws, bs, p),
                      Catch::StartsWith("[dtensor.conv] " + name + ":"));
  };
  fails_naming(x, w, b, ConvParams{{0}, {}, {}, 1}, "stride");
  fails_naming(x, w, b, ConvParams{{1, -2}, {}, {}, 1}, "stride");
  fails_naming(x, w, b, ConvParams{{1}, {}, {0}, 1}, "dilation");
  fails_naming(x, w, b, ConvParams{{1}, {{-1, 0}}, {1}, 1}, "padding");
  fails_naming(x, w, b, ConvParams{{1}, {{0, 0}, {0, 0}, {0, 0}}, {1}, 1}, "padding");
  fails_naming(x, w, b, ConvParams{{1}, {}, {}, 0}, "groups");
  fails_naming(x, {6, 4, 3, 3}, b, ConvParams{{1}, {}, {}, 3}, "groups");  // 3 does not divide 4
  fails_naming(x, {5, 2, 3, 3}, Shape{5}, ConvParams{{1}, {}, {}, 2}, "groups");  // nor 5
  fails_naming(x, {6, 3, 3, 3}, b, ConvParams{}, "weight");  // C/groups mismatch
  fails_naming(x, {6, 4, 3}, b, ConvParams{}, "weight");     // rank mismatch
  fails_naming(x, {6, 4, 0, 3}, b, ConvParams{}, "weight");  // empty kernel
  fails_naming(x, w, Shape{5}, ConvParams{}, "bias");
  fails_naming(x, w, Shape{6, 1}, ConvParams{}, "bias");
  fails_naming({2, 4}, {6, 4}, b, ConvParams{}, "input");  // no spatial dim
  fails_naming({1, 1, 2, 2, 2, 2}, {1, 1, 1, 1, 1, 1}, std::nullopt, ConvParams{}, "input");
  fails_naming({2, 4, 2, 8}, w, b, ConvParams{}, "input");                 // output height < 1
  fails_naming({2, 4, 8, 8}, w, b, ConvParams{{1}, {}, {4}, 1}, "input");  // extent 9 > 8
  // Zero extents (empty shards) are fine while every output exists.
  CHECK_NOTHROW(check_conv_args({0, 4, 8, 8}, w, b, ConvParams{}));
  CHECK_NOTHROW(check_conv_args({2, 4, 0, 8}, w, b, ConvParams{{1}, {{2, 1}}, {1}, 1}));
}
