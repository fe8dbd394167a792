// The hand-written copy between plain tensors and oneDNN's nChw16c layout
// (backends/onednn/channel_block_copy.h), checked element by element against
// the layout's definition written out here: element (n, c, h, w) of an
// N x C x H x W nChw16c buffer is at ((n * C/16 + c/16) * H + h) * W * 16 +
// w * 16 + c % 16.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "backends/onednn/channel_block_copy.h"

using dtensor::DType;
using dtensor::Shape;
using dtensor::Tensor;
using dtensor::onednn::copy_channel_blocked;

namespace {

std::int64_t blocked_index(const Shape& whole, std::int64_t n, std::int64_t c, std::int64_t h,
                           std::int64_t w) {
  const std::int64_t cb = whole[1] / 16;
  return ((n * cb + c / 16) * whole[2] + h) * whole[3] * 16 + w * 16 + c % 16;
}

dnnl::memory::desc nchw16c(const Shape& s) {
  return dnnl::memory::desc(dnnl::memory::dims(s.begin(), s.end()), dnnl::memory::data_type::f32,
                            dnnl::memory::format_tag::aBcd16b);
}

bool has_avx512() {
  return __builtin_cpu_supports("avx512f");
}

}  // namespace

TEST_CASE("channel block copy: regions of nChw16c <-> strided plain views, element for element",
          "[onednn][reorder]") {
  if (!has_avx512()) {
    WARN("no AVX-512 here: the copy declines and oneDNN's reorder runs");
    return;
  }
  std::mt19937 rng(11);
  auto pick = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  for (int round = 0; round < 60; ++round) {
    // A region of a whole blocked buffer: any offset on n, h, w; whole blocks on c.
    const Shape region{pick(1, 2), 16 * pick(1, 3), pick(1, 6),
                       std::vector<std::int64_t>{1, 5, 15, 16, 17, 40}[pick(0, 5)]};
    const Shape offset{pick(0, 1), 16 * pick(0, 1), pick(0, 3), pick(0, 20)};
    Shape whole(4);
    for (int d = 0; d < 4; ++d)
      whole[d] = region[d] + offset[d] + pick(0, 2) * (d == 1 ? 16 : 1);
    CAPTURE(round, region, offset, whole);
    const dnnl::memory::desc sub =
        nchw16c(whole).submemory_desc(dnnl::memory::dims(region.begin(), region.end()),
                                      dnnl::memory::dims(offset.begin(), offset.end()));
    std::vector<float> buffer(static_cast<std::size_t>(whole[0] * whole[1] * whole[2] * whole[3]),
                              -7.0f);

    // The plain side: a strided view (a narrow of a wider tensor), random values.
    const Tensor wide = Tensor::rand({region[0], region[1], region[2], region[3] + 3}, DType::F32,
                                     static_cast<std::uint64_t>(round));
    const Tensor plain = wide.narrow(3, 2, region[3]);
    REQUIRE(copy_channel_blocked(plain, sub, buffer.data(), true));
    std::int64_t written = 0;
    for (std::int64_t n = 0; n < region[0]; ++n)
      for (std::int64_t c = 0; c < region[1]; ++c)
        for (std::int64_t h = 0; h < region[2]; ++h)
          for (std::int64_t w = 0; w < region[3]; ++w) {
            const auto at = static_cast<std::size_t>(
                blocked_index(whole, n + offset[0], c + offset[1], h + offset[2], w + offset[3]));
            REQUIRE(buffer[at] == static_cast<float>(plain.item({n, c, h, w})));
            ++written;
          }
    // Nothing outside the region was touched.
    std::int64_t untouched = 0;
    for (float v : buffer)
      untouched += v == -7.0f;
    REQUIRE(untouched == static_cast<std::int64_t>(buffer.size()) - written);

    // And back out, into another strided view.
    Tensor back_wide = Tensor::zeros(wide.shape(), DType::F32);
    Tensor back = back_wide.narrow(3, 1, region[3]);
    REQUIRE(copy_channel_blocked(back, sub, buffer.data(), false));
    for (std::int64_t n = 0; n < region[0]; ++n)
      for (std::int64_t c = 0; c < region[1]; ++c)
        for (std::int64_t h = 0; h < region[2]; ++h)
          for (std::int64_t w = 0; w < region[3]; ++w)
            REQUIRE(back.item({n, c, h, w}) == plain.item({n, c, h, w}));
  }
}

