// RMSNorm with a weight: y = x * rsqrt(mean(x^2) + eps) * w per row, fp32 math, one rounding to
// bfloat16 (carried as its raw 16 bits) at the end.
//
// Layout: ROWS rows at a time per block (LOOPS such row sets, one after another), one group of
// GROUP = BLOCK / ROWS threads per row. Pass 1 sums the
// squares of the row and reduces the sum across the group (warp shuffles, then LDS across the
// group's warps); pass 2 re-reads the row (largely from L2) with the weight and writes y. So x is
// read twice, the weight once per row (it stays in L2), y written once.
// Loads and stores move VEC elements at a time (16 bytes at VEC = 8) when every row starts on a VEC
// boundary (hidden % VEC == 0), else one element at a time; the elements past the last whole
// vector are a scalar tail. Each thread issues UNROLL vector loads before it uses any.
// Nothing assumes a warp width: it reads warpSize (32 on NVIDIA, 64 on CDNA).
//
// Tunable parameters: a comment `// @tunable NAME: v1, v2, ...` lists the values the `#define NAME`
// right after it may take; the #define holds the current choice. Every combination is correct.
#include <hip/hip_runtime.h>
#include <cstdint>

// Threads per block.
// @tunable BLOCK: 64, 128, 256, 512, 1024
#define BLOCK 256
// Elements per load and store.
// @tunable VEC: 1, 2, 4, 8
#define VEC 4
// Rows per block (short rows leave big blocks idle; long rows want whole blocks).
// @tunable ROWS: 1, 2, 4, 8
#define ROWS 1
// Vector loads each thread has in flight per step.
// @tunable UNROLL: 1, 2, 4
#define UNROLL 1
// Row sets each block takes in turn (fewer, longer-lived blocks: less launch and tail cost).
// @tunable LOOPS: 1, 2, 4
#define LOOPS 1

constexpr int GROUP = BLOCK / ROWS;    // threads per row
constexpr int MAX_WARPS = BLOCK / 32;  // warps per block at the narrowest warp (32 lanes)
static_assert(BLOCK % ROWS == 0 && (GROUP & (GROUP - 1)) == 0, "GROUP must be a power of two");

__device__ __forceinline__ float to_float(uint16_t v) {
    return __uint_as_float(static_cast<uint32_t>(v) << 16);
}

// Round to nearest even, as PyTorch's float -> bfloat16; NaN stays a quiet NaN.
__device__ __forceinline__ uint16_t to_bf16(float f) {
    uint32_t bits = __float_as_uint(f);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return static_cast<uint16_t>(bits >> 16);
}

// VEC elements that move as one load or store (the alignment makes them one wide access).
struct alignas(2 * VEC) Pack {
    uint16_t v[VEC];
};

__device__ __forceinline__ float sum_squares(const Pack& p) {
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < VEC; ++k) s += to_float(p.v[k]) * to_float(p.v[k]);
    return s;
}

__device__ __forceinline__ Pack normalise(const Pack& x, const Pack& w, float inv) {
    Pack y;
#pragma unroll
    for (int k = 0; k < VEC; ++k) y.v[k] = to_bf16(to_float(x.v[k]) * inv * to_float(w.v[k]));
    return y;
}

// The group's sum, in every thread of the group. Every thread of the block must call it (it holds
// a barrier); the shuffle butterfly leaves the same bits in every lane.
__device__ __forceinline__ float group_sum(float v, float* lds) {
    const int width = GROUP < warpSize ? GROUP : warpSize;
    for (int offset = width >> 1; offset > 0; offset >>= 1) v += __shfl_xor(v, offset, width);
    if (GROUP > warpSize) {  // the same for the whole block: the barrier is reached by all
        const int warps = GROUP / warpSize;
        const int first = threadIdx.x / GROUP * warps;
        if (threadIdx.x % warpSize == 0) lds[threadIdx.x / warpSize] = v;
        __syncthreads();
        v = lds[first];
        for (int w = 1; w < warps; ++w) v += lds[first + w];
    }
    return v;
}

// The ROWS rows from `first_row` on, one group each. Every thread of the block calls it.
__device__ __forceinline__ void rmsnorm_rows(const uint16_t* __restrict__ x,
                                             const uint16_t* __restrict__ weight,
                                             uint16_t* __restrict__ y, int rows, int hidden,
                                             float eps, int first_row, float* partial) {
    const int lane = threadIdx.x % GROUP;
    const int row = first_row + threadIdx.x / GROUP;
    // A group past the last row sees an empty row but still joins the block's barrier.
    const int n = row < rows ? hidden : 0;
    const int64_t offset = row < rows ? static_cast<int64_t>(row) * hidden : 0;
    const uint16_t* xr = x + offset;
    uint16_t* yr = y + offset;
    const int nvec = n % VEC == 0 ? n / VEC : 0;  // whole vectors, when rows stay aligned
    const int tail = nvec * VEC;

    float ss = 0.0f;
    for (int c = lane; c < nvec; c += GROUP * UNROLL) {
        Pack p[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int chunk = c + u * GROUP;
            if (chunk < nvec) p[u] = reinterpret_cast<const Pack*>(xr)[chunk];
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            if (c + u * GROUP < nvec) ss += sum_squares(p[u]);
        }
    }
    for (int i = tail + lane; i < n; i += GROUP) ss += to_float(xr[i]) * to_float(xr[i]);
    ss = group_sum(ss, partial);
    const float inv = rsqrtf(ss / static_cast<float>(hidden) + eps);

    for (int c = lane; c < nvec; c += GROUP * UNROLL) {
        Pack p[UNROLL], w[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int chunk = c + u * GROUP;
            if (chunk < nvec) {
                p[u] = reinterpret_cast<const Pack*>(xr)[chunk];
                w[u] = reinterpret_cast<const Pack*>(weight)[chunk];
            }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int chunk = c + u * GROUP;
            if (chunk < nvec) reinterpret_cast<Pack*>(yr)[chunk] = normalise(p[u], w[u], inv);
        }
    }
    for (int i = tail + lane; i < n; i += GROUP) {
        yr[i] = to_bf16(to_float(xr[i]) * inv * to_float(weight[i]));
    }
}

__global__ void __launch_bounds__(BLOCK)
rmsnorm_kernel(const uint16_t* __restrict__ x, const uint16_t* __restrict__ weight,
               uint16_t* __restrict__ y, int rows, int hidden, float eps) {
    __shared__ float partial[MAX_WARPS];
    // Kept rolled: each pass is a whole row set, with its own barriers.
#pragma unroll 1
    for (int loop = 0; loop < LOOPS; ++loop) {
        // The same count for the whole block, so every thread reaches every barrier.
        if (loop > 0) __syncthreads();  // the last group sum has read its LDS partials
        rmsnorm_rows(x, weight, y, rows, hidden, eps, (blockIdx.x * LOOPS + loop) * ROWS, partial);
    }
}

extern "C" hipError_t rmsnorm_bf16(const uint16_t* x, const uint16_t* weight, uint16_t* y,
                                   int rows, int hidden, float eps, hipStream_t stream) {
    if (rows <= 0 || hidden <= 0) return hipSuccess;
    const dim3 grid((rows + ROWS * LOOPS - 1) / (ROWS * LOOPS));
    hipLaunchKernelGGL(rmsnorm_kernel, grid, dim3(BLOCK), 0, stream, x, weight, y, rows, hidden,
                       eps);
    return hipGetLastError();
}
