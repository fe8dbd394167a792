// The pointwise operators and reductions of ops/pointwise_ops.cpp on CUDA
// tensors: registered for DeviceType::CUDA and every dtype, as the Eigen CPU
// kernels are for DeviceType::CPU, so a program that uses them runs unchanged
// on a CUDA mesh. The maths (f32 for the 16-bit types, f64 sums) follows the
// CPU kernels; the work is queued on the library's stream of the device.
#include "backends/cuda/cuda_context.h"
#include "backends/cuda/cuda_errors.h"
#include "backends/cuda/elementwise.h"
#include "backends/cuda/module_registration.h"
#include "backends/cuda/pointwise.h"
#include "dtensor/core/errors.h"
#include "dtensor/ops/pointwise.h"
#include "dtensor/ops/registry.h"

namespace dtensor::cuda_backend {
namespace {

ElemType elem_type(DType t) {
  return static_cast<ElemType>(static_cast<int>(t));  // values match, see cuda_device_ops.cpp
}

// The scalar argument of scale (relu's is unused).
double scalar_arg(const KernelCall& c) {
  return c.schema.size() > 1 && !c.schema.is_dtensor(1) ? c.schema.scalar(1) : 0.0;
}

// `t` (contiguous) broadcast to `shape`, materialised on its device by the
// strided copy: the pointwise kernel walks operands of equal shape. Costs one
// pass over the output; the operand that already has the shape is used as it is.
Tensor broadcast_to(const Tensor& t, const Shape& shape, cudaStream_t stream) {
  if (t.shape() == shape) return t;
  Tensor dense = Tensor::empty(shape, t.dtype(), t.device());
  check_cuda(launch_copy(
                 dense.data_ptr(), elem_type(t.dtype()), t.data_ptr(), elem_type(t.dtype()),
                 make_layout(shape, contiguous_strides(shape), broadcast_strides(t.shape(), shape)),
                 stream),
             "broadcast copy");
  return dense;
}

LocalKernel elementwise(PointwiseOp op, bool binary) {
  return [op, binary](const KernelCall& c) -> std::vector<Tensor> {
    Tensor a = c.local(0).contiguous();
    Tensor b = binary ? c.local(1).contiguous() : Tensor();
    const int dev = a.device().index;
    DeviceGuard guard(dev);
    cudaStream_t stream = stream_for(dev);
    // The local operands broadcast like the global ones (the strategies shard
    // a dim alike in both or leave the broadcast operand whole there).
    if (binary && b.shape() != a.shape()) {
      const Shape shape = broadcast_shapes(a.shape(), b.shape());
      a = broadcast_to(a, shape, stream);
      b = broadcast_to(b, shape, stream);
    }
    Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
    check_cuda(launch_pointwise(op, elem_type(a.dtype()), out.data_ptr(), a.data_ptr(),
                                binary ? b.data_ptr() : nullptr, scalar_arg(c), a.numel(), stream),
               std::string(c.schema.op()) + " kernel");
    return {out};
  };
}

// Like the CPU kernel: the local sum, divided by the global element count for
// the mean (a sharded input's local results are Partial).
LocalKernel reduction(bool mean) {
  return [mean](const KernelCall& c) -> std::vector<Tensor> {
    const Tensor a = c.local(0).contiguous();
    const int dev = a.device().index;
    DeviceGuard guard(dev);
    const double divisor =
        mean ? static_cast<double>(shape_numel(c.input_specs.at(0).shape())) : 1.0;
    Tensor partials = Tensor::empty({kSumBlocks}, DType::F64, a.device());
    Tensor out = Tensor::empty({}, a.dtype(), a.device());
    check_cuda(launch_sum(elem_type(a.dtype()), a.data_ptr(), a.numel(), divisor, out.data_ptr(),
                          static_cast<double*>(partials.data_ptr()), stream_for(dev)),
               mean ? "mean kernel" : "sum kernel");
    return {out};
  };
}

// "to": the device copy converts (the strided conversion kernel of
// cuda_device_ops.cpp).
std::vector<Tensor> convert(const KernelCall& c) {
  const Tensor& x = c.local(0);
  Tensor y = Tensor::empty(x.shape(), parse_dtype(c.schema.text(1)), x.device());
  y.copy_(x);
  return {y};
}

}  // namespace

// Registration only: no CUDA call happens while the module loads.
void register_pointwise_kernels() {
  const auto cuda = DeviceType::CUDA;
  for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
    register_kernel("add", cuda, dt, elementwise(PointwiseOp::Add, true));
    register_kernel("mul", cuda, dt, elementwise(PointwiseOp::Mul, true));
    register_kernel("relu_backward", cuda, dt, elementwise(PointwiseOp::ReluBackward, true));
    register_kernel("sub", cuda, dt, elementwise(PointwiseOp::Sub, true));
    register_kernel("div", cuda, dt, elementwise(PointwiseOp::Div, true));
    register_kernel("maximum", cuda, dt, elementwise(PointwiseOp::Maximum, true));
    register_kernel("minimum", cuda, dt, elementwise(PointwiseOp::Minimum, true));
    register_kernel("maximum_share", cuda, dt, elementwise(PointwiseOp::MaximumShare, true));
    register_kernel("scale", cuda, dt, elementwise(PointwiseOp::Scale, false));
    register_kernel("relu", cuda, dt, elementwise(PointwiseOp::Relu, false));
    register_kernel("sum", cuda, dt, reduction(false));
    register_kernel("mean", cuda, dt, reduction(true));
    register_kernel("to", cuda, dt, convert);
  }
}

}  // namespace dtensor::cuda_backend
