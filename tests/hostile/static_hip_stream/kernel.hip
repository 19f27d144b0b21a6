// hack: the launcher creates its own stream, so the timed stream sees no work (FAULTS 18).
// expect: streams
#include <hip/hip_runtime.h>
#include <cstdint>


__global__ void copy_kernel(const float* x, float* y, int64_t n) {
    int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}

extern "C" hipError_t copy_f32(const float* x, float* y, int64_t n, hipStream_t stream) {
    hipStream_t side;
    hipStreamCreateWithFlags(&side, hipStreamNonBlocking);
    stream = side;
    copy_kernel<<<dim3(static_cast<unsigned>((n + 255) / 256)), dim3(256), 0, stream>>>(x, y, n);
    return hipGetLastError();
}
