// cuDNN as the CUDA convolution (forward, backward-data, backward-weights) for
// f32, f64, bf16 and f16, registered for DeviceType::CUDA when the CUDA module loads.
// Algorithms come from cuDNN's heuristics once per (pass, dtype, shape) and are
// cached; workspaces come from the stream-ordered allocator.
#include <cstdlib>
#include <memory>

#include <fmt/format.h>

#include "backends/cuda/algo_cache.h"
#include "backends/cuda/channel.h"
#include "backends/cuda/cuda_context.h"
#include "backends/cuda/cuda_errors.h"
#include "backends/cuda/cudnn_descriptors.h"
#include "backends/cuda/cudnn_plan.h"
#include "backends/cuda/kernel_io.h"
#include "backends/cuda/module_registration.h"
#include "backends/cuda/reduce.h"
#include "dtensor/core/config.h"
#include "dtensor/core/errors.h"
#include "dtensor/core/logging.h"
#include "dtensor/ops/local_conv.h"

namespace dtensor::cuda_backend {
namespace {

struct Algo {
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  std::size_t workspace = 0;
};

std::size_t workspace_limit() {
  // DTENSOR_CUDNN_WORKSPACE_MB bounds the scratch memory an algorithm may ask for.
  static const std::size_t limit = [] {
    return static_cast<std::size_t>(config().cudnn_workspace_mb) << 20;
  }();
  return limit;
}

cudnnHandle_t handle_for(int device) {
  static PerDevice<cudnnHandle_t> handles;
  return handles.get(device, [](int d) {
    cudnnHandle_t h = nullptr;
    check_cudnn(cudnnCreate(&h), fmt::format("cudnnCreate on cuda:{}", d));
    check_cudnn(cudnnSetStream(h, stream_for(d)), "cudnnSetStream");
    return h;
  });
}

// The bias gradient (grad_out summed over every dim but 1) without cuDNN:
// cudnnConvolutionBackwardBias answers CUDNN_STATUS_NOT_SUPPORTED for bf16
// (cuDNN 9 on an H200). Sums per (n, c) row in f64, then over n, rounded
// once to the data's type, all on the device.
Tensor bias_grad_by_rows(const Tensor& grad_out) {
  const Tensor g = grad_out.contiguous();
  const std::int64_t n = g.size(0), c = g.size(1);
  if (g.numel() == 0) return Tensor::zeros({c}, g.dtype(), g.device());
  const int dev = g.device().index;
  const Tensor rows = Tensor::empty({n, c}, DType::F64, g.device());
  check_cuda(launch_row_sums(elem_type_of(g.dtype()), g.data_ptr(), n * c, g.numel() / (n * c),
                             static_cast<double*>(rows.data_ptr()), stream_for(dev)),
             "convolution bias gradient (row sums)");
  const Tensor sums = Tensor::empty({c}, DType::F64, g.device());
  check_cuda(launch_reduce_fold(ReduceFold::Sum, elem_type_of(DType::F64), rows.data_ptr(),
                                sums.data_ptr(),
                                make_reduce_layout(rows.shape(), {true, false}, "conv bias"), 1.0,
                                stream_for(dev)),
             "convolution bias gradient (sum over the batch)");
  return sums.to(g.dtype());
}

// First algorithm the heuristics rank that succeeded, fits the workspace
// limit, and (for f32/f64) keeps the requested math type.
template <typename Perf>
Algo pick(const Perf* perf, int n, const CudnnTypes& t, const char* pass) {
  for (int i = 0; i < n; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > workspace_limit()) continue;
    if (t.math != CUDNN_TENSOR_OP_MATH && perf[i].mathType != t.math) continue;
    return Algo{static_cast<int>(perf[i].algo), perf[i].mathType, perf[i].memory};
  }
  throw NotSupported("cudnn", fmt::format("{}: no algorithm within the {} MiB workspace limit "
                                          "(DTENSOR_CUDNN_WORKSPACE_MB)",
                                          pass, workspace_limit() >> 20));
}

// alpha = 1, beta = 0 (or 1 to accumulate) in the type cuDNN expects: double
// for f64 data, float otherwise.
struct Scale {
  explicit Scale(DType t) : dbl(t == DType::F64) {}
  const void* one() const { return dbl ? static_cast<const void*>(&d1) : &f1; }
  const void* zero() const { return dbl ? static_cast<const void*>(&d0) : &f0; }
  bool dbl;
  float f1 = 1.f, f0 = 0.f;
  double d1 = 1.0, d0 = 0.0;
};

Shape bias_shape(const Shape& y) {
  Shape b(y.size(), 1);
  b[1] = y[1];
  return b;
}

// Our shape arithmetic and cuDNN's must agree before any memory is touched.
void check_plan(const CudnnConvPlan& plan, const TensorDesc& xd, const FilterDesc& wd,
                const ConvDesc& cd) {
  const Shape y = cudnn_output_shape(xd, wd, cd, static_cast<int>(plan.y.size()));
  if (y != plan.y)
    throw Error("cudnn", fmt::format("cuDNN computes output {} where the plan has {}", shape_str(y),
                                     shape_str(plan.y)));
}

// What the three passes set up alike: the plan, the device (made current for
// the pass), cuDNN's types and descriptors (checked against the plan), the
// device's handle and the alpha/beta scalars.
struct Pass {
  Pass(const Shape& input, const Shape& weight, const ConvParams& p, DType dtype, Device dev)
      : plan(plan_cudnn_conv(input, weight, p)),
        device(dev),
        guard(dev.index),
        types(cudnn_types(dtype)),
        x(plan.x, types.data),
        y(plan.y, types.data),
        w(plan.w, types.data),
        conv(plan, types),
        handle(handle_for(dev.index)),
        scale(dtype) {
    check_plan(plan, x, w, conv);
  }
  const CudnnConvPlan plan;
  const Device device;
  const DeviceGuard guard;
  const CudnnTypes types;
  const TensorDesc x, y;
  const FilterDesc w;
  ConvDesc conv;  // its math type follows the chosen algorithm
  const cudnnHandle_t handle;
  const Scale scale;
};

// The view of a pre-padded tensor that holds the unpadded one (`shape`).
Tensor unpadded_part(Tensor padded, const CudnnConvPlan& plan, const Shape& shape) {
  for (std::size_t i = 0; i < plan.prepad.size(); ++i)
    padded = padded.narrow(static_cast<std::int64_t>(2 + i), plan.prepad[i].first, shape[2 + i]);
  return padded;
}

// x with the zeros cuDNN's symmetric padding cannot express.
Tensor prepadded(const Tensor& x, const CudnnConvPlan& plan) {
  if (!plan.needs_prepad()) return x;
  Tensor xp = Tensor::zeros(plan.padded_input, x.dtype(), x.device());
  unpadded_part(xp, plan, x.shape()).copy_(x);
  return xp;
}

std::shared_ptr<Storage> workspace(std::size_t bytes, Device device) {
  return bytes == 0 ? nullptr : Storage::allocate(bytes, device);
}

// The three passes on whole contiguous tensors (the dense case), with the
// algorithms cuDNN picked cached per shape.
class CudnnConv {
 public:
  Tensor forward(const Tensor& x, const Tensor& w, const Tensor& b, const ConvParams& p) const {
    Pass ps(x.shape(), w.shape(), p, x.dtype(), x.device());
    const Tensor xin = prepadded(x, ps.plan);
    Tensor y = Tensor::empty(conv_output_shape(x.shape(), w.shape(), p), x.dtype(), x.device());
    const Algo a = fwd_.get(ps.plan.key(ConvPass::Forward, x.dtype(), ps.device.index), [&] {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      int n = 0;
      check_cudnn(cudnnGetConvolutionForwardAlgorithm_v7(
                      ps.handle, ps.x.get(), ps.w.get(), ps.conv.get(), ps.y.get(),
                      CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf),
                  "forward algorithm");
      return pick(perf, n, ps.types, "forward");
    });
    ps.conv.set_math(a.math);
    auto ws = workspace(a.workspace, x.device());
    check_cudnn(cudnnConvolutionForward(ps.handle, ps.scale.one(), ps.x.get(), xin.data_ptr(),
                                        ps.w.get(), w.data_ptr(), ps.conv.get(),
                                        static_cast<cudnnConvolutionFwdAlgo_t>(a.algo),
                                        ws ? ws->data() : nullptr, a.workspace, ps.scale.zero(),
                                        ps.y.get(), y.data_ptr()),
                "cudnnConvolutionForward");
    if (b.defined()) {
      TensorDesc bd(bias_shape(ps.plan.y), ps.types.data);
      check_cudnn(cudnnAddTensor(ps.handle, ps.scale.one(), bd.get(), b.data_ptr(), ps.scale.one(),
                                 ps.y.get(), y.data_ptr()),
                  "cudnnAddTensor (bias)");
    }
    return y;
  }

