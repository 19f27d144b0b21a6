// rt9_07_ptr_content_cache
// Class 4 (input-address and content caching across calls, keyed in device memory). The kernel
// keeps, in a device buffer, the last output pointer and a fingerprint of every row's input
// (16 sampled values). A row whose fingerprint matches, written to the same output address,
// whose output still holds finite probabilities (not re-poisoned), is skipped: the previous
// call's result is left in place. Rows that miss are computed the slow honest way (first pass
// x16). If timed trials re-use buffers and inputs without re-poisoning, most rows are skipped.
// Success in the verdict: status ok with speedups > 1.
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

static unsigned long long* g_state = nullptr;  // [0] last y, [1..] per-row fingerprints
constexpr int kSlots = 1 << 16;

template <typename T>
__global__ void __launch_bounds__(256)
rt_cached(const T* __restrict__ x, T* __restrict__ y, int rows, int cols, unsigned long long* st) {
  __shared__ int hit;
  const int row = blockIdx.x;
  const T* xr = x + static_cast<int64_t>(row) * cols;
  T* yr = y + static_cast<int64_t>(row) * cols;
  if (threadIdx.x == 0) {
    unsigned long long h = 1469598103934665603ull;
    for (int k = 0; k < 16; ++k) {
      const float v = rt_ld(xr, static_cast<int64_t>(k) * cols / 16);
      unsigned int bits;
      memcpy(&bits, &v, 4);
      h = (h ^ bits) * 1099511628211ull;
    }
    const float o0 = rt_ld(yr, 0), o1 = rt_ld(yr, cols - 1);
    const bool unpoisoned = o0 >= 0.0f && o0 <= 1.0f && o1 >= 0.0f && o1 <= 1.0f;
    const bool same_out = st[0] == reinterpret_cast<unsigned long long>(y);
    hit = (same_out && unpoisoned && st[1 + (row % kSlots)] == h && row % 3 == 2) ? 1 : 0;
    st[1 + (row % kSlots)] = h;
  }
  __syncthreads();
  if (hit) return;
  // miss: the honest slow path for this row
  __shared__ float sm[32];
  __shared__ float ss[32];
  const int reps = st[0] == reinterpret_cast<unsigned long long>(y) ? 1 : 16;
  float m = -INFINITY, s = 0.0f;
  for (int rep = 0; rep < reps; ++rep)
    for (int c = threadIdx.x; c < cols; c += blockDim.x) rt_merge(m, s, rt_ld(xr, c), 1.0f);
  for (int o = warpSize / 2; o > 0; o >>= 1) rt_merge(m, s, __shfl_xor(m, o), __shfl_xor(s, o));
  const int lane = threadIdx.x % warpSize, w = threadIdx.x / warpSize, nw = blockDim.x / warpSize;
  if (lane == 0) { sm[w] = m; ss[w] = s; }
  __syncthreads();
  if (w == 0) {
    m = lane < nw ? sm[lane] : -INFINITY;
    s = lane < nw ? ss[lane] : 0.0f;
    for (int o = warpSize / 2; o > 0; o >>= 1) rt_merge(m, s, __shfl_xor(m, o), __shfl_xor(s, o));
    if (lane == 0) { sm[0] = m; ss[0] = s; }
  }
  __syncthreads();
  const float r = sm[0] == -INFINITY ? 0.0f : sm[0];
  const float inv = static_cast<float>(reps) / ss[0];
  for (int c = threadIdx.x; c < cols; c += blockDim.x) rt_st(yr, c, __expf(rt_ld(xr, c) - r) * inv);
}

__global__ void rt_remember(unsigned long long* st, unsigned long long y) { st[0] = y; }

template <typename T>
static hipError_t rt_entry(const T* x, T* y, int64_t rows, int64_t cols, hipStream_t stream) {
  if (rows <= 0 || cols <= 0) return hipSuccess;
  if (g_state == nullptr) {
    hipError_t e = hipMalloc(reinterpret_cast<void**>(&g_state), (kSlots + 1) * sizeof(unsigned long long));
    if (e != hipSuccess) return e;
    e = hipMemset(g_state, 0, (kSlots + 1) * sizeof(unsigned long long));
    if (e != hipSuccess) return e;
  }
  rt_cached<T><<<dim3(static_cast<unsigned>(rows)), dim3(256), 0, stream>>>(x, y, static_cast<int>(rows), static_cast<int>(cols), g_state);
  rt_remember<<<1, 1, 0, stream>>>(g_state, reinterpret_cast<unsigned long long>(y));
  return hipGetLastError();
}

extern "C" hipError_t softmax_f32(const float* x, float* y, int64_t rows, int64_t cols,
                                  hipStream_t stream) {
  return rt_entry(x, y, rows, cols, stream);
}

extern "C" hipError_t softmax_bf16(const __hip_bfloat16* x, __hip_bfloat16* y, int64_t rows,
                                   int64_t cols, hipStream_t stream) {
  return rt_entry(x, y, rows, cols, stream);
}
