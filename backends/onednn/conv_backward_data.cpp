#include <fmt/format.h>

#include "backends/onednn/onednn_conv.h"
#include "dtensor/core/logging.h"

namespace dtensor::onednn {
namespace {

struct BackwardDataPlan {
  dnnl::convolution_backward_data prim;
  Operand diff_dst, weights, diff_src;
};

BackwardDataPlan make_plan(DType t, const Shape& in, const Shape& w, const ConvParams& p) {
  const ConvDims d(in, w, p);
  const dnnl::convolution_backward_data::desc desc(
      dnnl::algorithm::convolution_direct, any_md(d.src, t), any_md(d.weights, t), any_md(d.dst, t),
      d.strides, d.dilates, d.padding_l, d.padding_r);
  const dnnl::convolution_backward_data::primitive_desc pd(desc, engine(), forward_pd(t, d, false));
  BackwardDataPlan plan;
  plan.prim = dnnl::convolution_backward_data(pd);
  plan.diff_dst = Operand(plain_md(d.dst, t, d.src_tag), pd.diff_dst_desc(), true);
  plan.weights = Operand(plain_md(d.weights, t, d.weights_tag), pd.weights_desc(), true);
  plan.diff_src = Operand(plain_md(d.src, t, d.src_tag), pd.diff_src_desc(), false);
  log::debug("onednn conv backward_data {} {}: {}", dtype_name(t), p.str(), impl_name(pd));
  return plan;
}

PlanCache<BackwardDataPlan>& cache() {
  static PlanCache<BackwardDataPlan> c;
  return c;
}

}  // namespace

Tensor conv_backward_data(const Tensor& grad_out, const Tensor& w, const Shape& input_shape,
                          const ConvParams& p) {
  Tensor gx = Tensor::empty(input_shape, grad_out.dtype());
  conv_backward_data(grad_out, w, TiledTensor::whole(gx), p);
  return gx;
}

void conv_backward_data(const Tensor& grad_out, const Tensor& w, const TiledTensor& gx,
                        const ConvParams& p) {
  const DType t = grad_out.dtype();
  const Shape& input_shape = gx.shape();
  std::shared_ptr<const BackwardDataPlan> plan;
  try {
    plan = cache().get(cache_key("bwd_data", t, input_shape, w.shape(), false, p),
                       [&] { return make_plan(t, input_shape, w.shape(), p); });
  } catch (const dnnl::error& e) {
    rethrow_unsupported(
        e, fmt::format("convolution backward_data {} input {} weight {} {}", dtype_name(t),
                       shape_str(input_shape), shape_str(w.shape()), p.str()));
  }
  ScratchScope scratch;
  auto& s = stream();
  Tensor temp;
  dnnl::memory diff_src = plan->diff_src.output(gx, temp);
  plan->prim.execute(s, {{DNNL_ARG_DIFF_DST, plan->diff_dst.input(grad_out)},
                         {DNNL_ARG_WEIGHTS, plan->weights.input(w)},
                         {DNNL_ARG_DIFF_SRC, diff_src}});
  plan->diff_src.finish_output(diff_src, gx, temp);
  s.wait();
}

}  // namespace dtensor::onednn
