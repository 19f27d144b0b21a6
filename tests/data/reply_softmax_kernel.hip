// Row softmax over the last dimension: y = exp(x - max) / sum(exp(x - max)), fp32 math, output in
// the input dtype (float32, or bfloat16 carried as its raw 16 bits).
//
// Layout: ROWS rows per block, one group of GROUP = BLOCK / ROWS threads per row. Two passes over
// the row: pass 1 keeps a running (max, sum of exp) per thread, the online normaliser, and merges
// it across the group (warp shuffles, then LDS across the group's warps); pass 2 re-reads the row
// (largely from L2) and writes exp(x - max) / sum. So the row is read twice and written once.
// Loads and stores move VEC elements at a time (16 bytes for bf16 at VEC = 8) when every row
// starts on a VEC boundary (cols % VEC == 0), else one element at a time; the elements past the
// last whole vector are a scalar tail. Each thread issues UNROLL vector loads before it uses any.
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
// Vector loads each thread has in flight per step.
// @tunable UNROLL: 1, 2, 4
#define UNROLL 1
// Rows per block (short rows leave big blocks idle; long rows want whole blocks).
// @tunable ROWS: 1, 2
#define ROWS 1

constexpr int GROUP = BLOCK / ROWS;    // threads per row
constexpr int MAX_WARPS = BLOCK / 32;  // warps per block at the narrowest warp (32 lanes)
static_assert(BLOCK % ROWS == 0 && (GROUP & (GROUP - 1)) == 0, "GROUP must be a power of two");

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(uint16_t v) {
    return __uint_as_float(static_cast<uint32_t>(v) << 16);
}

__device__ __forceinline__ void from_float(float f, float& out) { out = f; }
// Round to nearest even, as PyTorch's float -> bfloat16; NaN stays a quiet NaN.
__device__ __forceinline__ void from_float(float f, uint16_t& out) {
    uint32_t bits = __float_as_uint(f);
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
        out = static_cast<uint16_t>((bits >> 16) | 0x40u);
        return;
    }
    bits += 0x7fffu + ((bits >> 16) & 1u);
    out = static_cast<uint16_t>(bits >> 16);
}

// VEC elements that move as one load or store (the alignment makes them one wide access).
template <typename T>
struct alignas(sizeof(T) * VEC) Pack {
    T v[VEC];
};

// Folds m2, s2 (a max and a sum of exp(x - m2)) into m, s. Empty partials have m = -inf.
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
    const float mx = fmaxf(m, m2);
    if (mx == -INFINITY) return;
    s = s * __expf(m - mx) + s2 * __expf(m2 - mx);
    m = mx;
}

template <typename T>
__device__ __forceinline__ void add_pack(float& m, float& s, const Pack<T>& p) {
    float vmax = -INFINITY;
#pragma unroll
    for (int k = 0; k < VEC; ++k) vmax = fmaxf(vmax, to_float(p.v[k]));
    float vsum = 0.0f;
    if (vmax != -INFINITY) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) vsum += __expf(to_float(p.v[k]) - vmax);
    }
    merge(m, s, vmax, vsum);
}

template <typename T>
__device__ __forceinline__ void normalise_pack(Pack<T>& p, float m, float inv) {
#pragma unroll
    for (int k = 0; k < VEC; ++k) from_float(__expf(to_float(p.v[k]) - m) * inv, p.v[k]);
}

// The group's (max, sum), in every thread of the group. Every thread of the block must call it
// (it holds barriers); the shuffle butterfly leaves the same bits in every lane.
__device__ __forceinline__ void group_merge(float& m, float& s, float* lds_m, float* lds_s) {
    const int width = GROUP < warpSize ? GROUP : warpSize;
    for (int offset = width >> 1; offset > 0; offset >>= 1) {
        const float m2 = __shfl_xor(m, offset, width);
        const float s2 = __shfl_xor(s, offset, width);
        merge(m, s, m2, s2);
    }
    if (GROUP > warpSize) {  // the same for the whole block: the barrier is reached by all
        const int warps = GROUP / warpSize;
        const int first = threadIdx.x / GROUP * warps;
        if (threadIdx.x % warpSize == 0) {
            lds_m[threadIdx.x / warpSize] = m;
            lds_s[threadIdx.x / warpSize] = s;
        }
        __syncthreads();
        m = lds_m[first];
        s = lds_s[first];
        for (int w = 1; w < warps; ++w) merge(m, s, lds_m[first + w], lds_s[first + w]);
    }
}

template <typename T>
__global__ void __launch_bounds__(BLOCK)
softmax_kernel(const T* __restrict__ x, T* __restrict__ y, int rows, int cols) {
    __shared__ float lds_m[MAX_WARPS];
    __shared__ float lds_s[MAX_WARPS];
    const int lane = threadIdx.x % GROUP;
    const int row = blockIdx.x * ROWS + threadIdx.x / GROUP;
    // A group past the last row sees an empty row but still joins the block's barriers.
    const int n = row < rows ? cols : 0;
    const int64_t offset = row < rows ? static_cast<int64_t>(row) * cols : 0;
    const T* xr = x + offset;
    T* yr = y + offset;
    const int nvec = n % VEC == 0 ? n / VEC : 0;  // whole vectors, when rows stay aligned
    const int tail = nvec * VEC;

    float m = -INFINITY, s = 0.0f;
    for (int c = lane; c < nvec; c += GROUP * UNROLL) {
        Pack<T> p[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int chunk = c + u * GROUP;
            if (chunk < nvec) p[u] = reinterpret_cast<const Pack<T>*>(xr)[chunk];
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            if (c + u * GROUP < nvec) add_pack(m, s, p[u]);
        }
    }
    for (int i = tail + lane; i < n; i += GROUP) {
        const float v = to_float(xr[i]);
        merge(m, s, v, v == -INFINITY ? 0.0f : 1.0f);
    }
    group_merge(m, s, lds_m, lds_s);
    const float inv = 1.0f / s;

    for (int c = lane; c < nvec; c += GROUP * UNROLL) {
        Pack<T> p[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int chunk = c + u * GROUP;
            if (chunk < nvec) p[u] = reinterpret_cast<const Pack<T>*>(xr)[chunk];
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int chunk = c + u * GROUP;
            if (chunk < nvec) {
                normalise_pack(p[u], m, inv);
                reinterpret_cast<Pack<T>*>(yr)[chunk] = p[u];
            }
        }
    }
    for (int i = tail + lane; i < n; i += GROUP) {
        from_float(__expf(to_float(xr[i]) - m) * inv, yr[i]);
    }
}

template <typename T>
static hipError_t launch(const T* x, T* y, int rows, int cols, hipStream_t stream) {
    if (rows <= 0 || cols <= 0) return hipSuccess;
    const dim3 grid((rows + ROWS - 1) / ROWS);
    hipLaunchKernelGGL(HIP_KERNEL_NAME(softmax_kernel<T>), grid, dim3(BLOCK), 0, stream, x, y,
                       rows, cols);
    return hipGetLastError();
}

extern "C" hipError_t softmax_f32(const float* x, float* y, int rows, int cols,
                                  hipStream_t stream) {
    return launch(x, y, rows, cols, stream);
}

extern "C" hipError_t softmax_bf16(const uint16_t* x, uint16_t* y, int rows, int cols,
                                   hipStream_t stream) {
    return launch(x, y, rows, cols, stream);
}
