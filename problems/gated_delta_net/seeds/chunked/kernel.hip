// Gated DeltaNet prefill (FLA's chunk_gated_delta_rule, forward): one fused chunked kernel.
//
// Per (batch b, value head j; query/key head j / (HV / H)), FLA convention, state h = S^T [K, V],
// chunks of C = 64 tokens, gamma = in-chunk cumulative sum of g, Gamma_ij = exp(gamma_i - gamma_j):
//     L  = tril(diag(beta) (K K^T * Gamma), -1)             A = (I + L)^-1
//     Vn = A (beta * (V - exp(gamma) * (K h)))              (= U - W h of the UT/WY form:
//                                                              U = A (V beta), W = A (K beta e^gamma))
//     O  = scale * exp(gamma) * (Q h) + P Vn,               P = tril(scale Q K^T * Gamma)
//     h' = exp(gamma_C) h + (K * exp(gamma_C - gamma))^T Vn
// Solving for Vn directly (one right-hand side per V column) instead of forming W and U saves the
// 64 x 128 W and its product with h; in exact arithmetic it is the same number.
//
// The state scan and the output pass are fused: one block per (V slice of BV columns, value head,
// batch) walks the chunks in order, so per-chunk states never touch memory. Everything is fp32
// (q, k, v are read as bf16 and widened); the state is fp32 in registers and LDS.
//
// A block's chunk step, NT = 256 threads (barriers between phases):
//   load    K, Q chunk tiles -> LDS (bf16, 16-byte chunks XOR-swizzled by row against bank
//           conflicts); v, g, beta -> registers. Rows past T are zeros (g = beta = 0 there keeps
//           the state unchanged, and causality keeps them out of real rows).
//   1a      S_K = K h, S_Q = Q h into registers (thread: RI rows x 4 columns), h read from LDS.
//   1b      gamma, exp(gamma), exp(gamma_C - gamma) into LDS (threads < 64); then the 64 x 64
//           matrix M: M[r][s] = L[s][r] for r < s (L transposed, upper) and P[r][s] for r >= s
//           (lower with the diagonal). Thread (a, b) owns rows a + 16 i, columns b + 16 j.
//   1c      R = beta (v - exp(gamma) S_K) into LDS, over the dead Q tile.
//   2       blocked forward substitution (I + L) Vn = R: 16-row diagonal blocks one thread per
//           V column in registers, the rows below updated by all threads;
//           O = scale exp(gamma) S_Q + P Vn -> bf16 out; h' in registers (thread: RH rows x 4
//           columns), then h' -> LDS (over M) for the next chunk.
// LDS: K tile 16 KB | Q tile / R 16 KB | M (+ gamma, beta) / h max(17.25 KB, 128 * BV * 4).
//
// Tunable parameters: a comment `// @tunable NAME: v1, v2, ...` lists the values the `#define NAME`
// right after it may take; the #define holds the current choice.
#include <hip/hip_runtime.h>
#include <cstdint>

// V columns per block. Smaller slices give more blocks (B * HV * 128 / BV) when B * HV is small;
// larger ones repeat less of the V-independent work (K K^T, Q K^T, K h). BV = 64 uses exactly
// the 64 KB of LDS a gfx942 workgroup can have.
// @tunable BV: 16, 32, 64
#define BV 32

constexpr int C = 64;     // chunk length
constexpr int DK = 128;   // key dimension
constexpr int DV = 128;   // value dimension
constexpr int NT = 256;   // threads per block
constexpr int CG = BV / 4;       // column groups (4 columns, one float4) across the slice
constexpr int RG = NT / CG;      // row groups
constexpr int RI = C / RG;       // chunk rows per thread in S_K, S_Q, R, O
constexpr int RH = DK / RG;      // state rows per thread
constexpr int KCH = DK / 8;      // 16-byte chunks in a bf16 row of K or Q
constexpr int SB = 16;           // rows per diagonal block of the triangular solve

static_assert(BV == 16 || BV == 32 || BV == 64, "BV must be 16, 32 or 64");
static_assert(RI >= 1 && RH % 2 == 0 && NT == 256 && C == 64, "the thread maps assume these");

