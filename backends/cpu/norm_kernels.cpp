// CPU kernels of the normalisations (dtensor/ops/kernels/norm.h) for f32,
// f64, bf16 and f16: the block is walked row by row (norm_rows.h does a
// row's arithmetic, vectorised, in the data's own precision: f32 lanes for
// f32 and the 16-bit types, widened one row at a time; f64 for f64), rows in
// parallel on the rank's OpenMP threads, and the rows' results merged into
// statistics in row order, so the result does not depend on the thread count.
#include <omp.h>

#include <type_traits>
#include <vector>

#include "backends/cpu/norm_rows.h"
#include "backends/cpu/parallel_region.h"
#include "dtensor/ops/kernels/norm.h"

namespace dtensor::cpu {
namespace {

using kernels::NormLayout;

// Blocks smaller than this run on one thread: a parallel region costs more.
constexpr std::int64_t kParallelElements = std::int64_t{1} << 15;

template <typename T>
using Compute = std::conditional_t<std::is_same_v<T, double>, double, float>;

// A thread's buffers for the 16-bit types' widened rows.
struct Scratch {
  std::vector<float> in0, in1, out, gate;
  std::vector<double> gate_f64;  // the gated gradient of f64 rows
};

template <typename T>
const Compute<T>* widen(const T* p, std::int64_t s, std::vector<float>& buf) {
  if constexpr (std::is_same_v<T, Compute<T>>) {
    return p;
  } else {
    buf.resize(static_cast<std::size_t>(s));
    for (std::int64_t j = 0; j < s; ++j)
      buf[static_cast<std::size_t>(j)] = static_cast<float>(p[j]);
    return buf.data();
  }
}

// Where a row's result is computed: in place for f32 / f64, else in `buf`,
// narrowed into the tensor by narrow_row.
template <typename T>
Compute<T>* out_row(T* p, std::int64_t s, std::vector<float>& buf) {
  if constexpr (std::is_same_v<T, Compute<T>>) {
    return p;
  } else {
    buf.resize(static_cast<std::size_t>(s));
    return buf.data();
  }
}
template <typename T>
void narrow_row(T* p, std::int64_t s, const std::vector<float>& buf) {
  if constexpr (!std::is_same_v<T, Compute<T>>)
    for (std::int64_t j = 0; j < s; ++j)
      p[j] = T(buf[static_cast<std::size_t>(j)]);
}

// The gradient a row of the normalisation's output gets: dy itself, or with
// a fused relu dy where its output y > 0 (y null: none), in a row buffer.
template <typename T>
const Compute<T>* gated_row(const T* dy, const T* y, std::int64_t s, Scratch& sc) {
  const Compute<T>* g = widen(dy, s, sc.in0);
  if (!y) return g;
  if constexpr (std::is_same_v<T, double>) {
    sc.gate_f64.resize(static_cast<std::size_t>(s));
    row_relu_gate(g, y, sc.gate_f64.data(), s);
    return sc.gate_f64.data();
  } else if constexpr (std::is_same_v<T, float>) {
    sc.gate.resize(static_cast<std::size_t>(s));
    row_relu_gate(g, y, sc.gate.data(), s);
    return sc.gate.data();
  } else {
    // The 16-bit types: y widened into `gate` and gated there, in place
    // (`out` may already hold the row's result buffer).
    widen(y, s, sc.gate);
    row_relu_gate(g, sc.gate.data(), sc.gate.data(), s);
    return sc.gate.data();
  }
}

// A parameter tensor ([params], the data's dtype) in the compute type; empty:
// none. f32 and f64 are read in place: layer_norm's per-element parameters
// are as large as a sample, and copying them on every call cost a fresh
// allocation's page faults besides the copy.
template <typename T>
class Params {
 public:
  explicit Params(const Tensor& t) {
    if (!t.defined()) return;
    if constexpr (std::is_same_v<Compute<T>, T>) {
      p_ = t.data<T>();
    } else {
      const T* p = t.data<T>();
      widened_.resize(static_cast<std::size_t>(t.numel()));
      for (std::size_t k = 0; k < widened_.size(); ++k)
        widened_[k] = static_cast<Compute<T>>(p[k]);
      p_ = widened_.data();
    }
  }
  Params(const Params&) = delete;
  Params& operator=(const Params&) = delete;
  bool empty() const { return p_ == nullptr; }
  const Compute<T>& operator[](std::int64_t k) const { return p_[k]; }

