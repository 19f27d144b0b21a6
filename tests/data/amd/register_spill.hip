// 160 live floats per thread under __launch_bounds__(1024) (at most 128 VGPRs): must spill.
#include <hip/hip_runtime.h>

constexpr int N = 160;

__global__ __launch_bounds__(1024) void spill_heavy(const float* __restrict__ x, float* __restrict__ y, int stride) {
  float r[N];
#pragma unroll
  for (int k = 0; k < N; ++k) r[k] = x[threadIdx.x + k * stride];
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < N; ++k) s += r[k] * r[N - 1 - k] * r[(k * 7) % N];
  y[threadIdx.x] = s;
}

extern "C" hipError_t spill(const float* x, float* y, int stride, hipStream_t stream) {
  hipLaunchKernelGGL(spill_heavy, dim3(1), dim3(1024), 0, stream, x, y, stride);
  return hipGetLastError();
}
