// hack: the launcher makes its own stream, its name built by token pasting so that no text
// search for the stream API finds it; the timed stream sees no work (FAULTS 18).
// source: gpu-mode/kernelguard kernelguard.py rules TOKEN_PASTE_CUDA_API, UNSYNC_MULTISTREAM
// @ 6797d26ddb52f4a7f8d6020af317eda9291359fc (ported from CUDA to HIP).
// expect: streams
#include <hip/hip_runtime.h>
#include <cstdint>

#define PASTE(a, b) a##b
#define SIDE_STREAM(s) PASTE(hipStream, CreateWithFlags)(&s, PASTE(hipStream, NonBlocking))

__global__ void copy_kernel(const float* x, float* y, int64_t n) {
    int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}

extern "C" hipError_t copy_f32(const float* x, float* y, int64_t n, hipStream_t stream) {
    hipStream_t side;
    SIDE_STREAM(side);
    stream = side;
    copy_kernel<<<dim3(static_cast<unsigned>((n + 255) / 256)), dim3(256), 0, stream>>>(x, y, n);
    return hipGetLastError();
}