constexpr int cmax(int a, int b) { return a > b ? a : b; }
constexpr int TILE_BYTES = C * DK * 2;
constexpr int QR_BYTES = cmax(TILE_BYTES, C * BV * 4);
constexpr int M_BYTES = C * C * 4;
constexpr int SMALL_FLOATS = 5 * C;  // g, beta, gamma, exp(gamma), exp(gamma_C - gamma)
constexpr int MH_BYTES = cmax(M_BYTES + SMALL_FLOATS * 4, DK * BV * 4);
constexpr int OFF_Q = TILE_BYTES;
constexpr int OFF_MH = TILE_BYTES + QR_BYTES;
constexpr int SMEM_BYTES = OFF_MH + MH_BYTES;
static_assert(SMEM_BYTES <= 65536, "over the 64 KB of LDS a gfx942 workgroup can have");

__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// Round to nearest even, as PyTorch's float -> bfloat16; NaN stays a quiet NaN.
__device__ __forceinline__ uint32_t bf16_bits(float f) {
    uint32_t bits = __float_as_uint(f);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (bits >> 16) | 0x40u;
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return bits >> 16;
}

// Element offset of 16-byte chunk `chunk` of tile row `row`: chunks are XOR-swizzled by the row
// so that 8 threads reading the same chunk of 8 consecutive rows hit 8 different bank groups.
__device__ __forceinline__ int swz(int row, int chunk) {
    return row * DK + ((chunk ^ (row & 15)) << 3);
}

__device__ __forceinline__ void widen8(const uint4& w, float (&f)[8]) {
    f[0] = bf16_lo(w.x);
    f[1] = bf16_hi(w.x);
    f[2] = bf16_lo(w.y);
    f[3] = bf16_hi(w.y);
    f[4] = bf16_lo(w.z);
    f[5] = bf16_hi(w.z);
    f[6] = bf16_lo(w.w);
    f[7] = bf16_hi(w.w);
}

