// CPU kernel of the depthwise weight gradient (dtensor/ops/kernels/depthwise_conv.h),
// f32. Per (n, c) the input plane is copied once, with its zero padding, into
// a buffer of the rank's thread (from whatever tiles the halo window has), so
// the taps below read it without bounds checks. For each kernel row i, one
// pass over the output rows keeps a vector accumulator per kernel column j in
// registers: each grad_output vector is loaded once and multiplied into all
// kw shifted input vectors. Accumulators are emptied into f64 every
// kFlushRows rows, so each f32 partial sum holds a few hundred products and
// the result does not drift with the image size. Channels run in parallel on
// the rank's threads; each channel's sum is in a fixed order, so the result
// does not depend on the thread count.
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "backends/cpu/parallel_region.h"
#include "backends/cpu/row_sum.h"
#include "backends/cpu/simd.h"
#include "dtensor/core/errors.h"
#include "dtensor/ops/kernels/depthwise_conv.h"

namespace dtensor::cpu {
namespace {

using Int = std::int64_t;
using Lanes = float __attribute__((vector_size(64)));  // 16 floats: one AVX-512 register
constexpr Int kLanes = 16;
constexpr Int kFlushRows = 32;

[[gnu::always_inline]] inline double lane_sum(const Lanes& v) {
  double s = 0;
  for (Int l = 0; l < kLanes; ++l)
    s += static_cast<double>(v[l]);
  return s;
}

// taps[i * KW + j] += sum over y < ho, x < wo of dy[y, x] * plane[y + i, x + j]
// for one (n, c): plane is (ho + kh - 1) x wp, dy is ho x wo.
template <int KW>
[[gnu::always_inline]] inline void add_taps(const float* plane, Int wp, const float* dy, Int ho,
                                            Int wo, Int kh, double* taps) {
  for (Int i = 0; i < kh; ++i) {
    double sums[KW] = {};
    Lanes acc[KW] = {};
    for (Int y = 0; y < ho; ++y) {
      const float* in = plane + (y + i) * wp;
      const float* g = dy + y * wo;
      Int x = 0;
      for (; x + kLanes <= wo; x += kLanes) {
        // Unaligned loads; memcpy, as a function returning a vector would
        // change the ABI of the baseline build.
        Lanes d;
        std::memcpy(&d, g + x, sizeof d);
        for (int j = 0; j < KW; ++j) {
          Lanes v;
          std::memcpy(&v, in + x + j, sizeof v);
          acc[j] += d * v;
        }
      }
      for (; x < wo; ++x)
        for (int j = 0; j < KW; ++j)
          sums[j] += static_cast<double>(g[x]) * static_cast<double>(in[x + j]);
      if ((y + 1) % kFlushRows == 0 || y + 1 == ho)
        for (int j = 0; j < KW; ++j) {
          sums[j] += lane_sum(acc[j]);
          acc[j] = Lanes{};
        }
    }
    for (int j = 0; j < KW; ++j)
      taps[i * KW + j] += sums[j];
  }
}

// add_taps<kw> for a kernel width known only at run time (1..8).
template <int... W>
[[gnu::always_inline]] inline void add_taps_of_width(std::integer_sequence<int, W...>, Int kw,
                                                     const float* plane, Int wp, const float* dy,
                                                     Int ho, Int wo, Int kh, double* taps) {
  ((kw == W + 1 ? add_taps<W + 1>(plane, wp, dy, ho, wo, kh, taps) : void()), ...);
}

DTENSOR_SIMD_CLONES void add_taps(const float* plane, Int wp, const float* dy, Int ho, Int wo,
                                  Int kh, Int kw, double* taps) {
  add_taps_of_width(std::make_integer_sequence<int, kernels::kDepthwiseWeightGradMaxWidth>(), kw,
                    plane, wp, dy, ho, wo, kh, taps);
}

// The window's plane (n, c) with its padding: plane row r, column q hold
// input row r - pad_top, column q - pad_left, and zero outside the input.
struct PlaneGeometry {
  Int rows, cols, pad_top, pad_left;
};

void copy_plane(const TiledTensor& x, Int n, Int c, const PlaneGeometry& g, bool complete,
                float* plane) {
  const Int h = x.shape()[2], w = x.shape()[3];
  if (!complete) {
    std::fill(plane, plane + g.rows * g.cols, 0.0f);
  } else {  // only the padding needs zeros: the tiles cover the rest
    std::fill(plane, plane + g.pad_top * g.cols, 0.0f);
    std::fill(plane + (g.pad_top + h) * g.cols, plane + g.rows * g.cols, 0.0f);
    for (Int r = g.pad_top; r < g.pad_top + h; ++r) {
      float* row = plane + r * g.cols;
      std::fill(row, row + g.pad_left, 0.0f);
      std::fill(row + g.pad_left + w, row + g.cols, 0.0f);
    }
  }
  for (const auto& tile : x.tiles()) {
    const Shape& o = tile.offset;
    const Shape& s = tile.data.shape();
    if (n < o[0] || n >= o[0] + s[0] || c < o[1] || c >= o[1] + s[1]) continue;
    const Shape& st = tile.data.strides();
    const float* base = tile.data.data<float>() + (n - o[0]) * st[0] + (c - o[1]) * st[1];
    for (Int r = 0; r < s[2]; ++r) {
      const float* src = base + r * st[2];
      float* dst = plane + (o[2] + r + g.pad_top) * g.cols + o[3] + g.pad_left;
      if (st[3] == 1) {
        std::copy_n(src, s[3], dst);
      } else {
        for (Int q = 0; q < s[3]; ++q)
          dst[q] = src[q * st[3]];
      }
    }
  }
}

void run_depthwise_weight_grad(const kernels::DepthwiseWeightGradArgs& a) {
  const TiledTensor& x = a.input;
  const Tensor dy = a.grad_output.is_contiguous() ? a.grad_output : a.grad_output.contiguous();
  DTENSOR_CHECK_ARG(x.shape().size() == 4 && dy.dim() == 4 && a.grad_weight.dim() == 4,
                    "conv.depthwise_weight_grad", "expects 2-D images and a [C, 1, kh, kw] weight");
  const Int batch = x.shape()[0], channels = x.shape()[1];
  const Int ho = dy.size(2), wo = dy.size(3);
  const Int kh = a.grad_weight.size(2), kw = a.grad_weight.size(3);
  DTENSOR_CHECK_ARG(kw >= 1 && kw <= kernels::kDepthwiseWeightGradMaxWidth,
                    "conv.depthwise_weight_grad", "kernel width {} is outside 1..{}", kw,
                    kernels::kDepthwiseWeightGradMaxWidth);
  const PlaneGeometry g{ho + kh - 1, wo + kw - 1, a.pad_top, a.pad_left};
  DTENSOR_CHECK_ARG(g.pad_top >= 0 && g.pad_left >= 0 && x.shape()[2] + g.pad_top <= g.rows &&
                        x.shape()[3] + g.pad_left <= g.cols,
                    "conv.depthwise_weight_grad",
                    "input {} with padding ({}, {}) does not fit output {} and kernel {}x{}",
                    shape_str(x.shape()), g.pad_top, g.pad_left, shape_str(dy.shape()), kh, kw);
  const bool complete = x.complete();
  const float* pdy = dy.data<float>();
  float* gw = a.grad_weight.data<float>();
  float* gb = a.grad_bias.defined() ? a.grad_bias.data<float>() : nullptr;
  parallel_region(channels > 1 && batch * channels * ho * wo * kh * kw >= (Int{1} << 16), [&] {
    std::vector<float> plane(static_cast<std::size_t>(g.rows * g.cols));
    std::vector<double> taps(static_cast<std::size_t>(kh * kw));
#pragma omp for schedule(static)
    for (Int c = 0; c < channels; ++c) {
      std::fill(taps.begin(), taps.end(), 0.0);
      double bias = 0;
      for (Int n = 0; n < batch; ++n) {
        const float* g_nc = pdy + (n * channels + c) * ho * wo;
        if (ho > 0 && wo > 0) {
          copy_plane(x, n, c, g, complete, plane.data());
          add_taps(plane.data(), g.cols, g_nc, ho, wo, kh, kw, taps.data());
        }
        if (gb) bias += row_sum(g_nc, ho * wo);
      }
      for (Int k = 0; k < kh * kw; ++k)
        gw[c * kh * kw + k] = static_cast<float>(taps[static_cast<std::size_t>(k)]);
      if (gb) gb[c] = static_cast<float>(bias);
    }
  });
}

struct Registrar {
  Registrar() {
    register_kernel(kernels::kDepthwiseWeightGrad, DeviceType::CPU, DType::F32,
                    KernelFunction<kernels::DepthwiseWeightGradArgs>(run_depthwise_weight_grad));
  }
};
const Registrar registrar;

}  // namespace
}  // namespace dtensor::cpu
