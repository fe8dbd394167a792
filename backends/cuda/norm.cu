// Device side of norm.h. The reductions take one block per row (n * c rows
// of s contiguous elements) and add in f64 what each thread computed in the
// compute type, in a fixed order; the element-wise passes are grid-stride
// loops. The arithmetic of each element is the CPU kernels'
// (backends/cpu/norm_rows.cpp), so both agree to the compute type's rounding.
#include "backends/cuda/norm.h"
#include "backends/cuda/slot_kernels.cuh"

namespace dtensor::cuda_backend {
namespace {

__device__ inline long long stat_of(const NormDims& d, long long i, long long ch) {
  return d.stats_per_sample ? i * d.stats_per_sample + ch / d.group_size : ch / d.group_size;
}

// The row's mean and M2 (all threads get them): the mean of a first pass,
// then the squared deviations from its rounding mc, corrected by
// (sum(x - mc))^2 / s, as norm_rows.cpp's moments_of.
template <typename T>
__device__ void row_moments(const T* x, long long s, double& mean, double& m2) {
  using C = ComputeT<T>;
  double acc = 0;
  for (long long j = threadIdx.x; j < s; j += blockDim.x)
    acc += static_cast<double>(load_c(x, j));
  mean = s > 0 ? block_sum(acc) / static_cast<double>(s) : 0.0;
  const C mc = static_cast<C>(mean);
  double sq = 0, d1 = 0;
  for (long long j = threadIdx.x; j < s; j += blockDim.x) {
    const C dv = load_c(x, j) - mc;
    sq += static_cast<double>(dv * dv);
    d1 += static_cast<double>(dv);
  }
  sq = block_sum(sq);
  d1 = block_sum(d1);
  m2 = s > 0 ? sq - d1 * d1 / static_cast<double>(s) : 0.0;
  if (m2 < 0) m2 = 0;
  if (s > 0) mean = static_cast<double>(mc) + d1 / static_cast<double>(s);
}

template <typename T>
__global__ void row_moments_kernel(const T* x, NormDims d, double* out) {
  const long long rows = d.n * d.c;
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    double mean, m2;
    row_moments(x + r * d.s, d.s, mean, m2);
    if (threadIdx.x == 0) {
      out[2 * r] = mean;
      out[2 * r + 1] = m2;
    }
  }
}

template <typename T>
__global__ void apply_kernel(const T* x, T* y, NormDims d, const double* mean, const double* invstd,
                             const T* w, const T* b, bool relu) {
  using C = ComputeT<T>;
  const long long total = d.n * d.c * d.s;
  for (long long e = blockIdx.x * 1ll * blockDim.x + threadIdx.x; e < total;
       e += 1ll * gridDim.x * blockDim.x) {
    const long long r = e / d.s, j = e - r * d.s, ch = r % d.c, st = stat_of(d, r / d.c, ch);
    const SplitMean<C> m(mean[st]);
    C v;
    if (d.elementwise_affine) {
      v = m.centre(load_c(x, e)) * static_cast<C>(invstd[st]);
      if (w) v *= load_c(w, ch * d.s + j);
      if (b) v += load_c(b, ch * d.s + j);
    } else {
      const C a = static_cast<C>(invstd[st] * (w ? to_f64(w[ch]) : 1.0));
      const C bb = b ? load_c(b, ch) : C(0);
      v = m.centre(load_c(x, e)) * a + bb;
    }
    y[e] = from_f64<T>(relu && v < 0 ? C(0) : v);  // keeps NaN, as relu
  }
}

// The gradient the normalisation gets at e: dy, or with a fused relu (y its
// output, null: none) dy where y > 0 (and where y is NaN, as relu_backward).
template <typename T>
__device__ ComputeT<T> gated(const T* dy, const T* y, long long e) {
  const ComputeT<T> g = load_c(dy, e);
  return y && load_c(y, e) <= ComputeT<T>(0) ? ComputeT<T>(0) : g;
}

template <typename T>
__global__ void row_backward_reduce_kernel(const T* dy, const T* x, NormDims d, const T* w,
                                           double* out, const T* relu_y) {
  using C = ComputeT<T>;
  const long long rows = d.n * d.c, s = d.s;
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const long long ch = r % d.c;
    const T* xr = x + r * s;
    const T* dr = dy + r * s;
    const T* yr = relu_y ? relu_y + r * s : nullptr;
    double mean, m2;
    row_moments(xr, s, mean, m2);
    const C mc = static_cast<C>(mean);
    double g = 0, h = 0;
    for (long long j = threadIdx.x; j < s; j += blockDim.x) {
      const C gj =
          d.elementwise_affine && w ? gated(dr, yr, j) * load_c(w, ch * s + j) : gated(dr, yr, j);
      g += static_cast<double>(gj);
      h += static_cast<double>(gj * (load_c(xr, j) - mc));
    }
    g = block_sum(g);
    h = block_sum(h);
    if (threadIdx.x == 0) {
      const double scale = d.elementwise_affine || !w ? 1.0 : to_f64(w[ch]);
      out[4 * r] = mean;
      out[4 * r + 1] = m2;
      out[4 * r + 2] = g * scale;
      out[4 * r + 3] = (h - (mean - static_cast<double>(mc)) * g) * scale;
    }
  }
}

