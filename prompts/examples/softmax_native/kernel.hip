// Row softmax over the last dimension, y = exp(x - max) / sum(exp(x - max)), fp32 arithmetic,
// for fp32 and bf16 rows. One block per row:
// - softmax_cached: rows up to kMaxThreads * kCachedItems 16-byte packs stay in registers,
//   so the row is read once and written once.
// - softmax_online: longer rows keep a running (max, sum) per thread in one pass and normalise
//   in a second pass that re-reads the row (from L2 when it is still there).
// Reductions step through warpSize, so the code is right with 32 lanes (NVIDIA) and 64 (CDNA).
#include <hip/hip_runtime.h>
#include <hip/hip_bf16.h>

#include <math.h>
#include <stdint.h>

namespace {

// 512, not 1024: with 1024 ptxas squeezes softmax_cached into 32 registers (two blocks per
// SM) and spills; 512 also lets four long rows share an SM, so a few hundred run in one wave.
constexpr int kMaxThreads = 512;
constexpr int kCachedItems = 4;  // 16-byte packs per thread that softmax_cached keeps
constexpr int kMinWarp = 32;     // smallest warp: sizes the per-warp partials

// The running maximum of part of a row and the sum of exp(x - max) over that part.
struct MaxSum {
  float m;
  float s;
};

// Exponentials are taken relative to the maximum, or to 0 while every value seen is -inf, so
// a fully masked prefix gives exp(-inf) = 0 instead of exp(-inf - -inf) = NaN.
__device__ __forceinline__ float reference_point(float m) { return m == -INFINITY ? 0.0f : m; }

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  const float r = reference_point(m);
  return {m, a.s * __expf(a.m - r) + b.s * __expf(b.m - r)};
}

__device__ __forceinline__ MaxSum warp_reduce(MaxSum v) {
  for (int offset = warpSize / 2; offset > 0; offset /= 2) {
    v = merge(v, MaxSum{__shfl_xor(v.m, offset), __shfl_xor(v.s, offset)});
  }
  return v;
}

// The (max, sum) of the whole block, returned to every thread. Once per kernel: the partials
// are not guarded against a second call. blockDim.x must be a multiple of 64.
__device__ MaxSum block_reduce(MaxSum v) {
  __shared__ float part_m[kMaxThreads / kMinWarp];
  __shared__ float part_s[kMaxThreads / kMinWarp];
  const int lane = threadIdx.x % warpSize;
  const int warp = threadIdx.x / warpSize;
  const int warps = blockDim.x / warpSize;
  v = warp_reduce(v);
  if (lane == 0) {
    part_m[warp] = v.m;
    part_s[warp] = v.s;
  }
  __syncthreads();
  if (warp == 0) {
    MaxSum w = lane < warps ? MaxSum{part_m[lane], part_s[lane]} : MaxSum{-INFINITY, 0.0f};
    w = warp_reduce(w);
    if (lane == 0) {
      part_m[0] = w.m;
      part_s[0] = w.s;
    }
  }
  __syncthreads();
  return {part_m[0], part_s[0]};
}

// N elements moved as one 16-byte load or store when N * sizeof(T) == 16.
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__hip_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __hip_bfloat16 from_float<__hip_bfloat16>(float x) {
  return __float2bfloat16(x);
}

template <typename T, int VEC>
__global__ void __launch_bounds__(kMaxThreads)
    softmax_cached(const T* __restrict__ x, T* __restrict__ y, int cols) {
  using P = Pack<T, VEC>;
  const P* in = reinterpret_cast<const P*>(x + static_cast<int64_t>(blockIdx.x) * cols);
  P* out = reinterpret_cast<P*>(y + static_cast<int64_t>(blockIdx.x) * cols);
  const int packs = cols / VEC;

  float vals[kCachedItems][VEC];
  float m = -INFINITY;
#pragma unroll
  for (int i = 0; i < kCachedItems; ++i) {
    const int p = i * blockDim.x + threadIdx.x;
    if (p < packs) {
      const P pk = in[p];
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        vals[i][j] = to_float(pk.v[j]);
        m = fmaxf(m, vals[i][j]);
      }
    }
  }
  // vals becomes exp(x - r) so the write pass needs one multiply per element.
  const float r = reference_point(m);
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < kCachedItems; ++i) {
    const int p = i * blockDim.x + threadIdx.x;
    if (p < packs) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        vals[i][j] = __expf(vals[i][j] - r);
        s += vals[i][j];
      }
    }
  }
  const MaxSum row = block_reduce(MaxSum{m, s});
  // A thread whose values are all -inf has vals = 0; its scale must be 0, not exp(0 - r_row),
  // which overflows when the row's maximum is very negative. A row that is all -inf gets
  // 0 / 0 = NaN, as torch.softmax gives.
  const float scale = (m == -INFINITY ? 0.0f : __expf(r - reference_point(row.m))) / row.s;
