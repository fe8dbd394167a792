// Forbidden: CUDA kernels reach ops through its registries only.
#include "backends/cuda/cuda_context.h"
