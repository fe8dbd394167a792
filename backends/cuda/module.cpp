// The entry points of libdtensor-cuda.so (core/detail/device_module.h): the
// libdtensor version it was built with, which libdtensor checks before
// anything runs, and the registration it runs next.
#include "backends/cuda/module_registration.h"
#include "core/detail/device_module.h"

#define DTENSOR_MODULE_EXPORT extern "C" __attribute__((visibility("default")))

DTENSOR_MODULE_EXPORT const char* DTENSOR_DEVICE_MODULE_VERSION_FN() {
  return DTENSOR_VERSION_STRING;
}

DTENSOR_MODULE_EXPORT void DTENSOR_DEVICE_MODULE_REGISTER_FN() {
  dtensor::cuda_backend::register_device_ops_and_allocator();
  dtensor::cuda_backend::register_pointwise_kernels();
  dtensor::cuda_backend::register_norm_kernels();
  dtensor::cuda_backend::register_pool_kernels();
  dtensor::cuda_backend::register_channel_kernels();
  dtensor::cuda_backend::register_loss_kernels();
  dtensor::cuda_backend::register_upsample_kernels();
  dtensor::cuda_backend::register_optim_kernels();
  dtensor::cuda_backend::register_unary_kernels();
  dtensor::cuda_backend::register_reduce_kernels();
  dtensor::cuda_backend::register_dropout_kernels();
  dtensor::cuda_backend::register_permute_kernels();
  dtensor::cuda_backend::register_linear_kernels();
  dtensor::cuda_backend::register_cudnn_conv_kernels();
  dtensor::nccl_backend::register_nccl_backend();
}
