#include <fmt/format.h>

#include "backends/onednn/onednn_conv.h"
#include "backends/onednn/row_bands.h"
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

namespace {

std::shared_ptr<const BackwardDataPlan> get_plan(DType t, const Shape& in, const Shape& w,
                                                 const ConvParams& p) {
  try {
    return cache().get(cache_key("bwd_data", t, in, w, false, p),
                       [&] { return make_plan(t, in, w, p); });
  } catch (const dnnl::error& e) {
    rethrow_unsupported(e, fmt::format("convolution backward_data {} input {} weight {} {}",
                                       dtype_name(t), shape_str(in), shape_str(w), p.str()));
  }
}

void zero_rows(const TiledTensor& gx, std::int64_t lo, std::int64_t hi) {
  for (auto& tile : tiles_in_rows(gx, lo, hi, 0))
    tile.data.zero_();
}

// Band by band over output rows. Neighbouring bands read overlapping input
// rows, so their gradients overlap too: rows an earlier band wrote are added
// to (a reorder with a sum post-op), new rows are written, and rows no band
// reads (stride gaps, rows past the last window) are zeroed.
void backward_data_banded(const Tensor& grad_out, const Tensor& w, const TiledTensor& gx,
                          const std::vector<RowBand>& bands,
                          const std::vector<std::shared_ptr<const BackwardDataPlan>>& plans) {
  auto& s = stream();
  ScratchScope scratch;
  ReusedInput weights(w);
  std::vector<dnnl::memory::desc> dst_descs, src_descs;
  for (const auto& plan : plans) {
    dst_descs.push_back(plan->diff_dst.primitive_desc());
    src_descs.push_back(plan->diff_src.primitive_desc());
  }
  const BandBuffer dst_buf(dst_descs), src_buf(src_descs);
  std::int64_t written = 0;  // rows [0, written) of gx hold their value so far
  for (std::size_t i = 0; i < bands.size(); ++i) {
    const RowBand& band = bands[i];
    const BackwardDataPlan& plan = *plans[i];
    const dnnl::memory wmem = weights.get(plan.weights);
    dnnl::memory diff_dst = dst_buf.view(plan.diff_dst.primitive_desc());
    const auto rows = rows_of(grad_out, band.out_lo, band.out_hi);
    plan.diff_dst.reorder_region(rows.data, rows.offset, diff_dst, true);
    dnnl::memory diff_src = src_buf.view(plan.diff_src.primitive_desc());
    plan.prim.execute(
        s,
        {{DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_WEIGHTS, wmem}, {DNNL_ARG_DIFF_SRC, diff_src}});
    if (band.in_lo > written) zero_rows(gx, written, band.in_lo);
    // Bands read monotonically further rows, so written <= band.in_hi.
    const std::int64_t fresh = std::min(std::max(band.in_lo, written), band.in_hi);
    for (const auto& tile : tiles_in_rows(gx, band.in_lo, fresh, band.in_lo))
      plan.diff_src.reorder_region(tile.data, tile.offset, diff_src, false, /*accumulate=*/true);
    for (const auto& tile : tiles_in_rows(gx, fresh, band.in_hi, band.in_lo))
      plan.diff_src.reorder_region(tile.data, tile.offset, diff_src, false);
    written = std::max(written, band.in_hi);
    s.wait();
  }
  if (written < gx.shape()[2]) zero_rows(gx, written, gx.shape()[2]);
}

}  // namespace

void conv_backward_data(const Tensor& grad_out, const Tensor& w, const TiledTensor& gx,
                        const ConvParams& p) {
  const DType t = grad_out.dtype();
  const Shape& input_shape = gx.shape();
  const auto bands = plan_bands(t, input_shape, w.shape(), grad_out.shape(), p);
  if (!bands.empty()) {
    const auto plans = plans_for_bands(
        bands, input_shape, p,
        [&](const Shape& in, const ConvParams& q) { return get_plan(t, in, w.shape(), q); },
        [](const BackwardDataPlan& b) { return b.diff_dst.tileable() && b.diff_src.tileable(); });
    if (!plans.empty()) return backward_data_banded(grad_out, w, gx, bands, plans);
  }
  const auto plan = get_plan(t, input_shape, w.shape(), p);
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