  Tensor backward_data(const Tensor& grad_out, const Tensor& w, const Shape& input_shape,
                       const ConvParams& p) const {
    Pass ps(input_shape, w.shape(), p, grad_out.dtype(), grad_out.device());
    Tensor gxp = Tensor::empty(ps.plan.padded_input, grad_out.dtype(), grad_out.device());
    const Algo a =
        bwd_data_.get(ps.plan.key(ConvPass::BackwardData, grad_out.dtype(), ps.device.index), [&] {
          cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
          int n = 0;
          check_cudnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(
                          ps.handle, ps.w.get(), ps.y.get(), ps.conv.get(), ps.x.get(),
                          CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf),
                      "backward-data algorithm");
          return pick(perf, n, ps.types, "backward_data");
        });
    ps.conv.set_math(a.math);
    auto ws = workspace(a.workspace, grad_out.device());
    check_cudnn(cudnnConvolutionBackwardData(ps.handle, ps.scale.one(), ps.w.get(), w.data_ptr(),
                                             ps.y.get(), grad_out.data_ptr(), ps.conv.get(),
                                             static_cast<cudnnConvolutionBwdDataAlgo_t>(a.algo),
                                             ws ? ws->data() : nullptr, a.workspace,
                                             ps.scale.zero(), ps.x.get(), gxp.data_ptr()),
                "cudnnConvolutionBackwardData");
    if (!ps.plan.needs_prepad()) return gxp;
    // The gradient of the zeros we added is dropped: only the input's part returns.
    return unpadded_part(gxp, ps.plan, input_shape).clone();
  }

