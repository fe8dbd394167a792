#include <fmt/format.h>

#include "backends/onednn/onednn_conv.h"
#include "backends/onednn/row_bands.h"
#include "dtensor/core/logging.h"
#include "dtensor/ops/kernels/depthwise_conv.h"

namespace dtensor::onednn {
namespace {

struct BackwardWeightsPlan {
  dnnl::convolution_backward_weights prim;
  Operand src, diff_dst, diff_weights, diff_bias;
};

// `acc`: the dtype the gradients come out in (f32 for bf16 bands, whose
// partial sums are added in f32 and rounded once at the end).
BackwardWeightsPlan make_plan(DType t, const Shape& in, const Shape& w, bool want_bias,
                              const ConvParams& p, DType acc) {
  const ConvDims d(in, w, p);
  using dnnl::algorithm;
  const auto desc =
      want_bias ? dnnl::convolution_backward_weights::desc(
                      algorithm::convolution_direct, any_md(d.src, t), any_md(d.weights, acc),
                      any_md(d.bias, acc), any_md(d.dst, t), d.strides, d.dilates, d.padding_l,
                      d.padding_r)
                : dnnl::convolution_backward_weights::desc(
                      algorithm::convolution_direct, any_md(d.src, t), any_md(d.weights, acc),
                      any_md(d.dst, t), d.strides, d.dilates, d.padding_l, d.padding_r);
  const dnnl::convolution_backward_weights::primitive_desc pd(desc, engine(),
                                                              forward_pd(t, d, want_bias));
  BackwardWeightsPlan plan;
  plan.prim = dnnl::convolution_backward_weights(pd);
  plan.src = Operand(plain_md(d.src, t, d.src_tag), pd.src_desc(), true);
  plan.diff_dst = Operand(plain_md(d.dst, t, d.src_tag), pd.diff_dst_desc(), true);
  plan.diff_weights =
      Operand(plain_md(d.weights, acc, d.weights_tag), pd.diff_weights_desc(), false);
  if (want_bias)
    plan.diff_bias =
        Operand(plain_md(d.bias, acc, dnnl::memory::format_tag::x), pd.diff_bias_desc(), false);
  log::debug("onednn conv backward_weights {} {}: {}", dtype_name(t), p.str(), impl_name(pd));
  return plan;
}

PlanCache<BackwardWeightsPlan>& cache() {
  static PlanCache<BackwardWeightsPlan> c;
  return c;
}

}  // namespace

namespace {

std::shared_ptr<const BackwardWeightsPlan> get_plan(DType t, const Shape& in, const Shape& w,
                                                    bool want_bias, const ConvParams& p,
                                                    DType acc) {
  try {
    return cache().get(cache_key("bwd_weights", t, acc, in, w, want_bias, p),
                       [&] { return make_plan(t, in, w, want_bias, p, acc); });
  } catch (const dnnl::error& e) {
    rethrow_unsupported(e, fmt::format("convolution backward_weights {} input {} weight {} {}",
                                       dtype_name(t), shape_str(in), shape_str(w), p.str()));
  }
}

// Band by band: each band's weight (and bias) gradient is a partial sum over
// its output rows, written by the first band and added by the others (a
// reorder with a sum post-op) into `out`, which is f32 (for bf16 data the
// caller rounds it once at the end).
void backward_weights_banded(const Tensor& grad_out, const TiledTensor& x, ConvWeightGrads& out,
                             const std::vector<RowBand>& bands,
                             const std::vector<std::shared_ptr<const BackwardWeightsPlan>>& plans) {
  auto& s = stream();
  // The gradient as the primitive sees it ([g, OC/g, ...] when grouped: a view).
  const auto wd = plans[0]->diff_weights.primitive_desc().dims();
  const Tensor grad_w = out.grad_weight.view(Shape(wd.begin(), wd.end()));
  const Shape zeros_w(wd.size(), 0);
  ScratchScope scratch;
  std::vector<dnnl::memory::desc> src_d, dst_d, w_d, b_d;
  for (const auto& plan : plans) {
    src_d.push_back(plan->src.primitive_desc());
    dst_d.push_back(plan->diff_dst.primitive_desc());
    w_d.push_back(plan->diff_weights.primitive_desc());
    if (out.grad_bias.defined()) b_d.push_back(plan->diff_bias.primitive_desc());
  }
  const BandBuffer src_buf(src_d), dst_buf(dst_d), w_buf(w_d), b_buf(b_d);
  for (std::size_t i = 0; i < bands.size(); ++i) {
    const RowBand& band = bands[i];
    const BackwardWeightsPlan& plan = *plans[i];
    const bool add = i > 0;
    dnnl::memory src = src_buf.view(plan.src.primitive_desc());
    for (const auto& tile : tiles_in_rows(x, band.in_lo, band.in_hi, band.in_lo))
      plan.src.reorder_region(tile.data, tile.offset, src, true);
    dnnl::memory diff_dst = dst_buf.view(plan.diff_dst.primitive_desc());
    const auto rows = rows_of(grad_out, band.out_lo, band.out_hi);
    plan.diff_dst.reorder_region(rows.data, rows.offset, diff_dst, true);
    dnnl::memory diff_w = w_buf.view(plan.diff_weights.primitive_desc());
    ExecArgs args;
    args.add(DNNL_ARG_SRC, src).add(DNNL_ARG_DIFF_DST, diff_dst).add(DNNL_ARG_DIFF_WEIGHTS, diff_w);
    dnnl::memory diff_b;
    if (out.grad_bias.defined()) {
      diff_b = b_buf.view(plan.diff_bias.primitive_desc());
      args.add(DNNL_ARG_DIFF_BIAS, diff_b);
    }
    args.run(plan.prim);
    plan.diff_weights.reorder_region(grad_w, zeros_w, diff_w, false, add);
    if (out.grad_bias.defined())
      plan.diff_bias.reorder_region(out.grad_bias, {0}, diff_b, false, add);
    s.wait();
  }
}

// Whether oneDNN 2.6 lacks a depthwise kernel for this backward-weights pass
// (its depthwise JIT takes kernels up to 3x3) and the library's own runs it
// instead: f32, 2-D, one filter per channel, stride and dilation 1.
bool own_depthwise_kernel(DType t, const Shape& in, const Shape& w, const ConvParams& p) {
  if (t != DType::F32 || in.size() != 4 || w.size() != 4) return false;
  const bool depthwise = w[1] == 1 && p.groups == in[1] && w[0] == in[1];
  const bool dense_taps =
      p.stride == std::vector<std::int64_t>{1, 1} && p.dilation == std::vector<std::int64_t>{1, 1};
  const bool wide = w[2] > 3 || w[3] > 3;
  return depthwise && dense_taps && wide && w[3] <= kernels::kDepthwiseWeightGradMaxWidth &&
         has_kernel(kernels::kDepthwiseWeightGrad, DeviceType::CPU, t);
}

}  // namespace

void conv_backward_weights(const Tensor& grad_out, const TiledTensor& x, const ConvParams& p,
                           const ConvWeightGrads& out) {
  const DType t = x.dtype();
  const Shape& weight_shape = out.grad_weight.shape();
  const bool want_bias = out.grad_bias.defined();
  if (own_depthwise_kernel(t, x.shape(), weight_shape, p)) {
    run_kernel(kernels::kDepthwiseWeightGrad, DeviceType::CPU, t,
               kernels::DepthwiseWeightGradArgs{x, grad_out, p.padding[0].first, p.padding[1].first,
                                                out.grad_weight, out.grad_bias});
    return;
  }
  const auto bands = plan_bands(t, x.shape(), weight_shape, grad_out.shape(), p);
  if (!bands.empty()) {
    const auto plans = plans_for_bands(
        bands, x.shape(), p,
        [&](const Shape& in, const ConvParams& q) {
          return get_plan(t, in, weight_shape, want_bias, q, DType::F32);
        },
        [](const BackwardWeightsPlan& b) { return b.src.tileable() && b.diff_dst.tileable(); });
    if (!plans.empty()) {
      // The bands sum in f32: into the result itself, or (bf16) into f32
      // tensors rounded once at the end.
      ConvWeightGrads sums = out;
      if (t != DType::F32) {
        sums.grad_weight = Tensor::empty(weight_shape, DType::F32);
        if (want_bias) sums.grad_bias = Tensor::empty({weight_shape[0]}, DType::F32);
      }
      backward_weights_banded(grad_out, x, sums, bands, plans);
      if (t != DType::F32) {
        Tensor gw = out.grad_weight, gb = out.grad_bias;  // views of the caller's
        gw.copy_(sums.grad_weight);
        if (want_bias) gb.copy_(sums.grad_bias);
      }
      return;
    }
  }
  const auto plan = get_plan(t, x.shape(), weight_shape, want_bias, p, t);
  ScratchScope scratch;
  auto& s = stream();
  dnnl::memory diff_w = plan->diff_weights.output(out.grad_weight);
  ExecArgs args;
  args.add(DNNL_ARG_SRC, plan->src.input(x))
      .add(DNNL_ARG_DIFF_DST, plan->diff_dst.input(grad_out))
      .add(DNNL_ARG_DIFF_WEIGHTS, diff_w);
  dnnl::memory diff_b;
  if (want_bias) {
    diff_b = plan->diff_bias.output(out.grad_bias);
    args.add(DNNL_ARG_DIFF_BIAS, diff_b);
  }
  args.run(plan->prim);
  plan->diff_weights.finish_output(diff_w, out.grad_weight);
  if (want_bias) plan->diff_bias.finish_output(diff_b, out.grad_bias);
  s.wait();
}

}  // namespace dtensor::onednn
