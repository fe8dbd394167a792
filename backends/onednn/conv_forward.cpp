#include <fmt/format.h>

#include "backends/onednn/onednn_conv.h"
#include "dtensor/core/logging.h"

namespace dtensor::onednn {
namespace {

struct ForwardPlan {
  dnnl::convolution_forward prim;
  Operand src, weights, bias, dst;
};

ForwardPlan make_plan(DType t, const Shape& in, const Shape& w, bool has_bias,
                      const ConvParams& p) {
  const ConvDims d(in, w, p);
  const auto pd = forward_pd(t, d, has_bias);
  ForwardPlan plan;
  plan.prim = dnnl::convolution_forward(pd);
  plan.src = Operand(plain_md(d.src, t, d.src_tag), pd.src_desc(), true);
  plan.weights = Operand(plain_md(d.weights, t, d.weights_tag), pd.weights_desc(), true);
  if (has_bias)
    plan.bias = Operand(plain_md(d.bias, t, dnnl::memory::format_tag::x), pd.bias_desc(), true);
  plan.dst = Operand(plain_md(d.dst, t, d.src_tag), pd.dst_desc(), false);
  log::debug("onednn conv forward {} {}: {}", dtype_name(t), p.str(), impl_name(pd));
  return plan;
}

PlanCache<ForwardPlan>& cache() {
  static PlanCache<ForwardPlan> c;
  return c;
}

}  // namespace

dnnl::convolution_forward::primitive_desc forward_pd(DType t, const ConvDims& d, bool bias) {
  using dnnl::algorithm;
  using dnnl::prop_kind;
  // convolution_direct, not auto: auto may pick Winograd, which changes the
  // numerics between shapes (and so between shards of one tensor).
  const auto desc = bias ? dnnl::convolution_forward::desc(
                               prop_kind::forward_training, algorithm::convolution_direct,
                               any_md(d.src, t), any_md(d.weights, t), any_md(d.bias, t),
                               any_md(d.dst, t), d.strides, d.dilates, d.padding_l, d.padding_r)
                         : dnnl::convolution_forward::desc(
                               prop_kind::forward_training, algorithm::convolution_direct,
                               any_md(d.src, t), any_md(d.weights, t), any_md(d.dst, t), d.strides,
                               d.dilates, d.padding_l, d.padding_r);
  return dnnl::convolution_forward::primitive_desc(desc, engine());
}

Tensor conv_forward(const Tensor& x, const Tensor& w, const Tensor& b, const ConvParams& p) {
  return conv_forward(TiledTensor::whole(x), w, b, p);
}

Tensor conv_forward(const TiledTensor& x, const Tensor& w, const Tensor& b, const ConvParams& p) {
  const DType t = x.dtype();
  const bool has_bias = b.defined();
  std::shared_ptr<const ForwardPlan> plan;
  try {
    plan = cache().get(cache_key("fwd", t, x.shape(), w.shape(), has_bias, p),
                       [&] { return make_plan(t, x.shape(), w.shape(), has_bias, p); });
  } catch (const dnnl::error& e) {
    rethrow_unsupported(e,
                        fmt::format("convolution forward {} input {} weight {} {}", dtype_name(t),
                                    shape_str(x.shape()), shape_str(w.shape()), p.str()));
  }
  Tensor y = Tensor::empty(conv_output_shape(x.shape(), w.shape(), p), t);
  ScratchScope scratch;
  auto& s = stream();
  dnnl::memory dst = plan->dst.output(y);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, plan->src.input(x)},
                                             {DNNL_ARG_WEIGHTS, plan->weights.input(w)},
                                             {DNNL_ARG_DST, dst}};
  if (has_bias) args.emplace(DNNL_ARG_BIAS, plan->bias.input(b));
  plan->prim.execute(s, args);
  plan->dst.finish_output(dst, y);
  s.wait();
  return y;
}

}  // namespace dtensor::onednn
