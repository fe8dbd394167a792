// The element-wise functions of one tensor (exp ... pow) and the activations
// (leaky_relu, gelu, silu, sigmoid, tanh), with their *_backward operators, on
// CUDA tensors: registered for DeviceType::CUDA and every dtype as the CPU
// kernels are, their parameters decoded by the same function
// (kernels::elementwise_params) and their formulas the shared ones.
#include <string>
#include <utility>

#include "backends/cuda/cuda_context.h"
#include "backends/cuda/cuda_errors.h"
#include "backends/cuda/kernel_io.h"
#include "backends/cuda/module_registration.h"
#include "backends/cuda/unary.h"
#include "dtensor/ops/kernels/elementwise.h"

namespace dtensor::cuda_backend {
namespace {

LocalKernel unary(UnaryFn fn) {
  return [fn](const KernelCall& c) -> std::vector<Tensor> {
    const auto [backward, s, t] = kernels::elementwise_params(c.schema);
    const Tensor g = c.local(0).contiguous();
    const Tensor x = backward ? c.local(1).contiguous() : g;
    DTENSOR_CHECK_ARG(x.shape() == g.shape() && x.dtype() == g.dtype(), c.schema.op(),
                      "grad_output {} {} and input {} {} differ", shape_str(g.shape()),
                      dtype_name(g.dtype()), shape_str(x.shape()), dtype_name(x.dtype()));
    const int dev = x.device().index;
    DeviceGuard guard(dev);
    Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
    check_cuda(launch_unary(fn, backward, elem_type_of(x.dtype()), y.data_ptr(), g.data_ptr(),
                            x.data_ptr(), s, t, x.numel(), stream_for(dev)),
               std::string(c.schema.op()) + " kernel");
    return {y};
  };
}

}  // namespace

// Registration only: no CUDA call happens while the module loads.
void register_unary_kernels() {
#define DTENSOR_PLAIN_FN(NAME, FUNCTION, OP, POSITIVE, LINEAR) {#OP, UnaryFn::NAME},
  const std::pair<const char*, UnaryFn> fns[] = {DTENSOR_PLAIN_UNARY_FUNCTIONS(DTENSOR_PLAIN_FN)  //
                                                 {"clamp", UnaryFn::Clamp},
                                                 {"pow", UnaryFn::Pow},
                                                 {"leaky_relu", UnaryFn::LeakyRelu},
                                                 {"gelu", UnaryFn::Gelu},
                                                 {"silu", UnaryFn::Silu},
                                                 {"sigmoid", UnaryFn::Sigmoid},
                                                 {"tanh", UnaryFn::Tanh}};
#undef DTENSOR_PLAIN_FN
  for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16})
    for (const auto& [name, fn] : fns) {
      register_kernel(name, DeviceType::CUDA, dt, unary(fn));
      register_kernel(std::string(name) + "_backward", DeviceType::CUDA, dt, unary(fn));
    }
}

}  // namespace dtensor::cuda_backend