__global__ void __launch_bounds__(NT) gdn_chunk_kernel(
    const uint16_t* __restrict__ q, const uint16_t* __restrict__ k,
    const uint16_t* __restrict__ v, const float* __restrict__ g,
    const float* __restrict__ beta, const float* __restrict__ h0,
    uint16_t* __restrict__ o, float* __restrict__ ht, int T, int H, int HV) {
#if defined(__HIP_PLATFORM_AMD__)
    // Static on AMD, so the static analysis reports the LDS this kernel uses.
    __shared__ float4 smem4[SMEM_BYTES / 16];
#else
    // Over 48 KB: NVIDIA needs dynamic shared memory (the launcher raises the limit).
    HIP_DYNAMIC_SHARED(float4, smem4)
#endif
    unsigned char* smem = reinterpret_cast<unsigned char*>(smem4);
    uint16_t* sK = reinterpret_cast<uint16_t*>(smem);
    uint16_t* sQ = reinterpret_cast<uint16_t*>(smem + OFF_Q);
    float* sR = reinterpret_cast<float*>(smem + OFF_Q);    // R, then Vn: [C][BV], over Q
    float* sM = reinterpret_cast<float*>(smem + OFF_MH);   // [C][C]
    float* sH = reinterpret_cast<float*>(smem + OFF_MH);   // [DK][BV], over M and the small arrays
    float* sG = reinterpret_cast<float*>(smem + OFF_MH + M_BYTES);
    float* sB = sG + C;
    float* sGam = sB + C;
    float* sEg = sGam + C;   // exp(gamma)
    float* sD = sEg + C;     // exp(gamma_C - gamma)

    const int t = threadIdx.x;
    const int cg = t % CG;
    const int rg = t / CG;
    const int v0 = blockIdx.x * BV;
    const int hv = blockIdx.y;
    const int b = blockIdx.z;
    const int hk = hv / (HV / H);
    const float scale = 1.0f / sqrtf(static_cast<float>(DK));
    const int64_t bh = static_cast<int64_t>(b) * HV + hv;

    // The state tile this thread updates: rows rg * RH + i, columns v0 + cg * 4 .. + 3.
    float4 hreg[RH];
    {
        const float* src = h0 + (bh * DK + rg * RH) * DV + v0 + cg * 4;
#pragma unroll
        for (int i = 0; i < RH; ++i) {
            hreg[i] = *reinterpret_cast<const float4*>(src + i * DV);
            *reinterpret_cast<float4*>(sH + (rg * RH + i) * BV + cg * 4) = hreg[i];
        }
    }

    const int chunks = (T + C - 1) / C;
    for (int n = 0; n < chunks; ++n) {
        const int t0 = n * C;

        // ---- load: K and Q tiles to LDS, v / g / beta to registers -------------------------
#pragma unroll
        for (int m = 0; m < C * KCH / NT; ++m) {
            const int e = t + m * NT;
            const int row = e / KCH;
            const int chunk = e % KCH;
            uint4 kw = make_uint4(0u, 0u, 0u, 0u);
            uint4 qw = kw;
            if (t0 + row < T) {
                const int64_t off = ((static_cast<int64_t>(b) * T + t0 + row) * H + hk) * DK;
                kw = *reinterpret_cast<const uint4*>(k + off + chunk * 8);
                qw = *reinterpret_cast<const uint4*>(q + off + chunk * 8);
            }
            *reinterpret_cast<uint4*>(sK + swz(row, chunk)) = kw;
            *reinterpret_cast<uint4*>(sQ + swz(row, chunk)) = qw;
        }
        uint2 vraw[RI];
#pragma unroll
        for (int i = 0; i < RI; ++i) {
            const int tok = t0 + rg * RI + i;
            vraw[i] = make_uint2(0u, 0u);
            if (tok < T) {
                const int64_t off = ((static_cast<int64_t>(b) * T + tok) * HV + hv) * DV;
                vraw[i] = *reinterpret_cast<const uint2*>(v + off + v0 + cg * 4);
            }
        }
        float g_t = 0.0f, beta_t = 0.0f;
        if (t < C && t0 + t < T) {
            const int64_t off = (static_cast<int64_t>(b) * T + t0 + t) * HV + hv;
            g_t = g[off];
            beta_t = beta[off];
        }
        __syncthreads();

        // ---- 1a: S_K = K h and S_Q = Q h, RI rows x 4 columns per thread --------------------
        float sk[RI][4], sq[RI][4];
#pragma unroll
        for (int i = 0; i < RI; ++i) {
#pragma unroll
            for (int c = 0; c < 4; ++c) sk[i][c] = sq[i][c] = 0.0f;
        }
        for (int chunk = 0; chunk < KCH; ++chunk) {
            float kf[RI][8], qf[RI][8];
#pragma unroll
            for (int i = 0; i < RI; ++i) {
                const int row = rg * RI + i;
                widen8(*reinterpret_cast<const uint4*>(sK + swz(row, chunk)), kf[i]);
                widen8(*reinterpret_cast<const uint4*>(sQ + swz(row, chunk)), qf[i]);
            }
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const float4 hh = *reinterpret_cast<const float4*>(sH + (chunk * 8 + e) * BV + cg * 4);
#pragma unroll
                for (int i = 0; i < RI; ++i) {
                    sk[i][0] += kf[i][e] * hh.x;
                    sk[i][1] += kf[i][e] * hh.y;
                    sk[i][2] += kf[i][e] * hh.z;
                    sk[i][3] += kf[i][e] * hh.w;
                    sq[i][0] += qf[i][e] * hh.x;
                    sq[i][1] += qf[i][e] * hh.y;
                    sq[i][2] += qf[i][e] * hh.z;
                    sq[i][3] += qf[i][e] * hh.w;
                }
            }
        }
        __syncthreads();  // h in LDS is dead until the end of the step

        // ---- 1b: gamma and its exponentials ------------------------------------------------
        if (t < C) {
            sG[t] = g_t;
            sB[t] = beta_t;
        }
        __syncthreads();
        if (t < C) {
            float upto = 0.0f, total = 0.0f;
#pragma unroll 8
            for (int j = 0; j < C; ++j) {
                const float gj = sG[j];
                upto += j <= t ? gj : 0.0f;
                total += gj;
            }
            sGam[t] = upto;
            sEg[t] = expf(upto);
            sD[t] = expf(total - upto);
        }
        __syncthreads();

        // ---- 1b: M = [L^T above the diagonal | P on and below it] ---------------------------
        // Entry (r, s) = a + 16 i, b + 16 j: r < s needs k_r . k_s (for L[s][r]); r >= s needs
        // q_r . k_s (for P[r][s]). i < j and i > j settle it; on i == j it depends on a < b,
        // so those four entries accumulate both products.
        {
            const int a = t >> 4;
            const int bb = t & 15;
            float acc[4][4], accd[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                accd[i] = 0.0f;
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
            }
            for (int chunk = 0; chunk < KCH; ++chunk) {
                uint4 xk[4], xq[4], y[4];
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    xk[i] = *reinterpret_cast<const uint4*>(sK + swz(a + 16 * i, chunk));
                    xq[i] = *reinterpret_cast<const uint4*>(sQ + swz(a + 16 * i, chunk));
                    y[i] = *reinterpret_cast<const uint4*>(sK + swz(bb + 16 * i, chunk));
                }
                float fk[4][8], fq[4][8], fy[4][8];
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    widen8(xk[i], fk[i]);
                    widen8(xq[i], fq[i]);
                    widen8(y[i], fy[i]);
                }
#pragma unroll
                for (int e = 0; e < 8; ++e) {
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
#pragma unroll
                        for (int j = 0; j < 4; ++j) {
                            if (i < j) {
                                acc[i][j] += fk[i][e] * fy[j][e];
                            } else if (i > j) {
                                acc[i][j] += fq[i][e] * fy[j][e];
                            } else {
                                acc[i][i] += fq[i][e] * fy[i][e];
                                accd[i] += fk[i][e] * fy[i][e];
                            }
                        }
                    }
                }
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) {
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const int r = a + 16 * i;
                    const int s = bb + 16 * j;
                    float val;
                    if (r < s) {  // L[s][r] = beta_s (k_s . k_r) exp(gamma_s - gamma_r)
                        const float dot = i == j ? accd[i] : acc[i][j];
                        val = sB[s] * dot * expf(sGam[s] - sGam[r]);
                    } else {      // P[r][s] = scale (q_r . k_s) exp(gamma_r - gamma_s)
                        val = scale * acc[i][j] * expf(sGam[r] - sGam[s]);
                    }
                    sM[r * C + s] = val;
                }
            }
        }
        __syncthreads();  // Q is dead: R goes over it

        // ---- 1c: R = beta (v - exp(gamma) S_K) ------------------------------------------------
