// hack: the header's name is built by a macro, so the directive names no file (FAULTS 23).
// expect: hip-include
#include <hip/hip_runtime.h>
#include <cstdint>
#define SECRET_FILE </etc/passwd>
#include SECRET_FILE

__global__ void copy_kernel(const float* x, float* y, int64_t n) {
    int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}

extern "C" hipError_t copy_f32(const float* x, float* y, int64_t n, hipStream_t stream) {
    copy_kernel<<<dim3(static_cast<unsigned>((n + 255) / 256)), dim3(256), 0, stream>>>(x, y, n);
    return hipGetLastError();
}
