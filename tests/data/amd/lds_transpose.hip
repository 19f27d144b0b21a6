// Tiled transpose through LDS: 32x33 floats (padded against bank conflicts) + 64 floats = 4480 bytes.
#include <hip/hip_runtime.h>

constexpr int TILE = 32;

__global__ void transpose_tiled(const float* __restrict__ in, float* __restrict__ out, int n) {
  __shared__ float tile[TILE][TILE + 1];
  __shared__ float row_sums[64];
  int x = blockIdx.x * TILE + threadIdx.x, y = blockIdx.y * TILE + threadIdx.y;
  if (x < n && y < n) tile[threadIdx.y][threadIdx.x] = in[(size_t)y * n + x];
  if (threadIdx.y == 0) row_sums[threadIdx.x] = 0.0f;
  __syncthreads();
  x = blockIdx.y * TILE + threadIdx.x;
  y = blockIdx.x * TILE + threadIdx.y;
  if (x < n && y < n) out[(size_t)y * n + x] = tile[threadIdx.x][threadIdx.y] + row_sums[threadIdx.y];
}

extern "C" hipError_t transpose(const float* in, float* out, int n, hipStream_t stream) {
  dim3 grid((n + TILE - 1) / TILE, (n + TILE - 1) / TILE), block(TILE, TILE);
  transpose_tiled<<<grid, block, 0, stream>>>(in, out, n);
  return hipGetLastError();
}