#pragma unroll
        for (int i = 0; i < RI; ++i) {
            const int row = rg * RI + i;
            const float eg = sEg[row];
            const float bt = sB[row];
            float4 r;
            r.x = bt * (bf16_lo(vraw[i].x) - eg * sk[i][0]);
            r.y = bt * (bf16_hi(vraw[i].x) - eg * sk[i][1]);
            r.z = bt * (bf16_lo(vraw[i].y) - eg * sk[i][2]);
            r.w = bt * (bf16_hi(vraw[i].y) - eg * sk[i][3]);
            *reinterpret_cast<float4*>(sR + row * BV + cg * 4) = r;
        }
        __syncthreads();

        // ---- 2: (I + L) Vn = R by blocked forward substitution --------------------------------
        // Diagonal blocks of SB rows: one thread per V column solves the block in registers
        // (right-looking: once x[j] is final it is subtracted from the later rows), then all
        // threads subtract the block's contribution from the rows below it. L[i][j] is M[j][i].
        for (int base = 0; base < C; base += SB) {
            if (t < BV) {
                float x[SB];
#pragma unroll
                for (int i = 0; i < SB; ++i) x[i] = sR[(base + i) * BV + t];
#pragma unroll
                for (int j = 0; j < SB - 1; ++j) {
#pragma unroll
                    for (int i = j + 1; i < SB; ++i) x[i] -= sM[(base + j) * C + base + i] * x[j];
                }
#pragma unroll
                for (int i = 0; i < SB; ++i) sR[(base + i) * BV + t] = x[i];
            }
            __syncthreads();
            const int below = (C - base - SB) * BV;
            for (int e = t; e < below; e += NT) {
                const int row = base + SB + e / BV;
                const int col = e % BV;
                float acc = sR[row * BV + col];
#pragma unroll
                for (int j = 0; j < SB; ++j) acc -= sM[(base + j) * C + row] * sR[(base + j) * BV + col];
                sR[row * BV + col] = acc;
            }
            if (below > 0) __syncthreads();
        }

        // ---- 2: O = scale exp(gamma) S_Q + P Vn ----------------------------------------------
        {
            float out[RI][4];
#pragma unroll
            for (int i = 0; i < RI; ++i) {
                const float f = scale * sEg[rg * RI + i];
#pragma unroll
                for (int c = 0; c < 4; ++c) out[i][c] = f * sq[i][c];
            }
            const int last = rg * RI + RI - 1;
            for (int j = 0; j <= last; ++j) {
                const float4 vn = *reinterpret_cast<const float4*>(sR + j * BV + cg * 4);
#pragma unroll
                for (int i = 0; i < RI; ++i) {
                    const int row = rg * RI + i;
                    const float p = j <= row ? sM[row * C + j] : 0.0f;
                    out[i][0] += p * vn.x;
                    out[i][1] += p * vn.y;
                    out[i][2] += p * vn.z;
                    out[i][3] += p * vn.w;
                }
            }
#pragma unroll
            for (int i = 0; i < RI; ++i) {
                const int tok = t0 + rg * RI + i;
                if (tok < T) {
                    uint2 packed;
                    packed.x = bf16_bits(out[i][0]) | (bf16_bits(out[i][1]) << 16);
                    packed.y = bf16_bits(out[i][2]) | (bf16_bits(out[i][3]) << 16);
                    const int64_t off = ((static_cast<int64_t>(b) * T + tok) * HV + hv) * DV;
                    *reinterpret_cast<uint2*>(o + off + v0 + cg * 4) = packed;
                }
            }
        }

        // ---- 2: h' = exp(gamma_C) h + (K exp(gamma_C - gamma))^T Vn ---------------------------
        {
            const float ec = sEg[C - 1];
#pragma unroll
            for (int i = 0; i < RH; ++i) {
                hreg[i].x *= ec;
                hreg[i].y *= ec;
                hreg[i].z *= ec;
                hreg[i].w *= ec;
            }
            const int r0 = rg * RH;  // RH consecutive rows inside one 16-byte chunk
#pragma unroll 4
            for (int j = 0; j < C; ++j) {
                const float d = sD[j];
                float4 vn = *reinterpret_cast<const float4*>(sR + j * BV + cg * 4);
                vn.x *= d;
                vn.y *= d;
                vn.z *= d;
                vn.w *= d;
                const uint16_t* krow = sK + swz(j, r0 >> 3) + (r0 & 7);
#pragma unroll
                for (int i = 0; i < RH; i += 2) {
                    const uint32_t w = *reinterpret_cast<const uint32_t*>(krow + i);
                    const float k0 = bf16_lo(w);
                    const float k1 = bf16_hi(w);
                    hreg[i].x += k0 * vn.x;
                    hreg[i].y += k0 * vn.y;
                    hreg[i].z += k0 * vn.z;
                    hreg[i].w += k0 * vn.w;
                    hreg[i + 1].x += k1 * vn.x;
                    hreg[i + 1].y += k1 * vn.y;
                    hreg[i + 1].z += k1 * vn.z;
                    hreg[i + 1].w += k1 * vn.w;
                }
            }
        }
        __syncthreads();  // every reader of M, the small arrays, K and Vn is done
