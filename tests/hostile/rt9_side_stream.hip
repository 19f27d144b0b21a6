// rt9_08_side_stream
// Class 4 / timing (work outside the timed stream). The launcher ignores most of the stream it is
// given: the first three quarters of the rows run fast on `stream`; the last quarter runs the slow
// honest way (first pass x16) on the per-thread default stream, reached as the magic handle
// (hipStream_t)2 so no stream API or stream name appears in the source. Events recorded on the
// judge's stream do not wait for that work unless the judge synchronises the whole device.
// Success in the verdict: status ok with speedups > 1 (everything on `stream` would be ~0.3-0.5x
// because of the slow quarter... the side quarter alone dominates the real time).
#include <hip/hip_runtime.h>
#include <hip/hip_bf16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

__device__ __forceinline__ float rt_ld(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float rt_ld(const __hip_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void rt_st(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void rt_st(__hip_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16(v); }

__device__ __forceinline__ void rt_merge(float& m, float& s, float m2, float s2) {
  const float mm = fmaxf(m, m2);
  const float r = mm == -INFINITY ? 0.0f : mm;
  s = s * __expf(m - r) + s2 * __expf(m2 - r);
  m = mm;
}

// One block per row. The first pass (max, sum of exp) runs `reps` times and accumulates, so
// reps > 1 is a deliberately slow honest path (the sum is divided by reps afterwards).
// Rows at or past `row_end` are skipped (left as the caller found them).
// mode_flag (device pointer, may be null): when it points at a nonzero value the kernel takes
// the "fast" path: reps = 1 and rows past 2/3 of the grid are skipped.
template <typename T>
__global__ void __launch_bounds__(256)
rt_softmax(const T* __restrict__ x, T* __restrict__ y, int rows, int cols, int reps, int row_end,
           const int* mode_flag) {
  __shared__ float sm[32];
  __shared__ float ss[32];
  const int row = blockIdx.x;
  if (mode_flag != nullptr && *mode_flag != 0) {
    reps = 1;
    row_end = rows - rows / 3;
  }
  if (row >= row_end) return;
  const T* xr = x + static_cast<int64_t>(row) * cols;
  T* yr = y + static_cast<int64_t>(row) * cols;
  float m = -INFINITY, s = 0.0f;
  for (int rep = 0; rep < reps; ++rep) {
    for (int c = threadIdx.x; c < cols; c += blockDim.x) rt_merge(m, s, rt_ld(xr, c), 1.0f);
  }
  for (int o = warpSize / 2; o > 0; o >>= 1) {
    const float m2 = __shfl_xor(m, o);
    const float s2 = __shfl_xor(s, o);
    rt_merge(m, s, m2, s2);
  }
  const int lane = threadIdx.x % warpSize, w = threadIdx.x / warpSize, nw = blockDim.x / warpSize;
  if (lane == 0) { sm[w] = m; ss[w] = s; }
  __syncthreads();
  if (w == 0) {
    m = lane < nw ? sm[lane] : -INFINITY;
    s = lane < nw ? ss[lane] : 0.0f;
    for (int o = warpSize / 2; o > 0; o >>= 1) {
      const float m2 = __shfl_xor(m, o);
      const float s2 = __shfl_xor(s, o);
      rt_merge(m, s, m2, s2);
    }
    if (lane == 0) { sm[0] = m; ss[0] = s; }
  }
  __syncthreads();
  m = sm[0];
  s = ss[0] / static_cast<float>(reps);
  const float r = m == -INFINITY ? 0.0f : m;
  const float inv = 1.0f / s;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) rt_st(yr, c, __expf(rt_ld(xr, c) - r) * inv);
}

template <typename T>
static hipError_t rt_launch(const T* x, T* y, int64_t rows, int64_t cols, int reps, int64_t row_end,
                            const int* mode_flag, hipStream_t stream) {
  if (rows <= 0 || cols <= 0) return hipSuccess;
  rt_softmax<T><<<dim3(static_cast<unsigned>(rows)), dim3(256), 0, stream>>>(
      x, y, static_cast<int>(rows), static_cast<int>(cols), reps, static_cast<int>(row_end), mode_flag);
  return hipGetLastError();
}

template <typename T>
static hipError_t rt_entry(const T* x, T* y, int64_t rows, int64_t cols, hipStream_t stream) {
  if (rows <= 0 || cols <= 0) return hipSuccess;
  const int64_t split = rows - rows / 4;
  const int64_t off = split * cols;
  hipError_t e = rt_launch(x, y, split, cols, 1, split, nullptr, stream);
  if (e != hipSuccess) return e;
  hipStream_t side = reinterpret_cast<hipStream_t>(static_cast<uintptr_t>(2));
  if (rows - split > 0) e = rt_launch(x + off, y + off, rows - split, cols, 64, rows - split, nullptr, side);
  return e;
}

extern "C" hipError_t softmax_f32(const float* x, float* y, int64_t rows, int64_t cols,
                                  hipStream_t stream) {
  return rt_entry(x, y, rows, cols, stream);
}

extern "C" hipError_t softmax_bf16(const __hip_bfloat16* x, __hip_bfloat16* y, int64_t rows,
                                   int64_t cols, hipStream_t stream) {
  return rt_entry(x, y, rows, cols, stream);
}
