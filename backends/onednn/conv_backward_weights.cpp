#include <fmt/format.h>

#include "backends/onednn/onednn_conv.h"
#include "dtensor/core/logging.h"

namespace dtensor::onednn {
namespace {

struct BackwardWeightsPlan {
  dnnl::convolution_backward_weights prim;
  Operand src, diff_dst, diff_weights, diff_bias;
};

BackwardWeightsPlan make_plan(DType t, const Shape& in, const Shape& w, bool want_bias,
                              const ConvParams& p) {
  const ConvDims d(in, w, p);
  using dnnl::algorithm;
  const auto desc =
      want_bias
          ? dnnl::convolution_backward_weights::desc(
                algorithm::convolution_direct, any_md(d.src, t), any_md(d.weights, t),
                any_md(d.bias, t), any_md(d.dst, t), d.strides, d.dilates, d.padding_l, d.padding_r)
          : dnnl::convolution_backward_weights::desc(
                algorithm::convolution_direct, any_md(d.src, t), any_md(d.weights, t),
                any_md(d.dst, t), d.strides, d.dilates, d.padding_l, d.padding_r);
  const dnnl::convolution_backward_weights::primitive_desc pd(desc, engine(),
                                                              forward_pd(t, d, want_bias));
  BackwardWeightsPlan plan;
  plan.prim = dnnl::convolution_backward_weights(pd);
  plan.src = Operand(plain_md(d.src, t, d.src_tag), pd.src_desc(), true);
  plan.diff_dst = Operand(plain_md(d.dst, t, d.src_tag), pd.diff_dst_desc(), true);
  plan.diff_weights = Operand(plain_md(d.weights, t, d.weights_tag), pd.diff_weights_desc(), false);
  if (want_bias)
    plan.diff_bias =
        Operand(plain_md(d.bias, t, dnnl::memory::format_tag::x), pd.diff_bias_desc(), false);
  log::debug("onednn conv backward_weights {} {}: {}", dtype_name(t), p.str(), impl_name(pd));
  return plan;
}

PlanCache<BackwardWeightsPlan>& cache() {
  static PlanCache<BackwardWeightsPlan> c;
  return c;
}

}  // namespace

ConvWeightGrads conv_backward_weights(const Tensor& grad_out, const Tensor& x,
                                      const Shape& weight_shape, const ConvParams& p,
                                      bool want_bias) {
  return conv_backward_weights(grad_out, TiledTensor::whole(x), weight_shape, p, want_bias);
}

ConvWeightGrads conv_backward_weights(const Tensor& grad_out, const TiledTensor& x,
                                      const Shape& weight_shape, const ConvParams& p,
                                      bool want_bias) {
  const DType t = x.dtype();
  std::shared_ptr<const BackwardWeightsPlan> plan;
  try {
    plan = cache().get(cache_key("bwd_weights", t, x.shape(), weight_shape, want_bias, p),
                       [&] { return make_plan(t, x.shape(), weight_shape, want_bias, p); });
  } catch (const dnnl::error& e) {
    rethrow_unsupported(
        e, fmt::format("convolution backward_weights {} input {} weight {} {}", dtype_name(t),
                       shape_str(x.shape()), shape_str(weight_shape), p.str()));
  }
  ConvWeightGrads out;
  out.grad_weight = Tensor::empty(weight_shape, t);
  if (want_bias) out.grad_bias = Tensor::empty({weight_shape[0]}, t);
  ScratchScope scratch;
  auto& s = stream();
  dnnl::memory diff_w = plan->diff_weights.output(out.grad_weight);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, plan->src.input(x)},
                                             {DNNL_ARG_DIFF_DST, plan->diff_dst.input(grad_out)},
                                             {DNNL_ARG_DIFF_WEIGHTS, diff_w}};
  dnnl::memory diff_b;
  if (want_bias) {
    diff_b = plan->diff_bias.output(out.grad_bias);
    args.emplace(DNNL_ARG_DIFF_BIAS, diff_b);
  }
  plan->prim.execute(s, args);
  plan->diff_weights.finish_output(diff_w, out.grad_weight);
  if (want_bias) plan->diff_bias.finish_output(diff_b, out.grad_bias);
  s.wait();
  return out;
}

}  // namespace dtensor::onednn
