"""KernelBench-format twin of native candidate s06_ok_b1024_v8_shfl_online: 1024 threads, 1 row(s) per block, 8-byte loads, warp-shuffle reductions, online max/sum."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
// Row softmax, bench variant s06_ok_b1024_v8_shfl_online, CUDA (KernelBench-format twin).
// 1024 threads, 1 row(s) per block, 8-byte loads, warp-shuffle reductions, online max/sum.
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <cmath>

namespace {

constexpr int kThreads = 1024;
constexpr int kRowsPerBlock = 1;
constexpr int kGroup = kThreads / kRowsPerBlock;  // threads that share one row

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
    return __float2bfloat16(v);
}

constexpr int kVecBytes = 8;

template <typename T>
struct alignas(kVecBytes) Pack {
    T v[kVecBytes / sizeof(T)];
};

__device__ __forceinline__ bool aligned(const void* p) {
    return reinterpret_cast<uintptr_t>(p) % kVecBytes == 0;
}

// f(value) over this thread's share of one row: whole packs where the row is aligned, then
// the tail one element at a time (any cols, any offset).
template <typename T, typename F>
__device__ __forceinline__ void for_row(const T* xr, int64_t cols, int lane, F f) {
    constexpr int kVec = kVecBytes / sizeof(T);
    int64_t done = 0;
    if (aligned(xr)) {
        const Pack<T>* xp = reinterpret_cast<const Pack<T>*>(xr);
        const int64_t packs = cols / kVec;
        for (int64_t p = lane; p < packs; p += kGroup) {
            const Pack<T> in = xp[p];
#pragma unroll
            for (int k = 0; k < kVec; ++k) f(to_float(in.v[k]));
        }
        done = packs * kVec;
    }
    for (int64_t c = done + lane; c < cols; c += kGroup) f(to_float(xr[c]));
}

// yr[c] = g(xr[c]) over this thread's share of one row, vectorised like for_row.
template <typename T, typename G>
__device__ __forceinline__ void map_row(const T* xr, T* yr, int64_t cols, int lane, G g) {
    constexpr int kVec = kVecBytes / sizeof(T);
    int64_t done = 0;
    if (aligned(xr) && aligned(yr)) {
        const Pack<T>* xp = reinterpret_cast<const Pack<T>*>(xr);
        Pack<T>* yp = reinterpret_cast<Pack<T>*>(yr);
        const int64_t packs = cols / kVec;
        for (int64_t p = lane; p < packs; p += kGroup) {
            const Pack<T> in = xp[p];
            Pack<T> out;
#pragma unroll
            for (int k = 0; k < kVec; ++k) out.v[k] = from_float<T>(g(to_float(in.v[k])));
            yp[p] = out;
        }
        done = packs * kVec;
    }
    for (int64_t c = done + lane; c < cols; c += kGroup) yr[c] = from_float<T>(g(to_float(xr[c])));
}

// Butterfly over each warp (or over the group when it is narrower than a warp); warpSize is
// read at run time, 32 on NVIDIA and 64 on CDNA.
template <bool kMax>
__device__ float group_reduce(float v, float* scratch) {
    const int width = kGroup < warpSize ? kGroup : warpSize;
    for (int offset = width / 2; offset > 0; offset /= 2) {
        const float other = __shfl_xor_sync(0xffffffffu, v, offset, width);
        v = kMax ? fmaxf(v, other) : v + other;
    }
    if (kGroup <= warpSize) return v;
    // The group spans several warps: lane 0 of each publishes its partial, then every thread
    // of the group combines its group's partials.
    const int warps = kGroup / warpSize;
    if (threadIdx.x % warpSize == 0) scratch[threadIdx.x / warpSize] = v;
    __syncthreads();
    const int first = (threadIdx.x / kGroup) * warps;
    float result = scratch[first];
    for (int w = 1; w < warps; ++w) {
        result = kMax ? fmaxf(result, scratch[first + w]) : result + scratch[first + w];
    }
    __syncthreads();
    return result;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
softmax_rows(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t cols) {
    __shared__ float scratch[kThreads];
    const int lane = threadIdx.x % kGroup;
    const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kGroup;
    // Groups past the last row still join the reductions, which synchronise the whole block.
    const bool active = row < rows;
    const T* xr = x + (active ? row : 0) * cols;
    // One pass: running max m and a sum s rescaled whenever m grows.
    float m = -INFINITY;
    float s = 0.0f;
    if (active) {
        for_row(xr, cols, lane, [&](float v) {
            if (v > m) {
                s = s * expf(m - v) + 1.0f;
                m = v;
            } else {
                s += expf(v - m);
            }
        });
    }
    const float row_max = group_reduce<true>(m, scratch);
    const float rescaled = m == -INFINITY ? 0.0f : s * expf(m - row_max);
    const float row_sum = group_reduce<false>(rescaled, scratch);
    const float inv_sum = 1.0f / row_sum;
    if (active) {
        map_row(xr, y + row * cols, cols, lane,
                [&](float v) { return expf(v - row_max) * inv_sum; });
    }
}

}  // namespace

torch::Tensor softmax_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "softmax_forward: x must be a CUDA tensor");
    TORCH_CHECK(x.dim() >= 1, "softmax_forward: x needs at least one dimension");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t cols = xc.size(-1);
    const int64_t rows = cols ? xc.numel() / cols : 0;
    if (rows == 0 || cols == 0) return y;
    const dim3 blocks(static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock));
    if (xc.scalar_type() == torch::kFloat32) {
        softmax_rows<float><<<blocks, kThreads>>>(xc.data_ptr<float>(), y.data_ptr<float>(), rows, cols);
    } else if (xc.scalar_type() == torch::kBFloat16) {
        softmax_rows<__nv_bfloat16><<<blocks, kThreads>>>(
            reinterpret_cast<const __nv_bfloat16*>(xc.data_ptr<at::BFloat16>()), reinterpret_cast<__nv_bfloat16*>(y.data_ptr<at::BFloat16>()), rows, cols);
    } else {
        TORCH_CHECK(false, "softmax_forward supports float32 and bfloat16, got ", xc.scalar_type());
    }
    const cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "softmax_forward launch failed: ", cudaGetErrorString(err));
    return y;
}
"""

cpp_source = "torch::Tensor softmax_forward(torch::Tensor x);"

softmax_ext = load_inline(
    name="hipevolve_bench_s06_ok_b1024_v8_shfl_online",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["softmax_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = softmax_ext

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ext.softmax_forward(x)