 private:
  std::vector<Compute<T>> widened_;
  const Compute<T>* p_ = nullptr;
};

// Runs f(row, scratch) for every row in [0, rows), in parallel when it pays.
template <typename F>
void for_rows(std::int64_t rows, std::int64_t s, F&& f) {
  const bool parallel = rows > 1 && rows * s >= kParallelElements;
  parallel_region(parallel, [&] {
    Scratch scratch;
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r)
      f(r, scratch);
  });
}

const double* f64(const Tensor& t) {
  return t.defined() ? t.data<double>() : nullptr;
}

// Whether each [sample, channel] row of `t` ([n, c, spatial...]) holds its
// elements contiguously, wherever the rows lie: a view narrowed along the
// first spatial dim (the halo chain's owned cells) is read in place.
bool rows_contiguous(const Tensor& t) {
  std::int64_t expected = 1;
  for (std::size_t d = t.shape().size(); d-- > 2;) {
    if (t.shape()[d] == 1) continue;
    if (t.strides()[d] != expected) return false;
    expected *= t.shape()[d];
  }
  return true;
}

template <typename T>
void moments(const kernels::NormMomentsArgs& a) {
  const NormLayout& L = a.layout;
  const std::int64_t rows = L.n * L.c, s = L.s;
  std::vector<double> mean(static_cast<std::size_t>(rows)), m2(mean.size());
  const Tensor x_rows = rows_contiguous(a.x) ? a.x : a.x.contiguous();
  const T* x = x_rows.data<T>();
  const std::int64_t sample_stride = x_rows.dim() > 0 ? x_rows.strides()[0] : 0;
  const std::int64_t channel_stride = x_rows.dim() > 1 ? x_rows.strides()[1] : 0;
  for_rows(rows, s, [&](std::int64_t r, Scratch& sc) {
    const auto k = static_cast<std::size_t>(r);
    const T* row = x + (r / L.c) * sample_stride + (r % L.c) * channel_stride;
    row_moments(widen(row, s, sc.in0), s, mean[k], m2[k]);
  });
  double* out = a.moments.data<double>();
  std::fill(out, out + 3 * L.stats(), 0.0);
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto k = static_cast<std::size_t>(r);
    const double row[3] = {static_cast<double>(s), mean[k], m2[k]};
    kernels::merge_moments_into(out + 3 * L.stat(r / L.c, r % L.c), row);
  }
}

template <typename T>
void apply(const kernels::NormApplyArgs& a) {
  const NormLayout& L = a.layout;
  const std::int64_t rows = L.n * L.c, s = L.s;
  const Params<T> w(a.weight), b(a.bias);
  const double *mean = f64(a.mean), *invstd = f64(a.invstd);
  const T* x = a.x.data<T>();
  T* y = a.y.data<T>();
  for_rows(rows, s, [&](std::int64_t r, Scratch& sc) {
    const std::int64_t ch = r % L.c, st = L.stat(r / L.c, ch);
    const auto* xr = widen(x + r * s, s, sc.in0);
    auto* yr = out_row(y + r * s, s, sc.out);
    if (L.elementwise_affine) {
      row_affine_elementwise(xr, yr, s, mean[st], invstd[st], w.empty() ? nullptr : &w[ch * s],
                             b.empty() ? nullptr : &b[ch * s], a.relu);
    } else {
      RowAffine f;
      f.m = mean[st];
      f.a = invstd[st] * (w.empty() ? 1.0 : static_cast<double>(w[ch]));
      f.b = b.empty() ? 0.0 : static_cast<double>(b[ch]);
      f.relu = a.relu;
      row_affine(xr, yr, s, f);
    }
    narrow_row(y + r * s, s, sc.out);
  });
}

template <typename T>
void backward_reduce(const kernels::NormBackwardReduceArgs& a) {
  const NormLayout& L = a.layout;
  const std::int64_t rows = L.n * L.c, s = L.s;
  const Params<T> w(a.weight);
  const T *dy = a.grad_output.data<T>(), *x = a.x.data<T>();
  const T* y = a.relu_output.defined() ? a.relu_output.data<T>() : nullptr;
  std::vector<RowReduce> red(static_cast<std::size_t>(rows));
  for_rows(rows, s, [&](std::int64_t r, Scratch& sc) {
    const std::int64_t ch = r % L.c;
    const double wch = w.empty() || L.elementwise_affine ? 1.0 : static_cast<double>(w[ch]);
    const auto* w_elem = L.elementwise_affine && !w.empty() ? &w[ch * s] : nullptr;
    red[static_cast<std::size_t>(r)] =
        row_backward_reduce(gated_row(dy + r * s, y ? y + r * s : nullptr, s, sc),
                            widen(x + r * s, s, sc.in1), s, wch, w_elem);
  });
  // The moments first, then each row's H shifted to its statistic's mean.
  double* out = a.packed.data<double>();
  std::fill(out, out + 5 * L.stats(), 0.0);
  for (std::int64_t r = 0; r < rows; ++r) {
    const RowReduce& q = red[static_cast<std::size_t>(r)];
    const double row[3] = {static_cast<double>(s), q.mean, q.m2};
    kernels::merge_moments_into(out + 5 * L.stat(r / L.c, r % L.c), row);
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    const RowReduce& q = red[static_cast<std::size_t>(r)];
    double* o = out + 5 * L.stat(r / L.c, r % L.c);
    o[3] += q.g;
    o[4] += q.h + (q.mean - o[1]) * q.g;
  }
}

