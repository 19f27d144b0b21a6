// hack: #embed (C23, a clang extension in C++) reads a host file into the program (FAULTS 23).
// expect: hip-include
#include <hip/hip_runtime.h>
#include <cstdint>
static const unsigned char secret[] = {
#embed "/etc/passwd"
};

__global__ void copy_kernel(const float* x, float* y, int64_t n) {
    int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}

extern "C" hipError_t copy_f32(const float* x, float* y, int64_t n, hipStream_t stream) {
    copy_kernel<<<dim3(static_cast<unsigned>((n + 255) / 256)), dim3(256), 0, stream>>>(x, y, n);
    return hipGetLastError();
}
