// What the CUDA module registers when libdtensor loads it (backends/cuda/
// module.cpp): one function per backend file that provides something.
// Registration makes no CUDA call, so loading the module never wakes the driver.
#pragma once

namespace dtensor::cuda_backend {
/// DeviceOps and the allocator for DeviceType::CUDA (cuda_device_ops.cpp).
void register_device_ops_and_allocator();
/// The pointwise operators' CUDA kernels (pointwise_kernels.cpp).
void register_pointwise_kernels();
/// The CUDA kernels of the kernel slots (dtensor/ops/kernels/*.h): the
/// normalisations (norm_kernels.cpp).
void register_norm_kernels();
/// The pools (pool_kernels.cpp).
void register_pool_kernels();
/// The per-channel bias and sums (channel_kernels.cpp).
void register_channel_kernels();
/// The losses (loss_kernels.cpp).
void register_loss_kernels();
/// Dropout's mask (dropout_kernels.cpp).
void register_dropout_kernels();
/// The dimension permutation (permute_kernels.cpp).
void register_permute_kernels();
/// linear's products on cuBLAS (cublas_linear.cpp).
void register_linear_kernels();
/// The reductions over dims and their backward helpers (reduce_kernels.cpp).
void register_reduce_kernels();
/// The element-wise functions and activations (unary_kernels.cpp).
void register_unary_kernels();
/// The optimisers' updates and gradient clipping's parts (optim_kernels.cpp).
void register_optim_kernels();
/// Upsample (upsample_kernels.cpp).
void register_upsample_kernels();
/// cuDNN in the conv.* kernel slots of CUDA tensors (cudnn_conv.cpp).
void register_cudnn_conv_kernels();
}  // namespace dtensor::cuda_backend

namespace dtensor::nccl_backend {
/// Process-group backend "nccl" (backends/nccl/register.cpp).
void register_nccl_backend();
}  // namespace dtensor::nccl_backend
