// Gated DeltaNet decode: one token per sequence, the fp32 state read once and written once.
//
// Per (batch b, value head j; query/key head j / (HV / H)), FLA convention, state h = S^T [K, V]:
//     h <- h * exp(g);  u = beta * (v - h^T k);  h <- h + k u^T;  o = h^T (scale q)
// The readout uses o = scale * (h_d^T q + u (k . q)) with h_d the decayed state (h_new = h_d + k u^T),
// so both reductions over K (h_d^T k and h_d^T q) and k . q happen in one pass, before the new state
// is written: the state streams through registers once, in and out (out of place).
//
// Layout: one block of NT threads per (V slice of BV columns, value head, batch), NT = NT_FEW when
// the grid fits in one wave of SMs (latency bound: shorter blocks finish sooner), 256 beyond it
// (bandwidth bound: more bytes in flight per SM). Thread t owns 4
// adjacent columns (one 16-byte load per state row, coalesced along V) and RK contiguous rows of K;
// the sums over K are a warp shuffle across the lanes that share columns, then a small LDS pass
// across warps. Nothing assumes a warp width: it reads warpSize (32 on NVIDIA, 64 on CDNA).
//
// Tunable parameters: a comment `// @tunable NAME: v1, v2, ...` lists the values the `#define NAME`
// right after it may take; the #define holds the current choice.
#include <hip/hip_runtime.h>
#include <cstdint>

// V columns per block: more columns mean fewer, longer blocks (B * HV * 128 / BV blocks in all).
// @tunable BV: 16, 32, 64, 128
#define BV 32

// Threads per block when the grid has at most one block per SM (B * HV * 128 / BV <= SMs); on an
// H200, 128 took batch 1 from 6.5 to 6.1 us per step in CUDA graphs (bench/gdn_vs_fla.py).
// @tunable NT_FEW: 128, 256
#define NT_FEW 128

// Threads per block beyond that (bandwidth bound: bytes in flight per SM). Capped where a thread
// would hold fewer than 2 state rows (at most 16 * BV threads: 256 at BV = 16).
// @tunable NT_MANY: 128, 256, 512
#define NT_MANY 256

// Blocks per SM up to which the grid counts as latency bound and gets NT_FEW threads a block.
// @tunable FEW_WAVES: 1, 2
#define FEW_WAVES 1

// The decay exp(g): 1 the fast hardware approximation (__expf), 0 the accurate expf.
// @tunable FAST_EXP: 0, 1
#define FAST_EXP 0

constexpr int DK = 128;          // key dimension (rows of the state)
constexpr int DV = 128;          // value dimension (columns of the state)
constexpr int NSUM = 9;          // values summed over K: h^T k (4), h^T q (4), k . q (1)

// NT threads a block, capped so that each thread keeps at least 2 rows of the state.
constexpr int fit_threads(int nt) { return nt < 16 * BV ? nt : 16 * BV; }

template <int NT>
struct DecodeShape {
    static constexpr int TV = BV / 4;       // threads across the slice, 4 columns each
    static constexpr int TK = NT / TV;      // threads down K
    static constexpr int RK = DK / TK;      // state rows per thread
    static constexpr int MAX_WARPS = NT / 32;  // the most warps a block can have (warpSize >= 32)
    static_assert(DV % BV == 0 && BV % 4 == 0, "BV must divide 128 and be a multiple of 4");
    static_assert(TV <= 32, "a warp must hold every column group (warpSize >= 32)");
    static_assert(NT % TV == 0 && DK % TK == 0 && RK % 2 == 0, "rows must split evenly");
};

__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// Round to nearest even, as PyTorch's float -> bfloat16; NaN stays a quiet NaN.
__device__ __forceinline__ uint32_t bf16_bits(float f) {
    uint32_t bits = __float_as_uint(f);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (bits >> 16) | 0x40u;
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return bits >> 16;
}

