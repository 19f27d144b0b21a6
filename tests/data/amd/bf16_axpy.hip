// __hip_bfloat16 from hip_bf16.h (the header Debian 12's HIP 5.2 lacks).
#include <hip/hip_runtime.h>
#include <hip/hip_bf16.h>

__global__ void axpy_bf16(const __hip_bfloat16* __restrict__ x, __hip_bfloat16* __restrict__ y,
                          float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __float2bfloat16(a * __bfloat162float(x[i]) + __bfloat162float(y[i]));
}

extern "C" hipError_t axpy(const void* x, void* y, float a, int n, hipStream_t stream) {
  hipLaunchKernelGGL(axpy_bf16, dim3((n + 255) / 256), dim3(256), 0, stream,
                     (const __hip_bfloat16*)x, (__hip_bfloat16*)y, a, n);
  return hipGetLastError();
}
