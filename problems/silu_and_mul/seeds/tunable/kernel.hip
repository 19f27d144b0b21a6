// SwiGLU gate: out[t, i] = silu(x[t, i]) * x[t, d + i] with silu(g) = g / (1 + exp(-g)), fp32
// math, one rounding to bfloat16 (carried as its raw 16 bits). x = [gate | up] is [tokens, 2d].
//
// Layout: a 2-D grid. blockIdx.x picks a tile of TILE = BLOCK * VEC * UNROLL columns, blockIdx.y
// ROWS tokens, striding by gridDim.y * ROWS tokens (the y grid is capped at 65535). Thread t of a
// block owns vectors t, t + BLOCK, ... of the tile in each of its ROWS tokens, token after token;
// per token it issues all of its gate and up loads before it computes (2 * UNROLL in flight).
// Holding every token's loads at once would spill on gfx942 at 1024 threads (128 VGPRs).
// Loads and stores move VEC elements at a time (16 bytes at VEC = 8) when gate, up and out rows all
// start on a VEC boundary (d % VEC == 0), else one element at a time; the columns past the last
// whole vector are a scalar tail.
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
// Vectors per thread and token (the tile is BLOCK * VEC * UNROLL columns wide).
// @tunable UNROLL: 1, 2, 4
#define UNROLL 1
// Tokens per block and step.
// @tunable ROWS: 1, 2, 4
#define ROWS 1
// exp: 1 the fast hardware approximation (__expf), 0 the accurate expf (slower, within 1 ulp).
// @tunable FAST_EXP: 0, 1
#define FAST_EXP 1

constexpr int TILE = BLOCK * VEC * UNROLL;  // columns per block
constexpr int MAX_GRID_Y = 65535;

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

__device__ __forceinline__ float silu_mul(uint16_t gate, uint16_t up) {
    const float g = to_float(gate);
#if FAST_EXP
    return g / (1.0f + __expf(-g)) * to_float(up);
#else
    return g / (1.0f + expf(-g)) * to_float(up);
#endif
}

// VEC elements that move as one load or store (the alignment makes them one wide access).
struct alignas(2 * VEC) Pack {
    uint16_t v[VEC];
};

__device__ __forceinline__ Pack silu_mul(const Pack& gate, const Pack& up) {
    Pack out;
#pragma unroll
    for (int k = 0; k < VEC; ++k) out.v[k] = to_bf16(silu_mul(gate.v[k], up.v[k]));
    return out;
}

__global__ void __launch_bounds__(BLOCK)
silu_and_mul_kernel(const uint16_t* __restrict__ x, uint16_t* __restrict__ out, int tokens,
                    int d) {
    const int nvec = d % VEC == 0 ? d / VEC : 0;  // whole vectors, when rows stay aligned
    const int tail = nvec * VEC;
    const int first = blockIdx.x * (TILE / VEC) + threadIdx.x;  // this thread's first vector
    for (int t0 = blockIdx.y * ROWS; t0 < tokens; t0 += gridDim.y * ROWS) {
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            const int t = t0 + r;
            const int64_t in_row = static_cast<int64_t>(t) * 2 * d;  // gate; up is d further
            const int64_t out_row = static_cast<int64_t>(t) * d;
            Pack gate[UNROLL], up[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const int chunk = first + u * BLOCK;
                if (t < tokens && chunk < nvec) {
                    gate[u] = reinterpret_cast<const Pack*>(x + in_row)[chunk];
                    up[u] = reinterpret_cast<const Pack*>(x + in_row + d)[chunk];
                }
            }
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const int chunk = first + u * BLOCK;
                if (t < tokens && chunk < nvec) {
                    reinterpret_cast<Pack*>(out + out_row)[chunk] = silu_mul(gate[u], up[u]);
                }
            }
        }
        // The scalar tail: columns from `tail` on, spread over the whole grid's x extent.
        for (int i = tail + blockIdx.x * BLOCK + threadIdx.x; i < d; i += gridDim.x * BLOCK) {
#pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                if (t0 + r < tokens) {
                    const int64_t at = static_cast<int64_t>(t0 + r) * 2 * d + i;
                    out[static_cast<int64_t>(t0 + r) * d + i] = to_bf16(silu_mul(x[at], x[at + d]));
                }
            }
        }
    }
}

extern "C" hipError_t silu_and_mul_bf16(const uint16_t* x, uint16_t* out, int tokens, int d,
                                        hipStream_t stream) {
    if (tokens <= 0 || d <= 0) return hipSuccess;
    const int rows = (tokens + ROWS - 1) / ROWS;
    const dim3 grid((d + TILE - 1) / TILE, rows < MAX_GRID_Y ? rows : MAX_GRID_Y);
    hipLaunchKernelGGL(silu_and_mul_kernel, grid, dim3(BLOCK), 0, stream, x, out, tokens, d);
    return hipGetLastError();
}
