#include <fmt/format.h>

#include "backends/onednn/onednn_conv.h"
#include "backends/onednn/row_bands.h"
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

namespace {

std::shared_ptr<const ForwardPlan> get_plan(DType t, const Shape& in, const Shape& w, bool has_bias,
                                            const ConvParams& p) {
  try {
    return cache().get(cache_key("fwd", t, t, in, w, has_bias, p),
                       [&] { return make_plan(t, in, w, has_bias, p); });
  } catch (const dnnl::error& e) {
    rethrow_unsupported(e, fmt::format("convolution forward {} input {} weight {} {}",
                                       dtype_name(t), shape_str(in), shape_str(w), p.str()));
  }
}

// The bands' plans when every band can read its tiles and write its rows in
// place; empty otherwise (the convolution then runs whole).
// Band by band: the band's input rows reordered from the tiles into a blocked
// buffer, the band's convolution, its output rows reordered into y. One
// buffer per operand serves every band.
void forward_banded(const TiledTensor& x, const Tensor& w, const Tensor& b, Tensor& y,
                    const std::vector<RowBand>& bands,
                    const std::vector<std::shared_ptr<const ForwardPlan>>& plans) {
  auto& s = stream();
  ScratchScope scratch;
  ReusedInput weights(w), bias(b);
  std::vector<dnnl::memory::desc> src_descs, dst_descs;
  for (const auto& plan : plans) {
    src_descs.push_back(plan->src.primitive_desc());
    dst_descs.push_back(plan->dst.primitive_desc());
  }
  const BandBuffer src_buf(src_descs), dst_buf(dst_descs);
  for (std::size_t i = 0; i < bands.size(); ++i) {
    const RowBand& band = bands[i];
    const ForwardPlan& plan = *plans[i];
    ExecArgs args;
    args.add(DNNL_ARG_WEIGHTS, weights.get(plan.weights));
    if (b.defined()) args.add(DNNL_ARG_BIAS, bias.get(plan.bias));
    dnnl::memory src = src_buf.view(plan.src.primitive_desc());
    for (const auto& tile : tiles_in_rows(x, band.in_lo, band.in_hi, band.in_lo))
      plan.src.reorder_region(tile.data, tile.offset, src, true);
    dnnl::memory dst = dst_buf.view(plan.dst.primitive_desc());
    args.add(DNNL_ARG_SRC, src).add(DNNL_ARG_DST, dst).run(plan.prim);
    const auto rows = rows_of(y, band.out_lo, band.out_hi);
    plan.dst.reorder_region(rows.data, rows.offset, dst, false);
    s.wait();
  }
}

}  // namespace

void conv_forward_into(const TiledTensor& x, const Tensor& w, const Tensor& b, const ConvParams& p,
                       const Tensor& out) {
  const DType t = x.dtype();
  const bool has_bias = b.defined();
  Tensor y = out;
  const auto bands = plan_bands(t, x.shape(), w.shape(), y.shape(), p);
  if (!bands.empty()) {
    const auto plans = plans_for_bands(
        bands, x.shape(), p,
        [&](const Shape& in, const ConvParams& q) {
          return get_plan(t, in, w.shape(), has_bias, q);
        },
        [](const ForwardPlan& f) { return f.src.tileable() && f.dst.tileable(); });
    if (!plans.empty()) {
      forward_banded(x, w, b, y, bands, plans);  // writes rows of any strided y in place
      return;
    }
  }
  const auto plan = get_plan(t, x.shape(), w.shape(), has_bias, p);
  // The whole primitive writes a plain contiguous tensor; a strided view gets a copy.
  Tensor target = y.is_contiguous() ? y : Tensor::empty(y.shape(), t);
  ScratchScope scratch;
  auto& s = stream();
  dnnl::memory dst = plan->dst.output(target);
  ExecArgs args;
  args.add(DNNL_ARG_SRC, plan->src.input(x))
      .add(DNNL_ARG_WEIGHTS, plan->weights.input(w))
      .add(DNNL_ARG_DST, dst);
  if (has_bias) args.add(DNNL_ARG_BIAS, plan->bias.input(b));
  args.run(plan->prim);
  plan->dst.finish_output(dst, target);
  s.wait();
  if (target.data_ptr() != y.data_ptr()) y.copy_(target);
}

}  // namespace dtensor::onednn