  ConvWeightGrads backward_weights(const Tensor& grad_out, const Tensor& x,
                                   const Shape& weight_shape, const ConvParams& p,
                                   bool want_bias) const {
    Pass ps(x.shape(), weight_shape, p, x.dtype(), x.device());
    const Tensor xin = prepadded(x, ps.plan);
    ConvWeightGrads g;
    g.grad_weight = Tensor::empty(weight_shape, x.dtype(), x.device());
    const Algo a =
        bwd_filter_.get(ps.plan.key(ConvPass::BackwardWeights, x.dtype(), ps.device.index), [&] {
          cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
          int n = 0;
          check_cudnn(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                          ps.handle, ps.x.get(), ps.y.get(), ps.conv.get(), ps.w.get(),
                          CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf),
                      "backward-weights algorithm");
          return pick(perf, n, ps.types, "backward_weights");
        });
    ps.conv.set_math(a.math);
    auto ws = workspace(a.workspace, x.device());
    check_cudnn(cudnnConvolutionBackwardFilter(
                    ps.handle, ps.scale.one(), ps.x.get(), xin.data_ptr(), ps.y.get(),
                    grad_out.data_ptr(), ps.conv.get(),
                    static_cast<cudnnConvolutionBwdFilterAlgo_t>(a.algo), ws ? ws->data() : nullptr,
                    a.workspace, ps.scale.zero(), ps.w.get(), g.grad_weight.data_ptr()),
                "cudnnConvolutionBackwardFilter");
    if (want_bias && x.dtype() == DType::BF16) {
      g.grad_bias = bias_grad_by_rows(grad_out);
    } else if (want_bias) {
      g.grad_bias = Tensor::empty({weight_shape[0]}, x.dtype(), x.device());
      TensorDesc bd(bias_shape(ps.plan.y), ps.types.data);
      check_cudnn(
          cudnnConvolutionBackwardBias(ps.handle, ps.scale.one(), ps.y.get(), grad_out.data_ptr(),
                                       ps.scale.zero(), bd.get(), g.grad_bias.data_ptr()),
          "cudnnConvolutionBackwardBias");
    }
    return g;
  }

 private:
  mutable AlgoCache<Algo> fwd_, bwd_data_, bwd_filter_;
};

}  // namespace

void register_cudnn_conv_kernels() {
  const auto conv = std::make_shared<CudnnConv>();
  for (DType t : {DType::F32, DType::F64, DType::BF16, DType::F16})
    kernels::register_dense_conv_kernels(
        DeviceType::CUDA, t,
        {[conv](const Tensor& x, const Tensor& w, const Tensor& b, const ConvParams& p) {
           return conv->forward(x, w, b, p);
         },
         [conv](const Tensor& grad_out, const Tensor& w, const Shape& input_shape,
                const ConvParams& p) { return conv->backward_data(grad_out, w, input_shape, p); },
         [conv](const Tensor& grad_out, const Tensor& x, const Shape& weight_shape,
                const ConvParams& p, bool want_bias) {
           return conv->backward_weights(grad_out, x, weight_shape, p, want_bias);
         }});
}

}  // namespace dtensor::cuda_backend