#pragma unroll
        for (int i = 0; i < RH; ++i) {
            *reinterpret_cast<float4*>(sH + (rg * RH + i) * BV + cg * 4) = hreg[i];
        }
    }

    float* dst = ht + (bh * DK + rg * RH) * DV + v0 + cg * 4;
#pragma unroll
    for (int i = 0; i < RH; ++i) *reinterpret_cast<float4*>(dst + i * DV) = hreg[i];
}

// q, k [B, T, H, 128] bf16; v [B, T, HV, 128] bf16; g, beta [B, T, HV] fp32;
// h0 [B, HV, 128, 128] fp32 (read only); o [B, T, HV, 128] bf16; ht like h0 (the final state).
extern "C" hipError_t gdn_chunk_fwd(const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                    const float* g, const float* beta, const float* h0,
                                    uint16_t* o, float* ht, int B, int T, int H, int HV,
                                    hipStream_t stream) {
    if (B <= 0 || T < 0 || H <= 0 || HV <= 0 || HV % H != 0) return hipErrorInvalidValue;
    const dim3 grid(DV / BV, HV, B);
#if defined(__HIP_PLATFORM_AMD__)
    hipLaunchKernelGGL(gdn_chunk_kernel, grid, dim3(NT), 0, stream, q, k, v, g, beta, h0, o, ht,
                       T, H, HV);
#else
    const hipError_t err = hipFuncSetAttribute(reinterpret_cast<const void*>(gdn_chunk_kernel),
                                               hipFuncAttributeMaxDynamicSharedMemorySize,
                                               SMEM_BYTES);
    if (err != hipSuccess) return err;
    hipLaunchKernelGGL(gdn_chunk_kernel, grid, dim3(NT), SMEM_BYTES, stream, q, k, v, g, beta,
                       h0, o, ht, T, H, HV);
#endif
    return hipGetLastError();
}