template <typename T>
__global__ void backward_apply_rows_kernel(const T* dy, const T* x, T* gx, NormDims d,
                                           NormBackwardStats st, const T* w, double* out,
                                           const T* relu_y) {
  using C = ComputeT<T>;
  const long long rows = d.n * d.c, s = d.s;
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const long long ch = r % d.c, k = stat_of(d, r / d.c, ch);
    const double inv = st.invstd[k];
    const SplitMean<C> m(st.mean[k]);
    const C a = static_cast<C>(inv * (w ? to_f64(w[ch]) : 1.0));
    const C b = static_cast<C>(st.mean_gxhat ? -inv * inv * st.mean_gxhat[k] : 0.0);
    const C c = static_cast<C>(st.mean_g ? -inv * st.mean_g[k] : 0.0);
    double sd = 0, sdx = 0;
    for (long long j = threadIdx.x; j < s; j += blockDim.x) {
      const long long e = r * s + j;
      const C g = gated(dy, relu_y, e), xc = m.centre(load_c(x, e));
      if (gx) gx[e] = from_f64<T>(g * a + xc * b + c);
      sd += static_cast<double>(g);
      sdx += static_cast<double>(g * xc);
    }
    sd = block_sum(sd);
    sdx = block_sum(sdx);
    if (threadIdx.x == 0) {
      out[2 * r] = sd;
      out[2 * r + 1] = sdx;
    }
  }
}

// One thread per parameter (channel, position): the samples in order.
template <typename T>
__global__ void backward_apply_elementwise_kernel(const T* dy, const T* x, T* gx, NormDims d,
                                                  NormBackwardStats st, const T* w, double* gw,
                                                  double* gb, const T* relu_y) {
  using C = ComputeT<T>;
  const long long params = d.c * d.s;
  for (long long p = blockIdx.x * 1ll * blockDim.x + threadIdx.x; p < params;
       p += 1ll * gridDim.x * blockDim.x) {
    const long long ch = p / d.s;
    double sw = 0, sb = 0;
    for (long long i = 0; i < d.n; ++i) {
      const long long k = stat_of(d, i, ch), e = (i * d.c) * d.s + p;
      const double inv = st.invstd[k];
      const SplitMean<C> m(st.mean[k]);
      const C ic = static_cast<C>(inv);
      const C g0 = gated(dy, relu_y, e), xc = m.centre(load_c(x, e));
      if (gx) {
        const C mg = static_cast<C>(st.mean_g ? st.mean_g[k] : 0.0);
        const C kk = static_cast<C>(inv * inv * (st.mean_gxhat ? st.mean_gxhat[k] : 0.0));
        const C g = w ? g0 * load_c(w, p) : g0;
        gx[e] = from_f64<T>(ic * (g - mg) - xc * kk);
      }
      sw += static_cast<double>(g0 * xc * ic);
      sb += static_cast<double>(g0);
    }
    if (gw) gw[p] = sw;
    if (gb) gb[p] = sb;
  }
}

}  // namespace

cudaError_t launch_norm_row_moments(ElemType t, const void* x, const NormDims& d, double* out,
                                    cudaStream_t stream) {
  if (d.n * d.c == 0) return cudaSuccess;
  return with_type(t, [&](auto tag) {
    using T = decltype(tag);
    row_moments_kernel<T>
        <<<grid_for_rows(d.n * d.c), kSlotThreads, 0, stream>>>(static_cast<const T*>(x), d, out);
    return cudaGetLastError();
  });
}

cudaError_t launch_norm_apply(ElemType t, const void* x, void* y, const NormDims& d,
                              const double* mean, const double* invstd, const void* w,
                              const void* b, bool relu, cudaStream_t stream) {
  const long long total = d.n * d.c * d.s;
  if (total == 0) return cudaSuccess;
  return with_type(t, [&](auto tag) {
    using T = decltype(tag);
    apply_kernel<T><<<grid_for(total), kSlotThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), d, mean, invstd, static_cast<const T*>(w),
        static_cast<const T*>(b), relu);
    return cudaGetLastError();
  });
}

cudaError_t launch_norm_row_backward_reduce(ElemType t, const void* dy, const void* x,
                                            const NormDims& d, const void* w, double* out,
                                            const void* relu_y, cudaStream_t stream) {
  if (d.n * d.c == 0) return cudaSuccess;
  return with_type(t, [&](auto tag) {
    using T = decltype(tag);
    row_backward_reduce_kernel<T><<<grid_for_rows(d.n * d.c), kSlotThreads, 0, stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), d, static_cast<const T*>(w), out,
        static_cast<const T*>(relu_y));
    return cudaGetLastError();
  });
}

cudaError_t launch_norm_backward_apply_rows(ElemType t, const void* dy, const void* x, void* gx,
                                            const NormDims& d, const NormBackwardStats& st,
                                            const void* w, double* out, const void* relu_y,
                                            cudaStream_t stream) {
  if (d.n * d.c == 0) return cudaSuccess;
  return with_type(t, [&](auto tag) {
    using T = decltype(tag);
    backward_apply_rows_kernel<T><<<grid_for_rows(d.n * d.c), kSlotThreads, 0, stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<T*>(gx), d, st,
        static_cast<const T*>(w), out, static_cast<const T*>(relu_y));
    return cudaGetLastError();
  });
}

cudaError_t launch_norm_backward_apply_elementwise(ElemType t, const void* dy, const void* x,
                                                   void* gx, const NormDims& d,
                                                   const NormBackwardStats& st, const void* w,
                                                   double* gw, double* gb, const void* relu_y,
                                                   cudaStream_t stream) {
  if (d.c * d.s == 0) return cudaSuccess;
  return with_type(t, [&](auto tag) {
    using T = decltype(tag);
    backward_apply_elementwise_kernel<T><<<grid_for(d.c * d.s), kSlotThreads, 0, stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<T*>(gx), d, st,
        static_cast<const T*>(w), gw, gb, static_cast<const T*>(relu_y));
    return cudaGetLastError();
  });
}

}  // namespace dtensor::cuda_backend
