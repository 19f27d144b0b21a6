// One 16x16x16 bf16 matrix-core step per wave on CDNA2/CDNA3; a scalar path elsewhere.
#include <hip/hip_runtime.h>

typedef short bf16x4 __attribute__((ext_vector_type(4)));
typedef float floatx4 __attribute__((ext_vector_type(4)));

__global__ void mfma_tile(const bf16x4* __restrict__ a, const bf16x4* __restrict__ b,
                          floatx4* __restrict__ c) {
  floatx4 acc = c[threadIdx.x];
#if defined(__gfx90a__) || defined(__gfx942__)
  acc = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a[threadIdx.x], b[threadIdx.x], acc, 0, 0, 0);
#else
  for (int i = 0; i < 4; ++i) acc[i] += (float)a[threadIdx.x][i] * (float)b[threadIdx.x][i];
#endif
  c[threadIdx.x] = acc;
}

extern "C" hipError_t mfma_step(const void* a, const void* b, void* c, hipStream_t stream) {
  hipLaunchKernelGGL(mfma_tile, dim3(1), dim3(64), 0, stream, (const bf16x4*)a,
                     (const bf16x4*)b, (floatx4*)c);
  return hipGetLastError();
}