TEST_CASE("channel block copy: large tensors, streamed out when rows are whole aligned lines",
          "[onednn][reorder]") {
  if (!has_avx512()) {
    WARN("no AVX-512 here: the copy declines and oneDNN's reorder runs");
    return;
  }
  using dtensor::onednn::kChannelBlockStreamBytes;
  // Bands of rows of a tensor whose channels span kChannelBlockStreamBytes
  // or more: with W a multiple of 16 every row starts on a line (the
  // streamed stores); with W = 250 or a view shifted by one element it does
  // not (ordinary stores). Either way the band, and only the band, must
  // hold the blocked buffer's values.
  for (const std::int64_t width : {256, 250}) {
    for (const std::int64_t shift : {0, 1}) {
      const std::int64_t channels = 32;
      const std::int64_t height = kChannelBlockStreamBytes / (channels * width * 4) + 8;
      const Shape whole{2, channels, height, width + shift};
      CAPTURE(width, shift, whole);
      const std::int64_t lo = 3, rows = height - 7;
      const Shape region{2, channels, rows, width};
      const dnnl::memory::desc md = nchw16c(region);
      const Tensor values = Tensor::rand(region, DType::F32, 5);
      std::vector<float> buffer(static_cast<std::size_t>(values.numel()));
      REQUIRE(copy_channel_blocked(values, md, buffer.data(), true));

      Tensor target = Tensor::zeros(whole, DType::F32);
      Tensor band = target.narrow(2, lo, rows).narrow(3, shift, width);
      REQUIRE(band.stride(1) * band.size(1) * 4 >= kChannelBlockStreamBytes);
      REQUIRE(copy_channel_blocked(band, md, buffer.data(), false));
      const float* t = target.data<float>();
      std::int64_t mismatched = 0, touched_outside = 0;
      for (std::int64_t n = 0; n < whole[0]; ++n)
        for (std::int64_t c = 0; c < whole[1]; ++c)
          for (std::int64_t h = 0; h < whole[2]; ++h)
            for (std::int64_t w = 0; w < whole[3]; ++w) {
              const float got = t[((n * whole[1] + c) * whole[2] + h) * whole[3] + w];
              const bool inside = h >= lo && h < lo + rows && w >= shift && w < shift + width;
              if (!inside) {
                touched_outside += got != 0.0f;
                continue;
              }
              const auto at =
                  static_cast<std::size_t>(blocked_index(region, n, c, h - lo, w - shift));
              mismatched += got != buffer[at];
            }
      CHECK(mismatched == 0);
      CHECK(touched_outside == 0);
    }
  }
}

TEST_CASE("channel block copy: declines what it does not do, touching nothing",
          "[onednn][reorder]") {
  std::vector<float> buffer(2 * 32 * 4 * 8, -7.0f);
  const Tensor f32 = Tensor::rand({2, 32, 4, 8}, DType::F32, 1);
  // Channels not a whole number of blocks (oneDNN pads them).
  const Tensor eight = Tensor::rand({2, 8, 4, 8}, DType::F32, 2);
  CHECK_FALSE(copy_channel_blocked(eight, nchw16c({2, 8, 4, 8}), buffer.data(), true));
  // Another dtype.
  const Tensor bf16 = Tensor::rand({2, 32, 4, 8}, DType::BF16, 3);
  const dnnl::memory::desc bf16_md({2, 32, 4, 8}, dnnl::memory::data_type::bf16,
                                   dnnl::memory::format_tag::aBcd16b);
  CHECK_FALSE(copy_channel_blocked(bf16, bf16_md, buffer.data(), true));
  // Another layout: 8-channel blocks, or plain.
  const dnnl::memory::desc by8({2, 32, 4, 8}, dnnl::memory::data_type::f32,
                               dnnl::memory::format_tag::aBcd8b);
  CHECK_FALSE(copy_channel_blocked(f32, by8, buffer.data(), true));
  const dnnl::memory::desc plain({2, 32, 4, 8}, dnnl::memory::data_type::f32,
                                 dnnl::memory::format_tag::abcd);
  CHECK_FALSE(copy_channel_blocked(f32, plain, buffer.data(), true));
  for (float v : buffer)
    REQUIRE(v == -7.0f);
}
