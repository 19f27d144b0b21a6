// Row softmax, one block per row: the shape of a native candidate (extern "C" launcher).
#include <hip/hip_runtime.h>

__device__ float block_reduce(float v, float* scratch, bool is_max) {
  for (int off = warpSize / 2; off > 0; off /= 2) {
    float other = __shfl_xor(v, off);
    v = is_max ? fmaxf(v, other) : v + other;
  }
  int lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  int warps = (blockDim.x + warpSize - 1) / warpSize;
  v = lane < warps ? scratch[lane] : (is_max ? -INFINITY : 0.0f);
  for (int off = warpSize / 2; off > 0; off /= 2) {
    float other = __shfl_xor(v, off);
    v = is_max ? fmaxf(v, other) : v + other;
  }
  __syncthreads();
  return v;
}

__global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y, int cols) {
  __shared__ float scratch[32];
  const float* row = x + (size_t)blockIdx.x * cols;
  float* out = y + (size_t)blockIdx.x * cols;
  float m = -INFINITY;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
  m = block_reduce(m, scratch, true);
  float s = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) s += __expf(row[c] - m);
  s = block_reduce(s, scratch, false);
  for (int c = threadIdx.x; c < cols; c += blockDim.x) out[c] = __expf(row[c] - m) / s;
}

extern "C" hipError_t softmax(const float* x, float* y, int rows, int cols, hipStream_t stream) {
  hipLaunchKernelGGL(softmax_rows, dim3(rows), dim3(256), 0, stream, x, y, cols);
  return hipGetLastError();
}