#pragma unroll
  for (int i = 0; i < kCachedItems; ++i) {
    const int p = i * blockDim.x + threadIdx.x;
    if (p < packs) {
      P pk;
#pragma unroll
      for (int j = 0; j < VEC; ++j) pk.v[j] = from_float<T>(vals[i][j] * scale);
      out[p] = pk;
    }
  }
}

template <typename T, int VEC>
__global__ void __launch_bounds__(kMaxThreads)
    softmax_online(const T* __restrict__ x, T* __restrict__ y, int cols) {
  using P = Pack<T, VEC>;
  const P* in = reinterpret_cast<const P*>(x + static_cast<int64_t>(blockIdx.x) * cols);
  P* out = reinterpret_cast<P*>(y + static_cast<int64_t>(blockIdx.x) * cols);
  const int packs = cols / VEC;

  MaxSum acc{-INFINITY, 0.0f};
  for (int p = threadIdx.x; p < packs; p += blockDim.x) {
    const P pk = in[p];
    float v[VEC];
    float chunk_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      v[j] = to_float(pk.v[j]);
      chunk_max = fmaxf(chunk_max, v[j]);
    }
    // One rescale per pack, not per element.
    const float m = fmaxf(acc.m, chunk_max);
    const float r = reference_point(m);
    float s = acc.s * __expf(acc.m - r);
#pragma unroll
    for (int j = 0; j < VEC; ++j) s += __expf(v[j] - r);
    acc = {m, s};
  }
  const MaxSum row = block_reduce(acc);
  const float r = reference_point(row.m);
  const float inv = 1.0f / row.s;
  for (int p = threadIdx.x; p < packs; p += blockDim.x) {
    const P pk = in[p];
    P res;
#pragma unroll
    for (int j = 0; j < VEC; ++j) res.v[j] = from_float<T>(__expf(to_float(pk.v[j]) - r) * inv);
    out[p] = res;
  }
}

// Threads for n work items: a multiple of 64 (whole warps on both platforms), 64..limit.
int threads_for(int64_t n, int limit) {
  const int64_t rounded = (n + 63) / 64 * 64;
  return static_cast<int>(rounded < 64 ? 64 : (rounded > limit ? limit : rounded));
}

template <typename T>
hipError_t launch(const T* x, T* y, int64_t rows, int64_t cols, hipStream_t stream) {
  if (rows < 0 || cols < 0 || rows > INT32_MAX || cols > INT32_MAX) return hipErrorInvalidValue;
  if (rows == 0 || cols == 0) return hipSuccess;
  constexpr int kVec = 16 / sizeof(T);
  const bool vectorised = reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(y) % 16 == 0 && cols % kVec == 0;
  const dim3 grid(static_cast<unsigned int>(rows));
  if (vectorised && cols / kVec <= int64_t{kMaxThreads} * kCachedItems) {
    const int threads = threads_for((cols / kVec + kCachedItems - 1) / kCachedItems, kMaxThreads);
    softmax_cached<T, kVec><<<grid, threads, 0, stream>>>(x, y, static_cast<int>(cols));
  } else if (vectorised) {
    softmax_online<T, kVec>
        <<<grid, threads_for(cols / kVec, kMaxThreads), 0, stream>>>(x, y, static_cast<int>(cols));
  } else {
    softmax_online<T, 1>
        <<<grid, threads_for(cols, kMaxThreads), 0, stream>>>(x, y, static_cast<int>(cols));
  }
  return hipGetLastError();
}

}  // namespace

extern "C" hipError_t softmax_f32(const float* x, float* y, int64_t rows, int64_t cols,
                                  hipStream_t stream) {
  return launch(x, y, rows, cols, stream);
}

extern "C" hipError_t softmax_bf16(const __hip_bfloat16* x, __hip_bfloat16* y, int64_t rows,
                                   int64_t cols, hipStream_t stream) {
  return launch(x, y, rows, cols, stream);
}