template <int NT>
__global__ void __launch_bounds__(NT) gdn_decode_kernel(
    const uint16_t* __restrict__ q, const uint16_t* __restrict__ k,
    const uint16_t* __restrict__ v, const float* __restrict__ g,
    const float* __restrict__ beta, const float* __restrict__ state,
    uint16_t* __restrict__ o, float* __restrict__ new_state, int H, int HV) {
    using S = DecodeShape<NT>;
    constexpr int TV = S::TV, RK = S::RK;
    __shared__ float partial[S::MAX_WARPS][NSUM][TV];

    const int t = threadIdx.x;
    const int tv = t % TV;
    const int tk = t / TV;
    const int hv = blockIdx.y;
    const int b = blockIdx.z;
    const int hk = hv / (HV / H);
    const int col = blockIdx.x * BV + tv * 4;
    const int row0 = tk * RK;
    const int64_t bh = static_cast<int64_t>(b) * HV + hv;

    // Issue every state load first: the kernel is bound by these bytes.
    const float* hs = state + bh * DK * DV + static_cast<int64_t>(row0) * DV + col;
    float4 h[RK];
#pragma unroll
    for (int i = 0; i < RK; ++i) h[i] = *reinterpret_cast<const float4*>(hs + i * DV);

    const int64_t qk_off = (static_cast<int64_t>(b) * H + hk) * DK + row0;
    float kr[RK], qr[RK];
#pragma unroll
    for (int i = 0; i < RK; i += 2) {
        const uint32_t kw = *reinterpret_cast<const uint32_t*>(k + qk_off + i);
        const uint32_t qw = *reinterpret_cast<const uint32_t*>(q + qk_off + i);
        kr[i] = bf16_lo(kw);
        kr[i + 1] = bf16_hi(kw);
        qr[i] = bf16_lo(qw);
        qr[i + 1] = bf16_hi(qw);
    }
#if FAST_EXP
    const float decay = __expf(g[bh]);
#else
    const float decay = expf(g[bh]);
#endif
    const float bt = beta[bh];
    const uint2 vw = *reinterpret_cast<const uint2*>(v + bh * DV + col);
    const float vv[4] = {bf16_lo(vw.x), bf16_hi(vw.x), bf16_lo(vw.y), bf16_hi(vw.y)};

    float sum[NSUM];
#pragma unroll
    for (int s = 0; s < NSUM; ++s) sum[s] = 0.0f;
#pragma unroll
    for (int i = 0; i < RK; ++i) {
        h[i].x *= decay;
        h[i].y *= decay;
        h[i].z *= decay;
        h[i].w *= decay;
        sum[0] += h[i].x * kr[i];
        sum[1] += h[i].y * kr[i];
        sum[2] += h[i].z * kr[i];
        sum[3] += h[i].w * kr[i];
        sum[4] += h[i].x * qr[i];
        sum[5] += h[i].y * qr[i];
        sum[6] += h[i].z * qr[i];
        sum[7] += h[i].w * qr[i];
        sum[8] += kr[i] * qr[i];
    }

    // Lanes tv, tv + TV, tv + 2 TV, ... of a warp share columns: fold them together.
    for (int offset = TV; offset < warpSize; offset <<= 1) {
#pragma unroll
        for (int s = 0; s < NSUM; ++s) sum[s] += __shfl_xor(sum[s], offset);
    }
    const int warp = t / warpSize;
    const int lane = t % warpSize;
    if (lane < TV) {
#pragma unroll
        for (int s = 0; s < NSUM; ++s) partial[warp][s][lane] = sum[s];
    }
    __syncthreads();
    const int warps = NT / warpSize;
#pragma unroll
    for (int s = 0; s < NSUM; ++s) sum[s] = 0.0f;
    for (int w = 0; w < warps; ++w) {
#pragma unroll
        for (int s = 0; s < NSUM; ++s) sum[s] += partial[w][s][tv];
    }

    // u = beta (v - h_d^T k); h_new = h_d + k u^T.
    float u[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) u[c] = bt * (vv[c] - sum[c]);
    float* hn = new_state + bh * DK * DV + static_cast<int64_t>(row0) * DV + col;
#pragma unroll
    for (int i = 0; i < RK; ++i) {
        float4 out;
        out.x = h[i].x + kr[i] * u[0];
        out.y = h[i].y + kr[i] * u[1];
        out.z = h[i].z + kr[i] * u[2];
        out.w = h[i].w + kr[i] * u[3];
        *reinterpret_cast<float4*>(hn + i * DV) = out;
    }

    if (tk == 0) {
        const float scale = 1.0f / sqrtf(static_cast<float>(DK));
        uint32_t ob[4];
#pragma unroll
        for (int c = 0; c < 4; ++c) ob[c] = bf16_bits(scale * (sum[4 + c] + u[c] * sum[8]));
        uint2 packed;
        packed.x = ob[0] | (ob[1] << 16);
        packed.y = ob[2] | (ob[3] << 16);
        *reinterpret_cast<uint2*>(o + bh * DV + col) = packed;
    }
}

// The SM count of the current device, asked once per device. Threads that race on a first use
// both ask and store the same answer; the flag is published after it (compiler builtins: the
// screen's header allowlist has no <atomic>).
static hipError_t sm_count(int* out) {
    constexpr int MAX_DEVICES = 64;
    static int known[MAX_DEVICES];
    static bool asked[MAX_DEVICES] = {};
    int device = 0;
    hipError_t err = hipGetDevice(&device);
    if (err != hipSuccess) return err;
    if (device < 0 || device >= MAX_DEVICES) return hipErrorInvalidValue;
    if (!__atomic_load_n(&asked[device], __ATOMIC_ACQUIRE)) {
        err = hipDeviceGetAttribute(&known[device], hipDeviceAttributeMultiprocessorCount, device);
        if (err != hipSuccess) return err;
        __atomic_store_n(&asked[device], true, __ATOMIC_RELEASE);
    }
    *out = known[device];
    return hipSuccess;
}

template <int NT>
static void gdn_decode_launch(const uint16_t* q, const uint16_t* k, const uint16_t* v,
                              const float* g, const float* beta, const float* state, uint16_t* o,
                              float* new_state, int B, int H, int HV, hipStream_t stream) {
    hipLaunchKernelGGL(gdn_decode_kernel<NT>, dim3(DV / BV, HV, B), dim3(NT), 0, stream, q, k, v,
                       g, beta, state, o, new_state, H, HV);
}

// q, k [B, 1, H, 128] bf16; v [B, 1, HV, 128] bf16; g, beta [B, 1, HV] fp32;
// state [B, HV, 128, 128] fp32 (read only); o [B, 1, HV, 128] bf16; new_state like state.
extern "C" hipError_t gdn_decode(const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                 const float* g, const float* beta, const float* state,
                                 uint16_t* o, float* new_state, int B, int H, int HV,
                                 hipStream_t stream) {
    if (B <= 0 || H <= 0 || HV <= 0 || HV % H != 0) return hipErrorInvalidValue;
    int sms = 0;
    const hipError_t err = sm_count(&sms);
    if (err != hipSuccess) return err;
    const int64_t blocks = static_cast<int64_t>(B) * HV * (DV / BV);
    const auto launch = blocks <= static_cast<int64_t>(sms) * FEW_WAVES
                            ? gdn_decode_launch<fit_threads(NT_FEW)>
                            : gdn_decode_launch<fit_threads(NT_MANY)>;
    launch(q, k, v, g, beta, state, o, new_state, B, H, HV, stream);
    return hipGetLastError();
}
