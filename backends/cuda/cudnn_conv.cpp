// cuDNN as the CUDA convolution (forward, backward-data, backward-weights) for
// f32, f64, bf16 and f16, registered for DeviceType::CUDA when the library loads.
// Algorithms come from cuDNN's heuristics once per (pass, dtype, shape) and are
// cached; workspaces come from the stream-ordered allocator.
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

#include <fmt/format.h>

#include "backends/cuda/algo_cache.h"
#include "backends/cuda/cuda_context.h"
#include "backends/cuda/cuda_errors.h"
#include "backends/cuda/cudnn_descriptors.h"
#include "backends/cuda/cudnn_plan.h"
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
    const char* v = std::getenv("DTENSOR_CUDNN_WORKSPACE_MB");
    const long mb = v ? std::strtol(v, nullptr, 10) : 1024;
    return static_cast<std::size_t>(mb > 0 ? mb : 1024) << 20;
  }();
  return limit;
}

cudnnHandle_t handle_for(int device) {
  static std::mutex mu;
  static std::map<int, cudnnHandle_t> handles;
  std::lock_guard lock(mu);
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  cudnnHandle_t h = nullptr;
  check_cudnn(cudnnCreate(&h), fmt::format("cudnnCreate on cuda:{}", device));
  check_cudnn(cudnnSetStream(h, stream_for(device)), "cudnnSetStream");
  handles.emplace(device, h);  // kept for the process's lifetime
  return h;
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

class CudnnConvKernels final : public LocalConvKernels {
 public:
  std::string name() const override { return "cudnn"; }

 protected:
  Tensor forward_impl(const Tensor& x, const Tensor& w, const Tensor& b,
                      const ConvParams& p) const override {
    const CudnnConvPlan plan = plan_cudnn_conv(x.shape(), w.shape(), p);
    const int dev = x.device().index;
    DeviceGuard guard(dev);
    const CudnnTypes t = cudnn_types(x.dtype());
    const Tensor xin = prepadded(x, plan);
    const Shape out = conv_output_shape(x.shape(), w.shape(), p);
    Tensor y = Tensor::empty(out, x.dtype(), x.device());
    TensorDesc xd(plan.x, t.data), yd(plan.y, t.data);
    FilterDesc wd(plan.w, t.data);
    ConvDesc cd(plan, t);
    check_plan(plan, xd, wd, cd);
    cudnnHandle_t h = handle_for(dev);
    const Algo a = fwd_.get(plan.key(ConvPass::Forward, x.dtype(), dev), [&] {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      int n = 0;
      check_cudnn(
          cudnnGetConvolutionForwardAlgorithm_v7(h, xd.get(), wd.get(), cd.get(), yd.get(),
                                                 CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf),
          "forward algorithm");
      return pick(perf, n, t, "forward");
    });
    cd.set_math(a.math);
    auto ws = workspace(a.workspace, x.device());
    const Scale s(x.dtype());
    check_cudnn(cudnnConvolutionForward(
                    h, s.one(), xd.get(), xin.data_ptr(), wd.get(), w.data_ptr(), cd.get(),
                    static_cast<cudnnConvolutionFwdAlgo_t>(a.algo), ws ? ws->data() : nullptr,
                    a.workspace, s.zero(), yd.get(), y.data_ptr()),
                "cudnnConvolutionForward");
    if (b.defined()) {
      TensorDesc bd(bias_shape(plan.y), t.data);
      check_cudnn(
          cudnnAddTensor(h, s.one(), bd.get(), b.data_ptr(), s.one(), yd.get(), y.data_ptr()),
          "cudnnAddTensor (bias)");
    }
    return y;
  }

  Tensor backward_data_impl(const Tensor& grad_out, const Tensor& w, const Shape& input_shape,
                            const ConvParams& p) const override {
    const CudnnConvPlan plan = plan_cudnn_conv(input_shape, w.shape(), p);
    const int dev = grad_out.device().index;
    DeviceGuard guard(dev);
    const CudnnTypes t = cudnn_types(grad_out.dtype());
    Tensor gxp = Tensor::empty(plan.padded_input, grad_out.dtype(), grad_out.device());
    TensorDesc xd(plan.x, t.data), yd(plan.y, t.data);
    FilterDesc wd(plan.w, t.data);
    ConvDesc cd(plan, t);
    check_plan(plan, xd, wd, cd);
    cudnnHandle_t h = handle_for(dev);
    const Algo a = bwd_data_.get(plan.key(ConvPass::BackwardData, grad_out.dtype(), dev), [&] {
      cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      int n = 0;
      check_cudnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(
                      h, wd.get(), yd.get(), cd.get(), xd.get(),
                      CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf),
                  "backward-data algorithm");
      return pick(perf, n, t, "backward_data");
    });
    cd.set_math(a.math);
    auto ws = workspace(a.workspace, grad_out.device());
    const Scale s(grad_out.dtype());
    check_cudnn(cudnnConvolutionBackwardData(
                    h, s.one(), wd.get(), w.data_ptr(), yd.get(), grad_out.data_ptr(), cd.get(),
                    static_cast<cudnnConvolutionBwdDataAlgo_t>(a.algo), ws ? ws->data() : nullptr,
                    a.workspace, s.zero(), xd.get(), gxp.data_ptr()),
                "cudnnConvolutionBackwardData");
    if (!plan.needs_prepad()) return gxp;
    // The gradient of the zeros we added is dropped: only the input's part returns.
    Tensor v = gxp;
    for (std::size_t i = 0; i < plan.prepad.size(); ++i)
      v = v.narrow(static_cast<std::int64_t>(2 + i), plan.prepad[i].first, input_shape[2 + i]);
    return v.clone();
  }

  ConvWeightGrads backward_weights_impl(const Tensor& grad_out, const Tensor& x,
                                        const Shape& weight_shape, const ConvParams& p,
                                        bool want_bias) const override {
    const CudnnConvPlan plan = plan_cudnn_conv(x.shape(), weight_shape, p);
    const int dev = x.device().index;
    DeviceGuard guard(dev);
    const CudnnTypes t = cudnn_types(x.dtype());
    const Tensor xin = prepadded(x, plan);
    ConvWeightGrads g;
    g.grad_weight = Tensor::empty(weight_shape, x.dtype(), x.device());
    TensorDesc xd(plan.x, t.data), yd(plan.y, t.data);
    FilterDesc wd(plan.w, t.data);
    ConvDesc cd(plan, t);
    check_plan(plan, xd, wd, cd);
    cudnnHandle_t h = handle_for(dev);
    const Algo a = bwd_filter_.get(plan.key(ConvPass::BackwardWeights, x.dtype(), dev), [&] {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      int n = 0;
      check_cudnn(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                      h, xd.get(), yd.get(), cd.get(), wd.get(),
                      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf),
                  "backward-weights algorithm");
      return pick(perf, n, t, "backward_weights");
    });
    cd.set_math(a.math);
    auto ws = workspace(a.workspace, x.device());
    const Scale s(x.dtype());
    check_cudnn(cudnnConvolutionBackwardFilter(
                    h, s.one(), xd.get(), xin.data_ptr(), yd.get(), grad_out.data_ptr(), cd.get(),
                    static_cast<cudnnConvolutionBwdFilterAlgo_t>(a.algo), ws ? ws->data() : nullptr,
                    a.workspace, s.zero(), wd.get(), g.grad_weight.data_ptr()),
                "cudnnConvolutionBackwardFilter");
    if (want_bias) {
      g.grad_bias = Tensor::empty({weight_shape[0]}, x.dtype(), x.device());
      TensorDesc bd(bias_shape(plan.y), t.data);
      check_cudnn(cudnnConvolutionBackwardBias(h, s.one(), yd.get(), grad_out.data_ptr(), s.zero(),
                                               bd.get(), g.grad_bias.data_ptr()),
                  "cudnnConvolutionBackwardBias");
    }
    return g;
  }

 private:
  // x with the zeros cuDNN's symmetric padding cannot express.
  static Tensor prepadded(const Tensor& x, const CudnnConvPlan& plan) {
    if (!plan.needs_prepad()) return x;
    Tensor xp = Tensor::zeros(plan.padded_input, x.dtype(), x.device());
    Tensor v = xp;
    for (std::size_t i = 0; i < plan.prepad.size(); ++i)
      v = v.narrow(static_cast<std::int64_t>(2 + i), plan.prepad[i].first, x.size(2 + i));
    v.copy_(x);
    return xp;
  }

  static std::shared_ptr<Storage> workspace(std::size_t bytes, Device device) {
    return bytes == 0 ? nullptr : Storage::allocate(bytes, device);
  }

  // Our shape arithmetic and cuDNN's must agree before any memory is touched.
  static void check_plan(const CudnnConvPlan& plan, const TensorDesc& xd, const FilterDesc& wd,
                         const ConvDesc& cd) {
    const Shape y = cudnn_output_shape(xd, wd, cd, static_cast<int>(plan.y.size()));
    if (y != plan.y)
      throw Error("cudnn", fmt::format("cuDNN computes output {} where the plan has {}",
                                       shape_str(y), shape_str(plan.y)));
  }

  mutable AlgoCache<Algo> fwd_, bwd_data_, bwd_filter_;
};

const bool registered = [] {
  auto k = std::make_shared<CudnnConvKernels>();
  register_local_conv_kernels(DeviceType::CUDA, DType::F32, k);
  register_local_conv_kernels(DeviceType::CUDA, DType::F64, k);
  register_local_conv_kernels(DeviceType::CUDA, DType::BF16, k);
  register_local_conv_kernels(DeviceType::CUDA, DType::F16, k);
  return true;
}();

}  // namespace
}  // namespace dtensor::cuda_backend
