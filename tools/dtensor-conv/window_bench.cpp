#include "tools/dtensor-conv/window_bench.h"

#include <functional>
#include <optional>

#include "dtensor/ops/convolution.h"
#include "dtensor/ops/local_conv.h"
#include "tools/cli/timing.h"
#include "tools/dtensor-conv/local_window.h"

namespace dtensor::conv_cli {

op_cli::BenchTimes run_window_bench(const op_cli::Options& o, const DeviceMesh& mesh,
                                    const op_cli::Operands& ops, const cli::Seeds& seeds) {
  op_cli::BenchTimes r;
  const ConvParams params = o.conv_params();
  // The local kernel alone, on this rank's window with its local padding.
  const LocalWindow win = local_window(o.input, o.weight_shape(), params, mesh.shape(),
                                       o.placements, *mesh.get_coordinate());
  const auto kernels = local_conv_kernels(mesh.device(), o.dtype);
  const DTensor& weight = *ops.weight;
  const Tensor& w = weight.to_local();
  const Tensor b = ops.bias ? ops.bias->to_local() : Tensor();
  const Tensor x =
      win.computes ? Tensor::rand(win.input, o.dtype, seeds.input).to(mesh.device()) : Tensor();

  std::optional<DTensor> y;
  Tensor yl;
  const auto fwd =
      cli::interleaved_medians(o.device, o.iters, o.warmup,
                               {[&] { y = convolution(ops.input, weight, ops.bias, params); },
                                [&] {
                                  if (win.computes) yl = kernels->forward(x, w, b, win.params);
                                }});
  r.fwd_ms = fwd[0];
  r.local_fwd_ms = fwd[1];
  if (o.backward) {
    const DTensor gy = op_cli::make_grad_output(o, *y, seeds);
    const ConvOutputMask mask{true, true, o.bias};
    const Tensor gyl = win.computes
                           ? Tensor::rand(yl.shape(), o.dtype, seeds.grad_output).to(mesh.device())
                           : Tensor();
    const auto bwd = cli::interleaved_medians(
        o.device, o.iters, o.warmup,
        {[&] { convolution_backward(gy, ops.input, weight, params, mask); },
         [&] {
           if (!win.computes) return;
           kernels->backward_data(gyl, w, x.shape(), win.params);
           kernels->backward_weights(gyl, x, w.shape(), win.params, o.bias);
         }});
    r.bwd_ms = bwd[0];
    r.local_bwd_ms = bwd[1];
  }
  return r;
}

}  // namespace dtensor::conv_cli
