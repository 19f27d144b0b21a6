"""Row softmax as a KernelBench candidate: a load_inline extension, one block per row."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cmath>

constexpr int kThreads = 256;

// Tree reduction through shared memory: independent of the warp width.
template <bool kMax>
__device__ float block_reduce(float v, float* scratch) {
    scratch[threadIdx.x] = v;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) {
            float other = scratch[threadIdx.x + stride];
            scratch[threadIdx.x] = kMax ? fmaxf(scratch[threadIdx.x], other)
                                        : scratch[threadIdx.x] + other;
        }
        __syncthreads();
    }
    float result = scratch[0];
    __syncthreads();
    return result;
}

template <typename T>
__global__ void softmax_rows(const T* x, T* y, int64_t cols) {
    __shared__ float scratch[kThreads];
    const int64_t base = static_cast<int64_t>(blockIdx.x) * cols;
    float row_max = -INFINITY;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        row_max = fmaxf(row_max, static_cast<float>(x[base + c]));
    row_max = block_reduce<true>(row_max, scratch);
    float row_sum = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        row_sum += expf(static_cast<float>(x[base + c]) - row_max);
    row_sum = block_reduce<false>(row_sum, scratch);
    const float inv = 1.0f / row_sum;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        y[base + c] = static_cast<T>(expf(static_cast<float>(x[base + c]) - row_max) * inv);
}

torch::Tensor softmax_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous(), "x must be a contiguous GPU tensor");
    auto y = torch::empty_like(x);
    const int64_t cols = x.size(-1);
    const int64_t rows = cols ? x.numel() / cols : 0;
    if (rows == 0) return y;
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, x.scalar_type(), "softmax_rows", [&] {
        softmax_rows<scalar_t><<<rows, kThreads, 0, stream>>>(
            x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), cols);
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_source = "torch::Tensor softmax_forward(torch::Tensor x);"

softmax_ext = load_inline(
    name="healthy_kb_softmax",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["softmax_forward"],
    extra_cflags=["-O3"],
    extra_cuda_cflags=["-O3", "--use_fast_math"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.softmax = softmax_ext

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.softmax.softmax_forward(x.contiguous())
