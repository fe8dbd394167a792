#include "backends/onednn/channel_block_copy.h"

// GCC 12 flags the intrinsics' own _mm512_undefined_* placeholders as
// maybe-uninitialized once they are inlined here (a false positive: every
// lane is written before it is read).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#include <omp.h>

#include <cstddef>
#include <cstdint>

namespace dtensor::onednn {
namespace {

constexpr std::int64_t kBlock = 16;  // channels per block: one zmm of f32
// How far ahead (in elements of a plain row) the copy asks for the lines it
// will read. The plain side is 16 rows a channel plane apart: 16 streams,
// more than the hardware prefetcher follows, so each load waited on memory
// (the copy ran at a quarter of memcpy's speed, 8 GB/s). Two lines ahead of
// each stream measured best: 12-13 GB/s.
constexpr std::int64_t kAhead = 32;
// Copies smaller than this run on one thread: a parallel region costs more.
constexpr std::int64_t kParallelElements = std::int64_t{1} << 16;

// r[k] <- column k of the 16 x 16 matrix whose rows are r[0..15]. Three
// rounds: pairs of rows interleaved by element, then by element pair, then
// 128-bit lanes gathered; each output is one column of the input.
[[gnu::target("avx512f"), gnu::always_inline]] inline void transpose16(__m512 r[16]) {
  __m512 t[16], u[16];
  for (std::ptrdiff_t i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  // u[4q + j], lane L: column 4L + j of rows 4q .. 4q + 3.
  for (std::ptrdiff_t q = 0; q < 4; ++q) {
    const __m512d a = _mm512_castps_pd(t[4 * q]), b = _mm512_castps_pd(t[4 * q + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * q + 2]), d = _mm512_castps_pd(t[4 * q + 3]);
    u[4 * q] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    u[4 * q + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    u[4 * q + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    u[4 * q + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (std::ptrdiff_t j = 0; j < 4; ++j) {
    const __m512 even_lo = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88);
    const __m512 even_hi = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88);
    const __m512 odd_lo = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xDD);
    const __m512 odd_hi = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xDD);
    r[j] = _mm512_shuffle_f32x4(even_lo, even_hi, 0x88);
    r[8 + j] = _mm512_shuffle_f32x4(even_lo, even_hi, 0xDD);
    r[4 + j] = _mm512_shuffle_f32x4(odd_lo, odd_hi, 0x88);
    r[12 + j] = _mm512_shuffle_f32x4(odd_lo, odd_hi, 0xDD);
  }
}

// One row of one channel block: 16 plain rows (channel k at rows + k *
// channel_stride, `w` contiguous elements) <-> `w` pixels of 16 channels
// at `blocked`, consecutive pixels `pixel_stride` apart. `stream`: the
// plain rows are written with non-temporal stores (every store is a whole,
// aligned cache line).
[[gnu::target("avx512f")]] void copy_row(float* rows, std::int64_t channel_stride, float* blocked,
                                         std::int64_t pixel_stride, std::int64_t w, bool into,
                                         bool stream) {
  __m512 r[16];
  std::int64_t x = 0;
  for (; x + kBlock <= w; x += kBlock) {
    if (into) {
      for (int k = 0; k < 16; ++k) {
        _mm_prefetch(reinterpret_cast<const char*>(rows + k * channel_stride + x + kAhead),
                     _MM_HINT_T0);
        r[k] = _mm512_loadu_ps(rows + k * channel_stride + x);
      }
      transpose16(r);
      for (int k = 0; k < 16; ++k)
        _mm512_storeu_ps(blocked + (x + k) * pixel_stride, r[k]);
    } else {
      for (int k = 0; k < 16; ++k)
        r[k] = _mm512_loadu_ps(blocked + (x + k) * pixel_stride);
      transpose16(r);
      if (stream) {
        for (int k = 0; k < 16; ++k)
          _mm512_stream_ps(rows + k * channel_stride + x, r[k]);
      } else {
        for (int k = 0; k < 16; ++k)
          _mm512_storeu_ps(rows + k * channel_stride + x, r[k]);
      }
    }
  }
  for (; x < w; ++x)
    for (std::int64_t k = 0; k < kBlock; ++k) {
      float& plain = rows[k * channel_stride + x];
      float& block = blocked[x * pixel_stride + k];
      if (into)
        block = plain;
      else
        plain = block;
    }
  // Non-temporal stores are weakly ordered: fenced before another thread
  // (the one that joins the parallel region) may read them.
  if (stream) _mm_sfence();
}

bool applies(const Tensor& plain, const dnnl_memory_desc_t& md) {
  if (plain.dtype() != DType::F32 || plain.dim() != 4 || md.ndims != 4) return false;
  if (md.data_type != dnnl_f32 || md.format_kind != dnnl_blocked) return false;
  const dnnl_blocking_desc_t& b = md.format_desc.blocking;
  if (b.inner_nblks != 1 || b.inner_blks[0] != kBlock || b.inner_idxs[0] != 1) return false;
  for (int d = 0; d < 4; ++d)
    if (md.dims[d] != plain.size(d) || md.padded_offsets[d] != 0) return false;
  // Whole blocks only: a padded block's padding is oneDNN's to fill.
  if (md.dims[1] % kBlock != 0 || md.padded_dims[1] != md.dims[1]) return false;
  if (plain.size(3) > 1 && plain.stride(3) != 1) return false;
  return __builtin_cpu_supports("avx512f");
}

}  // namespace

bool copy_channel_blocked(const Tensor& plain, const dnnl::memory::desc& blocked, void* base,
                          bool into) {
  const dnnl_memory_desc_t& md = blocked.data;
  if (!applies(plain, md)) return false;
  const dnnl_dims_t& bs = md.format_desc.blocking.strides;  // in elements, per outer index
  float* const dst = static_cast<float*>(base) + md.offset0;
  float* const src = static_cast<float*>(plain.data_ptr());
  const std::int64_t n = plain.size(0), cb = plain.size(1) / kBlock, h = plain.size(2),
                     w = plain.size(3);
  const std::int64_t sn = plain.stride(0), sc = plain.stride(1), sh = plain.stride(2);
  const bool parallel = plain.numel() >= kParallelElements && omp_get_max_threads() > 1;
  // Streamed stores (kChannelBlockStreamBytes): only where every store is a
  // whole aligned line.
  const auto aligned = [](std::uintptr_t v) { return v % 64 == 0; };
  const bool stream =
      !into && w >= kBlock &&
      plain.stride(1) * plain.size(1) * std::int64_t{sizeof(float)} >= kChannelBlockStreamBytes &&
      aligned(reinterpret_cast<std::uintptr_t>(src)) &&
      aligned(static_cast<std::uintptr_t>(sn * 4)) &&
      aligned(static_cast<std::uintptr_t>(sc * 4)) && aligned(static_cast<std::uintptr_t>(sh * 4));
  const auto row = [&](std::int64_t i, std::int64_t c, std::int64_t y) {
    copy_row(src + i * sn + c * kBlock * sc + y * sh, sc, dst + i * bs[0] + c * bs[1] + y * bs[2],
             bs[3], w, into, stream);
  };
  if (!parallel) {  // no region: libgomp would still start a team of one
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t c = 0; c < cb; ++c)
        for (std::int64_t y = 0; y < h; ++y)
          row(i, c, y);
    return true;
  }
#pragma omp parallel for collapse(3) schedule(static)
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t c = 0; c < cb; ++c)
      for (std::int64_t y = 0; y < h; ++y)
        row(i, c, y);
  return true;
}

}  // namespace dtensor::onednn

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
