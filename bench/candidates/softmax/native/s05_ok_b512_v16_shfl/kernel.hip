// Row softmax, bench variant s05_ok_b512_v16_shfl, HIP (native candidate).
// 512 threads, 1 row(s) per block, 16-byte loads, warp-shuffle reductions, three passes.
#include <hip/hip_runtime.h>
#include <cstdint>
#include <cmath>

namespace {

constexpr int kThreads = 512;
constexpr int kRowsPerBlock = 1;
constexpr int kGroup = kThreads / kRowsPerBlock;  // threads that share one row

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(uint16_t bits) {
    return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ uint16_t from_float<uint16_t>(float v) {
    uint32_t bits = __float_as_uint(v);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
    bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
    return static_cast<uint16_t>(bits >> 16);
}

constexpr int kVecBytes = 16;

template <typename T>
struct alignas(kVecBytes) Pack {
    T v[kVecBytes / sizeof(T)];
};

__device__ __forceinline__ bool aligned(const void* p) {
    return reinterpret_cast<uintptr_t>(p) % kVecBytes == 0;
}

// f(value) over this thread's share of one row: whole packs where the row is aligned, then
// the tail one element at a time (any cols, any offset).
template <typename T, typename F>
__device__ __forceinline__ void for_row(const T* xr, int64_t cols, int lane, F f) {
    constexpr int kVec = kVecBytes / sizeof(T);
    int64_t done = 0;
    if (aligned(xr)) {
        const Pack<T>* xp = reinterpret_cast<const Pack<T>*>(xr);
        const int64_t packs = cols / kVec;
        for (int64_t p = lane; p < packs; p += kGroup) {
            const Pack<T> in = xp[p];
#pragma unroll
            for (int k = 0; k < kVec; ++k) f(to_float(in.v[k]));
        }
        done = packs * kVec;
    }
    for (int64_t c = done + lane; c < cols; c += kGroup) f(to_float(xr[c]));
}

// yr[c] = g(xr[c]) over this thread's share of one row, vectorised like for_row.
template <typename T, typename G>
__device__ __forceinline__ void map_row(const T* xr, T* yr, int64_t cols, int lane, G g) {
    constexpr int kVec = kVecBytes / sizeof(T);
    int64_t done = 0;
    if (aligned(xr) && aligned(yr)) {
        const Pack<T>* xp = reinterpret_cast<const Pack<T>*>(xr);
        Pack<T>* yp = reinterpret_cast<Pack<T>*>(yr);
        const int64_t packs = cols / kVec;
        for (int64_t p = lane; p < packs; p += kGroup) {
            const Pack<T> in = xp[p];
            Pack<T> out;
#pragma unroll
            for (int k = 0; k < kVec; ++k) out.v[k] = from_float<T>(g(to_float(in.v[k])));
            yp[p] = out;
        }
        done = packs * kVec;
    }
    for (int64_t c = done + lane; c < cols; c += kGroup) yr[c] = from_float<T>(g(to_float(xr[c])));
}

// Butterfly over each warp (or over the group when it is narrower than a warp); warpSize is
// read at run time, 32 on NVIDIA and 64 on CDNA.
template <bool kMax>
__device__ float group_reduce(float v, float* scratch) {
    const int width = kGroup < warpSize ? kGroup : warpSize;
    for (int offset = width / 2; offset > 0; offset /= 2) {
        const float other = __shfl_xor(v, offset, width);
        v = kMax ? fmaxf(v, other) : v + other;
    }
    if (kGroup <= warpSize) return v;
    // The group spans several warps: lane 0 of each publishes its partial, then every thread
    // of the group combines its group's partials.
    const int warps = kGroup / warpSize;
    if (threadIdx.x % warpSize == 0) scratch[threadIdx.x / warpSize] = v;
    __syncthreads();
    const int first = (threadIdx.x / kGroup) * warps;
    float result = scratch[first];
    for (int w = 1; w < warps; ++w) {
        result = kMax ? fmaxf(result, scratch[first + w]) : result + scratch[first + w];
    }
    __syncthreads();
    return result;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
softmax_rows(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t cols) {
    __shared__ float scratch[kThreads];
    const int lane = threadIdx.x % kGroup;
    const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kGroup;
    // Groups past the last row still join the reductions, which synchronise the whole block.
    const bool active = row < rows;
    const T* xr = x + (active ? row : 0) * cols;
    float local_max = -INFINITY;
    if (active) for_row(xr, cols, lane, [&](float v) { local_max = fmaxf(local_max, v); });
    const float row_max = group_reduce<true>(local_max, scratch);
    float local_sum = 0.0f;
    if (active) for_row(xr, cols, lane, [&](float v) { local_sum += expf(v - row_max); });
    const float row_sum = group_reduce<false>(local_sum, scratch);
    const float inv_sum = 1.0f / row_sum;
    if (active) {
        map_row(xr, y + row * cols, cols, lane,
                [&](float v) { return expf(v - row_max) * inv_sum; });
    }
}

template <typename T>
hipError_t launch(const T* x, T* y, int64_t rows, int64_t cols, hipStream_t stream) {
    if (rows == 0 || cols == 0) return hipSuccess;
    const unsigned blocks = static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
    softmax_rows<T><<<dim3(blocks), dim3(kThreads), 0, stream>>>(x, y, rows, cols);
    return hipGetLastError();
}

}  // namespace

extern "C" hipError_t softmax_f32(const float* x, float* y, int64_t rows, int64_t cols,
                                  hipStream_t stream) {
    return launch(x, y, rows, cols, stream);
}

extern "C" hipError_t softmax_bf16(const uint16_t* x, uint16_t* y, int64_t rows, int64_t cols,
                                   hipStream_t stream) {
    return launch(x, y, rows, cols, stream);
}
