// nn::Conv2d with a rectangular kernel and per-dim padding, and with
// padding "same" and "valid", against naive loops written here from
// PyTorch's definition (cross-correlation over a zero-padded input; "same"
// pads dilation * (k - 1) per dim, the odd one on the right), with the input
// sharded along H on 2 ranks (the halo exchange sees the uneven padding).
#include <catch2/catch.hpp>

#include "dtensor/dtensor.h"
#include "dtensor/testing.h"

using namespace dtensor;

namespace {

struct Pads {
  std::int64_t top, bottom, left, right;
};

// out[o][y][x] = bias[o] + sum_{c,i,j} in[c][y*s + i*d - top][x*s + j*d - left] * w[o][c][i][j]
Tensor naive_conv(const Tensor& in, const Tensor& w, const Tensor& b, Pads p, std::int64_t dil_h,
                  std::int64_t dil_w) {
  const std::int64_t C = in.size(1), H = in.size(2), W = in.size(3);
  const std::int64_t O = w.size(0), KH = w.size(2), KW = w.size(3);
  const std::int64_t OH = H + p.top + p.bottom - dil_h * (KH - 1);
  const std::int64_t OW = W + p.left + p.right - dil_w * (KW - 1);
  Tensor out = Tensor::zeros({1, O, OH, OW}, DType::F64);
  for (std::int64_t o = 0; o < O; ++o)
    for (std::int64_t y = 0; y < OH; ++y)
      for (std::int64_t x = 0; x < OW; ++x) {
        double acc = b.item({o});
        for (std::int64_t c = 0; c < C; ++c)
          for (std::int64_t i = 0; i < KH; ++i)
            for (std::int64_t j = 0; j < KW; ++j) {
              const std::int64_t yy = y + i * dil_h - p.top, xx = x + j * dil_w - p.left;
              if (yy < 0 || yy >= H || xx < 0 || xx >= W) continue;
              acc += in.item({0, c, yy, xx}) * w.item({o, c, i, j});
            }
        out.data<double>()[(o * OH + y) * OW + x] = acc;
      }
  return out;
}

void check(nn::Conv2d& conv, const Pads& p, std::int64_t dil_h, std::int64_t dil_w,
           const Shape& expected_shape) {
  const DeviceMesh mesh(DeviceType::CPU, {2});
  conv.distribute(mesh);
  const Tensor X = Tensor::rand({1, 2, 9, 11}, DType::F64, 3);
  const DTensor y = conv(distribute_tensor(X, mesh, {Shard(2)}));
  Tensor w, b;
  for (const auto& [name, t] : conv.named_parameters())
    (name == "weight" ? w : b) = t->full_tensor();
  const Tensor want = naive_conv(X, w, b, p, dil_h, dil_w);
  REQUIRE(y.shape() == expected_shape);
  REQUIRE(want.shape() == expected_shape);
  CHECK(max_abs_diff(y.full_tensor(), want) < 1e-12);
}

}  // namespace

DTENSOR_TEST_CASE("Conv2d rectangular kernel, per-dim padding, 'same' and 'valid'", "[modules]",
                  2) {
  {
    nn::Conv2d conv(2, 3, {3, 5}, {.padding = {1, 2}, .dtype = DType::F64});
    check(conv, {1, 1, 2, 2}, 1, 1, {1, 3, 9, 11});
    CHECK(conv.weight().shape() == Shape{3, 2, 3, 5});
  }
  {
    // Even kernel height and dilated width: H needs 3 (1 top, 2 bottom),
    // W needs 2 * (3 - 1) = 4 (2 and 2).
    nn::Conv2d conv(2, 3, {4, 3}, {.padding = "same", .dilation = {1, 2}, .dtype = DType::F64});
    check(conv, {1, 2, 2, 2}, 1, 2, {1, 3, 9, 11});
  }
  {
    nn::Conv2d conv(2, 3, {2, 3}, {.padding = "valid", .dtype = DType::F64});
    check(conv, {0, 0, 0, 0}, 1, 1, {1, 3, 8, 9});
  }
  CHECK_THROWS_AS(nn::Conv2d(2, 3, {3, 3}, {.stride = {2}, .padding = "same"}), InvalidArgument);
  CHECK_THROWS_WITH(nn::Conv2d(2, 3, {3, 3}, {.stride = {2}, .padding = "same"}),
                    Catch::Contains("padding='same'") && Catch::Contains("stride"));
  CHECK_THROWS_WITH(nn::Conv2d(2, 3, 3, {.padding = "full"}), Catch::Contains("padding: 'full'"));
  CHECK_THROWS_WITH(nn::Conv2d(2, 3, {3, 3, 3}), Catch::Contains("kernel_size: 3 values"));
}