template <typename T>
void backward_apply(const kernels::NormBackwardApplyArgs& a) {
  const NormLayout& L = a.layout;
  const std::int64_t rows = L.n * L.c, s = L.s;
  const Params<T> w(a.weight);
  const double *mean = f64(a.mean), *invstd = f64(a.invstd);
  const double *mg = f64(a.mean_g), *mgx = f64(a.mean_gxhat);
  const T *dy = a.grad_output.data<T>(), *x = a.x.data<T>();
  const T* y = a.relu_output.defined() ? a.relu_output.data<T>() : nullptr;
  T* gx = a.grad_input.defined() ? a.grad_input.data<T>() : nullptr;
  if (L.elementwise_affine) {
    // Parameters per element: the samples add into the same sums, so the
    // channels run in parallel and the samples one after another.
    // The parameter gradients summed in the compute type: in place for f32 /
    // f64, else in a float row narrowed into them at the end (out_row).
    std::vector<float> gw_row, gb_row;
    T* gw_out = a.grad_weight.defined() ? a.grad_weight.data<T>() : nullptr;
    T* gb_out = a.grad_bias.defined() ? a.grad_bias.data<T>() : nullptr;
    Compute<T>* gw = gw_out ? out_row(gw_out, L.params(), gw_row) : nullptr;
    Compute<T>* gb = gb_out ? out_row(gb_out, L.params(), gb_row) : nullptr;
    if (L.n == 0) {
      for (auto* p : {gw, gb})
        if (p) std::fill(p, p + L.params(), Compute<T>(0));
    }
    for (std::int64_t i = 0; i < L.n; ++i)
      for_rows(L.c, s, [&](std::int64_t ch, Scratch& sc) {
        const std::int64_t r = i * L.c + ch, st = L.stat(i, ch);
        auto* gr = gx ? out_row(gx + r * s, s, sc.out) : nullptr;
        row_backward_apply_elementwise(
            gated_row(dy + r * s, y ? y + r * s : nullptr, s, sc), widen(x + r * s, s, sc.in1), gr,
            s, mean[st], invstd[st], w.empty() ? nullptr : &w[ch * s], mg ? mg[st] : 0.0,
            mgx ? mgx[st] : 0.0, gw ? gw + ch * s : nullptr, gb ? gb + ch * s : nullptr, i == 0);
        if (gx) narrow_row(gx + r * s, s, sc.out);
      });
    if (gw_out) narrow_row(gw_out, L.params(), gw_row);
    if (gb_out) narrow_row(gb_out, L.params(), gb_row);
    return;
  }
  std::vector<RowSums> sums(static_cast<std::size_t>(rows));
  for_rows(rows, s, [&](std::int64_t r, Scratch& sc) {
    const std::int64_t ch = r % L.c, st = L.stat(r / L.c, ch);
    const double inv = invstd[st];
    RowBackward f;
    f.m = mean[st];
    f.a = inv * (w.empty() ? 1.0 : static_cast<double>(w[ch]));
    f.b = mgx ? -inv * inv * mgx[st] : 0.0;
    f.c = mg ? -inv * mg[st] : 0.0;
    auto* gr = gx ? out_row(gx + r * s, s, sc.out) : nullptr;
    sums[static_cast<std::size_t>(r)] =
        row_backward_apply(gated_row(dy + r * s, y ? y + r * s : nullptr, s, sc),
                           widen(x + r * s, s, sc.in1), gr, s, f);
    if (gx) narrow_row(gx + r * s, s, sc.out);
  });
  // Parameters per channel: each sums n * s terms, in f64, rounded once.
  std::vector<double> gw(static_cast<std::size_t>(L.params())), gb(gw.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t ch = r % L.c, st = L.stat(r / L.c, ch);
    const RowSums& q = sums[static_cast<std::size_t>(r)];
    gw[static_cast<std::size_t>(ch)] += q.dy_xc * invstd[st];
    gb[static_cast<std::size_t>(ch)] += q.dy;
  }
  auto round_into = [](const Tensor& out, const std::vector<double>& v) {
    if (!out.defined()) return;
    T* o = out.data<T>();
    for (std::size_t k = 0; k < v.size(); ++k)
      o[k] = static_cast<T>(static_cast<Compute<T>>(v[k]));
  };
  round_into(a.grad_weight, gw);
  round_into(a.grad_bias, gb);
}

template <typename T>
void register_for() {
  constexpr DType dt = dtype_of<T>::value;
  register_kernel(kernels::kNormMoments, DeviceType::CPU, dt,
                  KernelFunction<kernels::NormMomentsArgs>(moments<T>));
  register_kernel(kernels::kNormApply, DeviceType::CPU, dt,
                  KernelFunction<kernels::NormApplyArgs>(apply<T>));
  register_kernel(kernels::kNormBackwardReduce, DeviceType::CPU, dt,
                  KernelFunction<kernels::NormBackwardReduceArgs>(backward_reduce<T>));
  register_kernel(kernels::kNormBackwardApply, DeviceType::CPU, dt,
                  KernelFunction<kernels::NormBackwardApplyArgs>(backward_apply<T>));
}

struct Registrar {
  Registrar() {
    register_for<float>();
    register_for<double>();
    register_for<BFloat16>();
    register_for<Float16>();
  }
};
const Registrar registrar;

}  // namespace
}  // namespace dtensor::cpu
