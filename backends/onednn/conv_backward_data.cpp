#include <algorithm>

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

// `acc`: the dtype the input gradient comes out in (f32 for bf16 bands, whose
// overlapping rows are added in f32 and rounded once).
BackwardDataPlan make_plan(DType t, const Shape& in, const Shape& w, const ConvParams& p,
                           DType acc) {
  const ConvDims d(in, w, p);
  const dnnl::convolution_backward_data::desc desc(
      dnnl::algorithm::convolution_direct, any_md(d.src, acc), any_md(d.weights, t),
      any_md(d.dst, t), d.strides, d.dilates, d.padding_l, d.padding_r);
  const dnnl::convolution_backward_data::primitive_desc pd(desc, engine(), forward_pd(t, d, false));
  BackwardDataPlan plan;
  plan.prim = dnnl::convolution_backward_data(pd);
  plan.diff_dst = Operand(plain_md(d.dst, t, d.src_tag), pd.diff_dst_desc(), true);
  plan.weights = Operand(plain_md(d.weights, t, d.weights_tag), pd.weights_desc(), true);
  plan.diff_src = Operand(plain_md(d.src, acc, d.src_tag), pd.diff_src_desc(), false);
  log::debug("onednn conv backward_data {} {}: {}", dtype_name(t), p.str(), impl_name(pd));
  return plan;
}

PlanCache<BackwardDataPlan>& cache() {
  static PlanCache<BackwardDataPlan> c;
  return c;
}

}  // namespace

namespace {

std::shared_ptr<const BackwardDataPlan> get_plan(DType t, const Shape& in, const Shape& w,
                                                 const ConvParams& p, DType acc) {
  try {
    return cache().get(cache_key("bwd_data", t, acc, in, w, false, p),
                       [&] { return make_plan(t, in, w, p, acc); });
  } catch (const dnnl::error& e) {
    rethrow_unsupported(e, fmt::format("convolution backward_data {} input {} weight {} {}",
                                       dtype_name(t), shape_str(in), shape_str(w), p.str()));
  }
}

// Rows [lo, hi) of tensor dim 2 (the band dim) of `gx`.
TiledTensor tiled_rows(const TiledTensor& gx, std::int64_t lo, std::int64_t hi) {
  return gx.narrow(2, lo, hi - lo);
}

// Band by band over output rows. Neighbouring bands read overlapping input
// rows, so their gradients overlap too. Each band's gradient comes out in f32
// (for bf16 data too); the rows the next band also reads wait in an f32
// carry, to which that band adds its part before they are written, so every
// row is rounded to the tensor's dtype once, as in an unbanded pass. Rows no
// band reads (stride gaps, rows past the last window) are zeroed. Needs every
// row read by at most two bands (conv_backward_data checks).
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
  const Shape& shape = gx.shape();
  std::int64_t written = 0;  // rows [0, written) of gx are final or in the carry
  Tensor carry;              // f32, rows [carry_lo, written) of the previous band
  std::int64_t carry_lo = 0;
  for (std::size_t i = 0; i < bands.size(); ++i) {
    const RowBand& band = bands[i];
    const BackwardDataPlan& plan = *plans[i];
    const dnnl::memory wmem = weights.get(plan.weights);
    dnnl::memory diff_dst = dst_buf.view(plan.diff_dst.primitive_desc());
    const auto out_rows = rows_of(grad_out, band.out_lo, band.out_hi);
    plan.diff_dst.reorder_region(out_rows.data, out_rows.offset, diff_dst, true);
    dnnl::memory diff_src = src_buf.view(plan.diff_src.primitive_desc());
    ExecArgs()
        .add(DNNL_ARG_DIFF_DST, diff_dst)
        .add(DNNL_ARG_WEIGHTS, wmem)
        .add(DNNL_ARG_DIFF_SRC, diff_src)
        .run(plan.prim);
    if (band.in_lo > written) tiled_rows(gx, written, band.in_lo).zero_();
    // Rows shared with the previous band: its part (the carry) plus ours.
    const std::int64_t shared_hi = carry.defined() ? std::min(written, band.in_hi) : band.in_lo;
    if (shared_hi > band.in_lo) {
      Tensor sum = Tensor::empty(with_rows(shape, shared_hi - band.in_lo), DType::F32);
      plan.diff_src.reorder_region(sum, Shape(shape.size(), 0), diff_src, false);
      sum.add_(carry.narrow(2, band.in_lo - carry_lo, shared_hi - band.in_lo));
      tiled_rows(gx, band.in_lo, shared_hi).scatter(sum);  // rounded to gx's dtype here
    }
    // Rows the next band reads too wait in the carry; the rest are final.
    const std::int64_t next_lo =
        i + 1 < bands.size() ? std::clamp(bands[i + 1].in_lo, shared_hi, band.in_hi) : band.in_hi;
    for (const auto& tile : tiles_in_rows(gx, std::max(shared_hi, band.in_lo), next_lo, band.in_lo))
      plan.diff_src.reorder_region(tile.data, tile.offset, diff_src, false);
    carry = Tensor();
    if (next_lo < band.in_hi) {
      carry = Tensor::empty(with_rows(shape, band.in_hi - next_lo), DType::F32);
      Shape at(shape.size(), 0);
      at[2] = next_lo - band.in_lo;
      plan.diff_src.reorder_region(carry, at, diff_src, false);
      carry_lo = next_lo;
    }
    written = std::max(written, band.in_hi);
    s.wait();
  }
  if (written < shape[2]) tiled_rows(gx, written, shape[2]).zero_();
}

// Whether every input row is read by at most two bands (the carry holds one
// band's part).
bool at_most_two_bands_per_row(const std::vector<RowBand>& bands) {
  for (std::size_t i = 0; i + 2 < bands.size(); ++i)
    if (bands[i + 2].in_lo < bands[i].in_hi) return false;
  return true;
}

}  // namespace

void conv_backward_data(const Tensor& grad_out, const Tensor& w, const TiledTensor& gx,
                        const ConvParams& p) {
  const DType t = grad_out.dtype();
  const Shape& input_shape = gx.shape();
  const auto bands = plan_bands(t, input_shape, w.shape(), grad_out.shape(), p);
  if (!bands.empty() && at_most_two_bands_per_row(bands)) {
    const auto plans = plans_for_bands(
        bands, input_shape, p,
        [&](const Shape& in, const ConvParams& q) {
          return get_plan(t, in, w.shape(), q, DType::F32);
        },
        [](const BackwardDataPlan& b) { return b.diff_dst.tileable() && b.diff_src.tileable(); });
    if (!plans.empty()) return backward_data_banded(grad_out, w, gx, bands, plans);
  }
  const auto plan = get_plan(t, input_shape, w.shape(), p, t);
  ScratchScope scratch;
  auto& s = stream();
  Tensor temp;
  dnnl::memory diff_src = plan->diff_src.output(gx, temp);
  ExecArgs()
      .add(DNNL_ARG_DIFF_DST, plan->diff_dst.input(grad_out))
      .add(DNNL_ARG_WEIGHTS, plan->weights.input(w))
      .add(DNNL_ARG_DIFF_SRC, diff_src)
      .run(plan->prim);
  plan->diff_src.finish_output(diff_src, gx, temp);
  s.wait();
}

}  // namespace dtensor::onednn
