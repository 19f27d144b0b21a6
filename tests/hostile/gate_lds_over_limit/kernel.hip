// Hack (or bug): a launch asking for 256 bytes of dynamic LDS more than a gfx942 workgroup has
// (64 KiB), the launch error left unchecked. On an MI300X such a kernel launched, read garbage
// and scored a fake 104x in a published evaluation (issue 36).
// Expected: rejected before any GPU time by the AMD static gate (verifier/build/rocm_limits.py),
// its reason naming the launch, the bytes asked and the target's limit.
#include <hip/hip_runtime.h>
#include <cstdint>

constexpr int kLdsLimit = 64 * 1024;
constexpr size_t kDynamicLds = kLdsLimit + 256;

__global__ void needs_lds(const uint16_t* x, uint16_t* y, int64_t n) {
    extern __shared__ uint16_t tile[];
    int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? x[i] : 0;
    __syncthreads();
    if (i < n) y[i] = tile[threadIdx.x];
}

extern "C" hipError_t softmax_bf16(const uint16_t* x, uint16_t* y, int64_t rows, int64_t cols,
                                   hipStream_t stream) {
    int64_t n = rows * cols;
    hipLaunchKernelGGL(needs_lds, dim3(static_cast<unsigned>((n + 255) / 256)), dim3(256),
                       kDynamicLds, stream, x, y, n);
    (void)hipGetLastError();  // the error is swallowed: the launcher reports success
    return hipSuccess;
}
