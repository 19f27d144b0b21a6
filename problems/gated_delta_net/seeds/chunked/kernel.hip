// Gated DeltaNet prefill (FLA's chunk_gated_delta_rule, forward), two code paths:
// - NVIDIA sm_80+ with MATRIX_CORES 1: two kernels on tensor cores (mma.sync), described at
//   gdn_tc_prep and gdn_tc_scan below;
// - everywhere else (AMD included), and with MATRIX_CORES 0: one fused chunked kernel in fp32,
//   described here. On AMD with MATRIX_CORES 1 its K K^T and Q K^T (bf16 inputs), and with
//   AMD_STATE_BF16 1 or 2 its K h, Q h and state update K^T (e^(gamma_C - gamma) Vn) (the fp32
//   operands as one or two bf16 terms, the state in MFMA accumulators), run on MFMA through the
//   tile layer (hipevolve/tile.h); the solve and P Vn stay fp32 vector code. The NVIDIA code
//   keeps its own mma.sync kernels below, unchanged.
// - both platforms, for long sequences with few heads: context parallelism (gdn_cp_fwd, chosen
//   at each launch by cp_launch_choice with the device's SM count): segments of a sequence side by side, their initial states made
//   exact by a serial fp32 fixup of the segments' state maps (the comment above gdn_cp_plan).
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
// Packed sequences (FLA's varlen input, gdn_chunk_fwd_varlen): cu_seqlens [N + 1] on the device
// marks N sequences in one token axis (B = 1). Every kernel reads its sequence's start and
// length there (seq_of) where a batch row has b * T and T: a block per (slice, head, sequence)
// in the fused kernel and the scan, chunks cut at sequence ends, one state per sequence. The
// tensor-core prep runs one block per workspace slot of a head (tc_slot: T / C + N per head)
// and finds its sequence by binary search; a slot no chunk lands on leaves at once.
//
// Tunable parameters: a comment `// @tunable NAME: v1, v2, ...` lists the values the `#define NAME`
// right after it may take; the #define holds the current choice.
#include <hip/hip_runtime.h>
#include <cstdint>

// Matrix cores (1): tensor cores on NVIDIA sm_80+ (the two kernels below), MFMA inside the fused
// kernel on AMD; or the portable fused kernel in fp32 vector code on every GPU (0).
// @tunable MATRIX_CORES: 0, 1
#define MATRIX_CORES 1

#if defined(__HIP_PLATFORM_AMD__) && MATRIX_CORES
#include <hipevolve/tile.h>
#define AMD_MFMA 1
#else
#define AMD_MFMA 0
#endif

// AMD MFMA path: the reduction step of every MFMA product, the bf16 tiles a wave holds at once
// (more: fewer LDS round trips between matrix instructions, more registers; at 32 the default
// path needs 256 VGPRs on gfx942 and spills 4 registers on gfx90a, at 16 it needs 207).
// @tunable MFMA_KSTEP: 16, 32, 64
#define MFMA_KSTEP 16

// AMD MFMA path: K h, Q h and the state update on MFMA too, their fp32 operands (the state, and
// e^(gamma_C - gamma) Vn) rounded to bf16 (1, the operand precision of the NVIDIA tensor-core
// path) or split into two bf16 terms (2: hi + lo, about 16 bits of mantissa, twice the MFMA
// work); or in fp32 vector code (0). The state itself stays fp32 (in MFMA accumulators).
// On CPU threads with MFMA emulated (tests/test_gdn_amd_matrix_cores.py), relative RMS errors
// on o and the state: 0: 2.4e-5, 2.2e-7; 2: 5.1e-5, 2.5e-6; 1: 2.4e-3, 1.7e-3. Not yet timed on
// an AMD GPU; 2 is the default as it moves the most work onto MFMA at near-fp32 error.
// @tunable AMD_STATE_BF16: 0, 1, 2
#define AMD_STATE_BF16 2
#define AMD_MFMA_STATE (AMD_MFMA && AMD_STATE_BF16)

// U = A (V beta) in the tensor-core workspace: fp32 (0) or bf16 (1, as FLA stores it). On an
// H200, bf16 took the prep kernel from 110 to 99 us (qwen_tp1_short) and from 803 to 726 us
// (long_32), and raised the relative RMS error from 2.9e-3 to 3.4e-3 on o and from 1.7e-3 to
// 2.4e-3 on the state, still under FLA's own (3.8e-3 and 3.0e-3) and the task's 5e-3.
// @tunable U_BF16: 0, 1
#define U_BF16 1

// V columns per block of the tensor-core scan kernel: 32 or 64, or 0 to choose by the GPU's
// SM count at launch (gdn_tc_fwd says how).
// @tunable TC_BV: 0, 32, 64
#define TC_BV 0

// Pipeline stages of the tensor-core scan's 32-column slices: 3 (the next two chunks' loads in
// flight) where the device's shared memory per block allows (H100 / H200: 227 KB), else 2; or
// always 2 (one chunk ahead, a third less shared memory). 64-column slices always take 2.
// @tunable TC_STAGES: 2, 3
#define TC_STAGES 3

// V columns each warp of the tensor-core scan owns: 32 (4 warps per 32-column slice) or 16
// (8 warps: half the chain of mma.sync per warp and two warps per SM sub-partition to hide each
// other's latency, at the price of loading the W, Q and K fragments twice). The scan's shared
// memory holds it to one block per SM, so its warps are all the SM has.
// @tunable TC_WCOLS: 16, 32
#define TC_WCOLS 32

// The tensor-core scan's state: in shared memory between the chunk's products (gdn_tc_scan,
// TC_WCOLS columns a warp), or in registers, transposed, as the A operand of the next product
// (gdn_tc_scan_rs: 16 columns a warp, one barrier a chunk). 0: always shared; 1: registers for
// 64-column slices (4 warps a block), shared for 32-column ones; 2: registers always. H200, graph
// mode, kernel times (bench/gdn_kernels.py): 64 columns 164 against 174 us (qwen35_tp8_32k's CP
// main pass) and 182 against 218 (its summary); 32 columns, where registers leave 2 warps a
// block, 1103 against 969 us (long_32). gdn_tc_scan_rs reads U by ldmatrix, so with U_BF16 0 the
// scan is gdn_tc_scan whatever TC_RS says.
// @tunable TC_RS: 0, 1, 2
#define TC_RS 1
// The register scans the launcher can take, the only ones compiled: 64-column slices unless
// TC_BV is 32, 32-column ones with TC_RS 2 unless TC_BV is 64.
#define TC_RS_WIDE (TC_RS && U_BF16 && TC_BV != 32)
#define TC_RS_NARROW (TC_RS == 2 && U_BF16 && TC_BV != 64)
#define TC_RS_SCAN (TC_RS_WIDE || TC_RS_NARROW)

// Block order of the tensor-core prep: runs of TC_PREP_RUN consecutive chunks of one head, heads
// varying faster than the runs (gdn_tc_prep says why; 1: every head's chunk n before chunk n + 1).
// @tunable TC_PREP_RUN: 1, 4, 8, 32
#define TC_PREP_RUN 8

// The tensor-core prep's A = (I + L)^-1: fp32 forward substitution, 16 rows at a time (0), or
// the 16 x 16 diagonal blocks inverted side by side and the rest by split-bf16 tensor-core
// products (1, tc_solve_blocks). 1 is untimed: 0 stays the default until a bench shows 1 faster.
// @tunable TC_SOLVE: 0, 1
#define TC_SOLVE 0

// V columns per block. Smaller slices give more blocks (B * HV * 128 / BV) when B * HV is small;
// larger ones repeat less of the V-independent work (K K^T, Q K^T, K h). BV = 64 uses exactly
// the 64 KB of LDS a gfx942 workgroup can have.
// @tunable BV: 16, 32, 64
#define BV 32
// The fused kernel's V slice: BV, but 32 in the NVIDIA tensor-core build, whose fused kernel is a
// fallback sm_90 never takes (so BV is inert there: evolution/offline/inert.py).
#if defined(__HIP_PLATFORM_NVIDIA__) && MATRIX_CORES
constexpr int FBV = 32;
#else
constexpr int FBV = BV;
#endif

constexpr int C = 64;     // chunk length
constexpr int DK = 128;   // key dimension
constexpr int DV = 128;   // value dimension
constexpr int NT = 256;   // threads per block
constexpr int CG = FBV / 4;      // column groups (4 columns, one float4) across the slice
constexpr int RG = NT / CG;      // row groups
constexpr int RI = C / RG;       // chunk rows per thread in S_K, S_Q, R, O
constexpr int RH = DK / RG;      // state rows per thread
constexpr int KCH = DK / 8;      // 16-byte chunks in a bf16 row of K or Q
constexpr int SB = 16;           // rows per diagonal block of the triangular solve

static_assert(FBV == 16 || FBV == 32 || FBV == 64, "BV must be 16, 32 or 64");
static_assert(RI >= 1 && RH % 2 == 0 && NT == 256 && C == 64, "the thread maps assume these");

constexpr int cmax(int a, int b) { return a > b ? a : b; }
constexpr int TILE_BYTES = C * DK * 2;
constexpr int QR_BYTES = cmax(TILE_BYTES, C * FBV * 4);
constexpr int M_BYTES = C * C * 4;
constexpr int SMALL_FLOATS = 5 * C;  // g, beta, gamma, exp(gamma), exp(gamma_C - gamma)
constexpr int MH_BYTES = cmax(M_BYTES + SMALL_FLOATS * 4, DK * FBV * 4);
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

// One sequence: tokens bos .. bos + len - 1 of the token axis. Batch row b of T tokens, or
// packed sequence b (FLA's varlen input: cu_seqlens [N + 1] int64, B = 1, T the packed length).
struct Seq {
    int64_t bos;
    int len;
};

__device__ __forceinline__ Seq seq_of(const int64_t* cu_seqlens, int b, int T) {
    if (cu_seqlens == nullptr) return {static_cast<int64_t>(b) * T, T};
    const int64_t bos = cu_seqlens[b];
    return {bos, static_cast<int>(cu_seqlens[b + 1] - bos)};
}

// What a chunk-loop kernel (the fused kernel, the tensor-core scan) computes, for context
// parallelism (CP, gdn_cp_fwd below says how the three fit together):
// - GDN_PLAIN: o and the final state of every sequence from its initial state (the default);
// - GDN_SUMMARY: no o; the segment's state map S_out = M S_in + c: twice the V slices, the first
//   half from a zero state with the real v (c), the second from the identity with v = 0 (M, as
//   the state from I is M I); both into cm [S, HV, 128, 256] (c | M, fp32). Segments that end
//   their sequence (out_row >= 0) and empty ones leave at once. The tensor-core scan tells the
//   halves apart at run time; the fused kernel runs each half as its own kernel and launch,
//   GDN_SUM_C (c) and GDN_SUM_M (M): on gfx942 at MFMA_KSTEP 32 a run-time slice flag cost 4
//   SGPR spills, and both halves as compile-time branches of one kernel 8 (each alone: none).
// CP's main pass is GDN_PLAIN over the segments (every segment's final state stored, the ones
// that end a sequence then copied out by gdn_cp_final).
enum { GDN_PLAIN = 0, GDN_SUM_C = 1, GDN_SUM_M = 2, GDN_SUMMARY = 3 };

constexpr bool is_summary(int mode) { return mode != GDN_PLAIN; }

// The initial state's entry (row, col) of this block: h0's, or in a summary 0 (c) / I (M); msl:
// the block computes a slice of M (GDN_SUMMARY only).
template <int MODE>
__device__ __forceinline__ float h0_at(const float* h0, int64_t bh, int row, int col, bool msl) {
    if constexpr (MODE == GDN_SUMMARY) return msl && row == col ? 1.0f : 0.0f;
    if constexpr (MODE == GDN_SUM_C) return 0.0f;
    if constexpr (MODE == GDN_SUM_M) return row == col ? 1.0f : 0.0f;
    return h0[(bh * DK + row) * DV + col];
}

// Where this block's final state goes: row 0, column 0 of its (sequence, head) in ht (cm in a
// summary, whose rows are 2 DV wide: c, then M).
template <int MODE>
__device__ __forceinline__ float* state_out(float* ht, int64_t bh, bool msl) {
    if constexpr (MODE == GDN_SUMMARY) return ht + bh * DK * (2 * DV) + (msl ? DV : 0);
    if constexpr (MODE == GDN_SUM_C) return ht + bh * DK * (2 * DV);
    if constexpr (MODE == GDN_SUM_M) return ht + bh * DK * (2 * DV) + DV;
    return ht + bh * DK * DV;
}
template <int MODE>
constexpr int STATE_LD = is_summary(MODE) ? 2 * DV : DV;  // row stride of state_out

// One block of the fused kernel in body mode MODE (GDN_PLAIN, GDN_SUM_C or GDN_SUM_M): V slice
// `slice` of value head blockIdx.y of sequence blockIdx.z, LDS at smem (gdn_chunk_kernel's).
template <int MODE>
__device__ __forceinline__ void gdn_chunk_body(
    unsigned char* smem, const uint16_t* __restrict__ q, const uint16_t* __restrict__ k,
    const uint16_t* __restrict__ v, const float* __restrict__ g,
    const float* __restrict__ beta, const float* __restrict__ h0,
    uint16_t* __restrict__ o, float* __restrict__ ht, const int64_t* __restrict__ cu_seqlens,
    int slice, int T, int H, int HV) {
    static_assert(MODE == GDN_PLAIN || MODE == GDN_SUM_C || MODE == GDN_SUM_M, "a body mode");
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
    constexpr bool msl = false;         // (h0_at's and state_out's run-time flag: unused here)
    constexpr bool zero_v = MODE == GDN_SUM_M;  // M: from I with v = 0
    constexpr bool no_o = is_summary(MODE);
    const int v0 = slice * FBV;
    const int hv = blockIdx.y;
    const int b = blockIdx.z;
    const int hk = hv / (HV / H);
    const float scale = 1.0f / sqrtf(static_cast<float>(DK));
    const int64_t bh = static_cast<int64_t>(b) * HV + hv;
    const Seq seq = seq_of(cu_seqlens, b, T);  // its tokens: seq.bos .. seq.bos + seq.len - 1

#if AMD_MFMA_STATE
    // The state slice in MFMA accumulators: wave w updates rows 32 w .. 32 w + 31.
    const int hrow = t / hvt::Atom::LANES * (DK / 4);
    hvt::TileC<DK / 4, FBV> hs;
    hvt::each(hs, [&](int r, int c, float& x) {
        x = h0_at<MODE>(h0, bh, hrow + r, v0 + c, msl);
        sH[(hrow + r) * FBV + c] = x;
    });
#else
    // The state tile this thread updates: rows rg * RH + i, columns v0 + cg * 4 .. + 3.
    float4 hreg[RH];
    {
#pragma unroll
        for (int i = 0; i < RH; ++i) {
            const int row = rg * RH + i, col = v0 + cg * 4;
            if constexpr (is_summary(MODE)) {
                hreg[i].x = h0_at<MODE>(h0, bh, row, col, msl);
                hreg[i].y = h0_at<MODE>(h0, bh, row, col + 1, msl);
                hreg[i].z = h0_at<MODE>(h0, bh, row, col + 2, msl);
                hreg[i].w = h0_at<MODE>(h0, bh, row, col + 3, msl);
            } else {
                hreg[i] = *reinterpret_cast<const float4*>(h0 + (bh * DK + row) * DV + col);
            }
            *reinterpret_cast<float4*>(sH + (rg * RH + i) * FBV + cg * 4) = hreg[i];
        }
    }
#endif

    const int chunks = (seq.len + C - 1) / C;
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
            if (t0 + row < seq.len) {
                const int64_t off = ((seq.bos + t0 + row) * H + hk) * DK;
                kw = *reinterpret_cast<const uint4*>(k + off + chunk * 8);
                qw = *reinterpret_cast<const uint4*>(q + off + chunk * 8);
            }
            *reinterpret_cast<uint4*>(sK + swz(row, chunk)) = kw;
            *reinterpret_cast<uint4*>(sQ + swz(row, chunk)) = qw;
        }
#if !AMD_MFMA_STATE
        uint2 vraw[RI];
#pragma unroll
        for (int i = 0; i < RI; ++i) {
            const int tok = t0 + rg * RI + i;
            vraw[i] = make_uint2(0u, 0u);
            if (tok < seq.len && !zero_v) {
                const int64_t off = ((seq.bos + tok) * HV + hv) * DV;
                vraw[i] = *reinterpret_cast<const uint2*>(v + off + v0 + cg * 4);
            }
        }
#endif
        float g_t = 0.0f, beta_t = 0.0f;
        if (t < C && t0 + t < seq.len) {
            const int64_t off = (seq.bos + t0 + t) * HV + hv;
            g_t = g[off];
            beta_t = beta[off];
        }
        __syncthreads();

        // ---- 1a: S_K = K h and S_Q = Q h, RI rows x 4 columns per thread --------------------
#if AMD_MFMA_STATE
        // MFMA: wave w owns rows 16 w .. 16 w + 15 of S_K and S_Q (fragments stay in registers
        // until R and O are formed from them), h as one or two bf16 terms as it is read.
        const int wrow = t / hvt::Atom::LANES * 16;
        hvt::TileC<16, FBV> skt, sqt;
        hvt::zero(skt);
        hvt::zero(sqt);
#pragma unroll 1
        for (int d0 = 0; d0 < DK; d0 += MFMA_KSTEP) {
            hvt::TileA<16, MFMA_KSTEP> ak, aq;
            hvt::TileB<MFMA_KSTEP, FBV> bst;  // the state, B[d][c] = h[d0 + d][c]
            hvt::load_a(ak, [&](int r, int d) { return sK[swz(wrow + r, (d0 + d) >> 3) + (d & 7)]; });
            hvt::load_a(aq, [&](int r, int d) { return sQ[swz(wrow + r, (d0 + d) >> 3) + (d & 7)]; });
            hvt::load_b(bst, [&](int d, int c) { return static_cast<uint16_t>(bf16_bits(sH[(d0 + d) * FBV + c])); });
            hvt::mma(skt, ak, bst);
            hvt::mma(sqt, aq, bst);
#if AMD_STATE_BF16 == 2
            hvt::load_b(bst, [&](int d, int c) {  // the remainder h - bf16(h), in bf16
                const float x = sH[(d0 + d) * FBV + c];
                return static_cast<uint16_t>(bf16_bits(x - __uint_as_float(bf16_bits(x) << 16)));
            });
            hvt::mma(skt, ak, bst);
            hvt::mma(sqt, aq, bst);
#endif
        }
#else
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
                const float4 hh = *reinterpret_cast<const float4*>(sH + (chunk * 8 + e) * FBV + cg * 4);
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
#endif
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
#if AMD_MFMA
        // MFMA: wave w owns rows 16 w .. 16 w + 15 of K K^T and Q K^T (bf16 in, fp32 sums, as
        // the vector path), in MFMA_KSTEP-wide steps of the key dimension.
        {
            static_assert(NT == 4 * hvt::Atom::LANES, "one wave per 16 rows of the chunk");
            const int w16 = t / hvt::Atom::LANES * 16;
            hvt::TileC<16, C> kk, qk;
            hvt::zero(kk);
            hvt::zero(qk);
#pragma unroll 1
            for (int d0 = 0; d0 < DK; d0 += MFMA_KSTEP) {
                hvt::TileA<16, MFMA_KSTEP> ak, aq;
                hvt::TileB<MFMA_KSTEP, C> bk;  // K^T: B[d][s] = k_s[d0 + d]
                hvt::load_a(ak, [&](int r, int d) { return sK[swz(w16 + r, (d0 + d) >> 3) + (d & 7)]; });
                hvt::load_a(aq, [&](int r, int d) { return sQ[swz(w16 + r, (d0 + d) >> 3) + (d & 7)]; });
                hvt::load_b(bk, [&](int d, int s) { return sK[swz(s, (d0 + d) >> 3) + (d & 7)]; });
                hvt::mma(kk, ak, bk);
                hvt::mma(qk, aq, bk);
            }
            hvt::each(qk, [&](int r, int s, float& p) { sM[(w16 + r) * C + s] = p; });
            hvt::each(kk, [&](int r, int s, float& dot) {
                const int row = w16 + r;
                const float pq = sM[row * C + s];
                sM[row * C + s] = row < s ? sB[s] * dot * expf(sGam[s] - sGam[row])
                                          : scale * pq * expf(sGam[row] - sGam[s]);
            });
        }
#else
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
#endif
        __syncthreads();  // Q is dead: R goes over it

        // ---- 1c: R = beta (v - exp(gamma) S_K) ------------------------------------------------
#if AMD_MFMA_STATE
        hvt::each(skt, [&](int r, int c, float& x) {
            const int row = wrow + r;
            float vv = 0.0f;  // rows past T: v = 0 (and beta = 0); M's slices of a summary too
            if (t0 + row < seq.len && !zero_v) {
                const int64_t off = ((seq.bos + t0 + row) * HV + hv) * DV;
                vv = bf16_lo(v[off + v0 + c]);
            }
            sR[row * FBV + c] = sB[row] * (vv - sEg[row] * x);
        });
#else
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
            *reinterpret_cast<float4*>(sR + row * FBV + cg * 4) = r;
        }
#endif
        __syncthreads();

        // ---- 2: (I + L) Vn = R by blocked forward substitution --------------------------------
        // Diagonal blocks of SB rows: one thread per V column solves the block in registers
        // (right-looking: once x[j] is final it is subtracted from the later rows), then all
        // threads subtract the block's contribution from the rows below it. L[i][j] is M[j][i].
        for (int base = 0; base < C; base += SB) {
            if (t < FBV) {
                float x[SB];
#pragma unroll
                for (int i = 0; i < SB; ++i) x[i] = sR[(base + i) * FBV + t];
#pragma unroll
                for (int j = 0; j < SB - 1; ++j) {
#pragma unroll
                    for (int i = j + 1; i < SB; ++i) x[i] -= sM[(base + j) * C + base + i] * x[j];
                }
#pragma unroll
                for (int i = 0; i < SB; ++i) sR[(base + i) * FBV + t] = x[i];
            }
            __syncthreads();
            const int below = (C - base - SB) * FBV;
            for (int e = t; e < below; e += NT) {
                const int row = base + SB + e / FBV;
                const int col = e % FBV;
                float acc = sR[row * FBV + col];
#pragma unroll
                for (int j = 0; j < SB; ++j) acc -= sM[(base + j) * C + row] * sR[(base + j) * FBV + col];
                sR[row * FBV + col] = acc;
            }
            if (below > 0) __syncthreads();
        }

        // ---- 2: O = scale exp(gamma) S_Q + P Vn ----------------------------------------------
#if AMD_MFMA_STATE
        hvt::each(sqt, [&](int r, int c, float& x) {
            const int row = wrow + r;
            float out = scale * sEg[row] * x;
            for (int j = 0; j <= row; ++j) out += sM[row * C + j] * sR[j * FBV + c];
            if (!no_o && t0 + row < seq.len) {
                const int64_t off = ((seq.bos + t0 + row) * HV + hv) * DV;
                o[off + v0 + c] = static_cast<uint16_t>(bf16_bits(out));
            }
        });
#else
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
                const float4 vn = *reinterpret_cast<const float4*>(sR + j * FBV + cg * 4);
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
                if (!no_o && tok < seq.len) {
                    uint2 packed;
                    packed.x = bf16_bits(out[i][0]) | (bf16_bits(out[i][1]) << 16);
                    packed.y = bf16_bits(out[i][2]) | (bf16_bits(out[i][3]) << 16);
                    const int64_t off = ((seq.bos + tok) * HV + hv) * DV;
                    *reinterpret_cast<uint2*>(o + off + v0 + cg * 4) = packed;
                }
            }
        }
#endif

        // ---- 2: h' = exp(gamma_C) h + (K exp(gamma_C - gamma))^T Vn ---------------------------
#if AMD_MFMA_STATE
        {
            // MFMA: A = K^T (this wave's 32 key rows), B = e^(gamma_C - gamma) Vn as one or two
            // bf16 terms, accumulated onto the decayed state in place.
            const float ec = sEg[C - 1];
            hvt::each(hs, [&](int, int, float& x) { x *= ec; });
#pragma unroll 1
            for (int j0 = 0; j0 < C; j0 += MFMA_KSTEP) {
                hvt::TileA<DK / 4, MFMA_KSTEP> akt;
                hvt::TileB<MFMA_KSTEP, FBV> bvn;
                hvt::load_a(akt, [&](int d, int j) {
                    return sK[swz(j0 + j, (hrow + d) >> 3) + ((hrow + d) & 7)];
                });
                hvt::load_b(bvn, [&](int j, int c) {
                    return static_cast<uint16_t>(bf16_bits(sD[j0 + j] * sR[(j0 + j) * FBV + c]));
                });
                hvt::mma(hs, akt, bvn);
#if AMD_STATE_BF16 == 2
                hvt::load_b(bvn, [&](int j, int c) {  // the remainder, in bf16
                    const float x = sD[j0 + j] * sR[(j0 + j) * FBV + c];
                    return static_cast<uint16_t>(bf16_bits(x - __uint_as_float(bf16_bits(x) << 16)));
                });
                hvt::mma(hs, akt, bvn);
#endif
            }
        }
        __syncthreads();  // every reader of M, the small arrays, K and Vn is done
        hvt::each(hs, [&](int r, int c, float& x) { sH[(hrow + r) * FBV + c] = x; });
#else
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
                float4 vn = *reinterpret_cast<const float4*>(sR + j * FBV + cg * 4);
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
            *reinterpret_cast<float4*>(sH + (rg * RH + i) * FBV + cg * 4) = hreg[i];
        }
#endif
    }

    float* out = state_out<MODE>(ht, bh, msl);
    constexpr int LD = STATE_LD<MODE>;
#if AMD_MFMA_STATE
    hvt::each(hs, [&](int r, int c, float& x) { out[(hrow + r) * LD + v0 + c] = x; });
#else
    float* dst = out + rg * RH * LD + v0 + cg * 4;
#pragma unroll
    for (int i = 0; i < RH; ++i) *reinterpret_cast<float4*>(dst + i * LD) = hreg[i];
#endif
}

// The fused kernel, grid DV / BV slices x HV x sequences: MODE GDN_PLAIN, GDN_SUM_C or GDN_SUM_M
// (the summary's two halves; out_row, read only by them, skips segments that end their sequence).
template <int MODE>
__global__ void __launch_bounds__(NT) gdn_chunk_kernel(
    const uint16_t* __restrict__ q, const uint16_t* __restrict__ k,
    const uint16_t* __restrict__ v, const float* __restrict__ g,
    const float* __restrict__ beta, const float* __restrict__ h0,
    uint16_t* __restrict__ o, float* __restrict__ ht, const int64_t* __restrict__ cu_seqlens,
    const int* __restrict__ out_row, int T, int H, int HV) {
#if defined(__HIP_PLATFORM_AMD__)
    // Static on AMD, so the static analysis reports the LDS this kernel uses.
    __shared__ float4 smem4[SMEM_BYTES / 16];
#else
    // Over 48 KB: NVIDIA needs dynamic shared memory (the launcher raises the limit).
    HIP_DYNAMIC_SHARED(float4, smem4)
#endif
    unsigned char* smem = reinterpret_cast<unsigned char*>(smem4);
    if constexpr (is_summary(MODE)) {
        const int b = blockIdx.z;
        if (out_row[b] >= 0 || seq_of(cu_seqlens, b, T).len == 0) return;  // no map needed
    }
    gdn_chunk_body<MODE>(smem, q, k, v, g, beta, h0, o, ht, cu_seqlens, blockIdx.x, T, H, HV);
}

#if defined(__HIP_PLATFORM_NVIDIA__) && MATRIX_CORES
// ============================================================================================
// NVIDIA tensor cores (sm_80+): two kernels and a workspace.
//
// gdn_tc_prep: one block per (chunk, value head, batch), all in parallel (block order at
//   TC_PREP_RUN), four blocks per SM. gamma; K K^T and Q K^T by mma.sync (bf16 in, fp32 out);
//   A = (I + L)^-1 in L's place (TC_SOLVE: fp32 substitution, or 16 x 16 diagonal inverses
//   combined on tensor cores); W = A beta (e^gamma K) and U = A beta V by mma.sync, A beta in
//   bf16 for W and as two bf16 terms for U (hi + lo: about 16 bits of mantissa). Writes W
//   (bf16), U (fp32; bf16 with U_BF16), P = tril(scale Q K^T * Gamma) (bf16) and gamma to the
//   workspace.
// gdn_tc_scan: one block per (V slice of 32 or 64 columns, value head, batch) walks the chunks in
//   order: Vn = U - W h, O = scale e^gamma (Q h) + P Vn, h' = e^gamma_C h + K^T (e^(gamma_C -
//   gamma) Vn). The state h is fp32 in mma accumulators for the whole sequence; its bf16 copy
//   in shared memory is the B operand of W h and Q h. Per-chunk states never touch memory.
//   The next chunk's W, Q, K, P, U and gamma arrive by cp.async while this chunk computes.
// bf16 operands are FLA's choices (W, U, P, h and Vn in bf16, fp32 accumulation; U_BF16 0 keeps
// U in fp32): relative RMS errors of 3.4e-3 on o and 2.4e-3 on the state on every timed case on
// an H200 (FLA 0.6.0: 3.8e-3 and 3.0e-3), under the task's 5e-3.
//
// Speed on an H200 against FLA 0.6.0's chunk kernel (bench/gdn_vs_fla.py, the four timed cases,
// two runs): 1.10-1.46x eager; in CUDA graphs qwen_tp1_short 1.05-1.06x, qwen_tp1_batch 1.29,
// mha_16 1.15, long_32 1.08. What bounds it: the prep writes W, U and P
// (40 KB per chunk and value head), and every V slice of the scan reads W, Q, K, P and its U slice
// through L2 at every chunk (about 66 KB per block per step with 32-column slices); removing any
// one of these loads sped the scan up about in proportion to its bytes. Sharing the tiles among
// a head's slices by multicast bulk copies into a thread-block cluster (sm_90) was measured and
// is slower: 521 against 151 us on qwen_tp1_short with a bulk copy per row, 255 against 150
// with one per tile (the per-chunk cluster barrier and the copies' latency cost more than the
// L2 traffic they save).
// Where the buffers lie moves these kernels more than FLA's, so bench/gdn_placements.py times
// them in CUDA graphs over memory placements. Over 6 on an H200, medians (range), us:
//   qwen_tp1_short: FLA 255.6 (255.3-256.4); this prep order 250.8 (248.1-254.3), 1.019x; the
//     former order (chunks fastest) 256.7 (256.2-258.4), 0.996x;
//   mha_16 and long_32: this order 392.1 and 1839.1, the former 392.6 and 1846.3.
// The prep at four blocks per SM instead of three (53 KB of shared memory instead of 70: A over
// L, its bf16 tiles over A, U's second half over K; W's e^gamma moved onto K's rows), another
// H200, same bench: qwen_tp1_short 241.0 (240.2-242.0) against 253.9 (246.3-256.5) for three
// blocks and FLA's 255.5, 1.060x; mha_16 377.4 against 391.2 (FLA 436.6); long_32 1786.4
// against 1836.3 (FLA 1923.2). Errors unchanged (3.4e-3 on o, 2.4e-3 on the state). Dropping U's
// lo term as well (A in bf16 only, as FLA) gave 238.7 / 372.3 / 1763.0 at FLA's errors (3.8e-3,
// 2.9e-3): not kept, the margin to the task's 5e-3 is worth more than 1%.
// Measured there and not kept: starting the scan during the prep's last wave (programmatic
// dependent launch, a ready flag per chunk), 252.6 on qwen_tp1_short; a chunk-major workspace,
// 259.5 / 397.3 / 1856.7 on the three cases.
//
// mma.sync m16n8k16 fragments (PTX ISA), g = lane / 4, t = lane % 4: A holds rows g, g + 8 and
// columns 2t, 2t + 1 (+ 8); B holds rows 2t, 2t + 1 (+ 8) of column g; C holds rows g, g + 8
// and columns 2t, 2t + 1. ldmatrix .x4: lanes 8i .. 8i + 7 address the 8 rows of matrix i.
// Shared rows carry 16 bytes of padding, so the 8 rows of one ldmatrix fall on distinct banks.

constexpr int TC_LD = DK + 8;    // bf16 row stride of the 64 x 128 tiles
constexpr int TC_LDF = C + 4;    // fp32 row stride of the 64 x 64 tiles
constexpr int TC_TILE_BYTES = C * TC_LD * 2;
constexpr int TC_FSQUARE_BYTES = C * TC_LDF * 4;

// ---- PTX primitives: each wraps one instruction ---------------------------------------------
__device__ __forceinline__ uint32_t tc_smem(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void tc_mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                       uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <bool TRANS>
__device__ __forceinline__ void tc_ldsm4(uint32_t (&r)[4], const uint16_t* row) {
    if constexpr (TRANS) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(tc_smem(row)));
    } else {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(tc_smem(row)));
    }
}

// 16 bytes global -> shared without stalling; with inside false, 16 zero bytes (src-size 0).
__device__ __forceinline__ void tc_cp16(void* dst, const void* src, bool inside) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(tc_smem(dst)), "l"(src),
                 "r"(inside ? 16 : 0) : "memory");
}

__device__ __forceinline__ void tc_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

__device__ __forceinline__ void tc_wait_all() {
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

// Waits until at most `pending` of this thread's latest cp.async groups are still in flight.
template <int pending>
__device__ __forceinline__ void tc_wait_pending() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(pending) : "memory");
}

// Two floats -> two bf16 (round to nearest even) in one word, lo in the low half.
__device__ __forceinline__ uint32_t tc_pack(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
// e^x through ex2.approx of x log2 e (relative error 2^-22 plus that product's rounding, about
// |x| 2^-24; results below 2^-126 flush to 0, overflow gives inf as expf does).
__device__ __forceinline__ float tc_exp(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x * 1.4426950408889634f));
    return r;
}
// ---- end of PTX primitives ----------------------------------------------------------------

#if U_BF16
typedef uint16_t u_t;  // U in the workspace and in the scan's shared tiles
__device__ __forceinline__ void tc_store_u(u_t* p, float x0, float x1) {
    *reinterpret_cast<uint32_t*>(p) = tc_pack(x0, x1);
}
__device__ __forceinline__ float2 tc_load_u(const u_t* p) {
    const uint32_t w = *reinterpret_cast<const uint32_t*>(p);
    return make_float2(bf16_lo(w), bf16_hi(w));
}
#else
typedef float u_t;
__device__ __forceinline__ void tc_store_u(u_t* p, float x0, float x1) {
    *reinterpret_cast<float2*>(p) = make_float2(x0, x1);
}
__device__ __forceinline__ float2 tc_load_u(const u_t* p) {
    return *reinterpret_cast<const float2*>(p);
}
#endif
constexpr int U_PER_16B = 16 / static_cast<int>(sizeof(u_t));
// Workspace per (batch, value head, chunk), in four arrays: W, U, P, gamma.
constexpr int64_t WS_W = C * DK * 2, WS_U = C * DV * sizeof(u_t), WS_P = C * C * 2, WS_G = C * 4;

// ldmatrix.x4 row address of lane `lane` for a 16 x 16 tile at (r0, c0) of a row-major tile
// with row stride ld: matrices (rows 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15).
// Plain, that is an A fragment; .trans of a [k][n] tile, the B fragments of columns c0 and c0 + 8.
__device__ __forceinline__ const uint16_t* tc_at(const uint16_t* tile, int ld, int r0, int c0,
                                                 int lane) {
    return tile + (r0 + (lane & 15)) * ld + c0 + 8 * (lane >> 4);
}

// Matrices (rows 0-7, cols 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15): plain, the B fragments
// of rows r0 and r0 + 8 of an [n][k] tile; .trans, the A fragment of the transposed tile.
__device__ __forceinline__ const uint16_t* tc_at_t(const uint16_t* tile, int ld, int r0, int c0,
                                                   int lane) {
    return tile + (r0 + (lane & 7) + 8 * (lane >> 4)) * ld + c0 + 8 * ((lane >> 3) & 1);
}

// The same row address as tc_at, in the scan's 64 x 64 P tile: rows without padding, 16-byte
// chunk c of row r stored at chunk c ^ (r & 7), so the 8 rows of one matrix fall on distinct banks.
__device__ __forceinline__ const uint16_t* tc_p_at(const uint16_t* tile, int r0, int c0,
                                                   int lane) {
    const int row = r0 + (lane & 15), chunk = (c0 >> 3) + (lane >> 4);
    return tile + row * C + ((chunk ^ (row & 7)) << 3);
}

// ---- gdn_tc_prep ----------------------------------------------------------------------------
constexpr int TC_PREP_THREADS = 128;
// 53 KB, so four blocks share an SM (H100 / H200: 228 KB): Q's tile takes V once Q K^T is done;
// A takes L's place row block by row block as the solve goes, and A's bf16 tiles (64 x 64,
// XOR-swizzled, no padding) take its place once the solve is done; the staged outputs go over
// the dead K and V tiles.
constexpr int PREP_K = 0;
constexpr int PREP_QV = PREP_K + TC_TILE_BYTES;
constexpr int PREP_L = PREP_QV + TC_TILE_BYTES;
constexpr int PREP_AHI = PREP_L;
constexpr int PREP_ALO = PREP_AHI + C * C * 2;
constexpr int PREP_LD = PREP_L + TC_FSQUARE_BYTES;   // L's diagonal block being solved
constexpr int PREP_SMALL = PREP_LD + 16 * 16 * 4;    // g, beta, gamma, e^gamma
constexpr int PREP_BYTES = PREP_SMALL + 4 * C * 4;
static_assert(2 * C * C * 2 <= TC_FSQUARE_BYTES && PREP_BYTES <= 56 * 1024, "prep layout");

// Element (i, j) of a 64 x 64 bf16 tile without padding: 16-byte chunks XOR-swizzled by row, so
// the 8 rows of one ldmatrix fall on distinct banks.
__device__ __forceinline__ int tc_swz64(int i, int j) {
    return i * C + ((((j >> 3) ^ i) & 7) << 3) + (j & 7);
}

// Workspace slot of a sequence's chunk 0 for value head hv. Batch rows: NC slots per (row, head).
// Packed sequences: NC = T / C rounded up, plus N, slots per head, and sequence b's chunk n at
// slot bos / C + b + n: distinct for every (b, n), since a sequence's chunks span at most one
// more slot than its tokens' whole chunks.
__device__ __forceinline__ int64_t tc_slot(const int64_t* cu_seqlens, int b, int hv, int HV,
                                           int NC, int64_t bos) {
    if (cu_seqlens == nullptr) return (static_cast<int64_t>(b) * HV + hv) * NC;
    return static_cast<int64_t>(hv) * NC + bos / C + b;
}

// The prep block's chunk and its workspace slot. Batch rows: chunk n of row b, as given.
// Packed sequences (b = 0 from the grid, n a slot of head hv): b becomes the last sequence whose
// chunk 0 slot is at most n (those slots increase with the sequence), and n its chunk there;
// -1 when that sequence is shorter (the slot holds no chunk).
__device__ __forceinline__ int64_t tc_prep_chunk(const int64_t* cu_seqlens, int nseq, int HV,
                                                 int NC, int hv, int& b, int& n) {
    if (cu_seqlens == nullptr) return tc_slot(nullptr, b, hv, HV, NC, 0) + n;
    int lo = 0, hi = nseq - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (cu_seqlens[mid] / C + mid <= n) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    const int64_t bos = cu_seqlens[lo], first = bos / C + lo;
    const int chunk = n - static_cast<int>(first);
    if (static_cast<int64_t>(chunk) * C >= cu_seqlens[lo + 1] - bos) return -1;
    b = lo;
    n = chunk;
    return tc_slot(cu_seqlens, lo, hv, HV, NC, bos) + chunk;
}

// ---- the prep's solve: A = (I + L)^-1 in L's place (fp32, row stride TC_LDF) --------------
// TC_SOLVE 0. Blocked forward substitution on the identity, 16-row blocks: the block's right-hand
// side (identity rows minus the finished blocks' contribution, all threads), then its unit
// lower-triangular 16 x 16 solve (one thread per column). A is exactly zero above the diagonal.
// A's rows go over L's: a row block of L is dead once its right-hand side is formed, but for its
// diagonal block, which the solve reads from sLd.
__device__ __forceinline__ void tc_solve_substitution(float* sL, int tid) {
    float* sLd = sL + (PREP_LD - PREP_L) / 4;  // L's diagonal block being solved
    for (int bi = 0; bi < C / 16; ++bi) {
        for (int e = tid; e < 16 * 16; e += TC_PREP_THREADS) {
            sLd[e] = sL[(16 * bi + (e >> 4)) * TC_LDF + 16 * bi + (e & 15)];
        }
        {  // thread: rows r0, r0 + 1 and columns c0 .. c0 + 3; each 16-byte load of A feeds 8
           // FMAs, and 8 consecutive threads read 128 contiguous bytes (no bank conflict)
            const int r0 = 16 * bi + 2 * (tid >> 4), c0 = 4 * (tid & 15);
            float acc[2][4];
#pragma unroll
            for (int i = 0; i < 2; ++i) {
#pragma unroll
                for (int m = 0; m < 4; ++m) acc[i][m] = r0 + i == c0 + m ? 1.0f : 0.0f;
            }
            for (int j = 0; j < 16 * bi; j += 4) {
                const float4 l0 = *reinterpret_cast<const float4*>(sL + r0 * TC_LDF + j);
                const float4 l1 = *reinterpret_cast<const float4*>(sL + (r0 + 1) * TC_LDF + j);
                const float lj[2][4] = {{l0.x, l0.y, l0.z, l0.w}, {l1.x, l1.y, l1.z, l1.w}};
#pragma unroll
                for (int u = 0; u < 4; ++u) {
                    const float4 x = *reinterpret_cast<const float4*>(sL + (j + u) * TC_LDF + c0);
#pragma unroll
                    for (int i = 0; i < 2; ++i) {
                        acc[i][0] -= lj[i][u] * x.x;
                        acc[i][1] -= lj[i][u] * x.y;
                        acc[i][2] -= lj[i][u] * x.z;
                        acc[i][3] -= lj[i][u] * x.w;
                    }
                }
            }
            __syncthreads();  // every thread has read the block's rows of L
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                *reinterpret_cast<float4*>(sL + (r0 + i) * TC_LDF + c0) =
                    make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
            }
        }
        __syncthreads();
        if (tid < C) {
            float x[16];
#pragma unroll
            for (int i = 0; i < 16; ++i) x[i] = sL[(16 * bi + i) * TC_LDF + tid];
#pragma unroll
            for (int i = 1; i < 16; ++i) {  // row i of the block in float4s (broadcast reads)
#pragma unroll
                for (int j4 = 0; j4 < i; j4 += 4) {
                    const float4 l = *reinterpret_cast<const float4*>(sLd + 16 * i + j4);
                    const float lj[4] = {l.x, l.y, l.z, l.w};
#pragma unroll
                    for (int j = j4; j < i && j < j4 + 4; ++j) x[i] -= lj[j - j4] * x[j];
                }
            }
#pragma unroll
            for (int i = 1; i < 16; ++i) sL[(16 * bi + i) * TC_LDF + tid] = x[i];
        }
        __syncthreads();
    }
}

#if TC_SOLVE
// Two fp32 values as bf16 hi and lo terms in one word each (hi + lo: about 16 bits of mantissa).
__device__ __forceinline__ void tc_split(float x0, float x1, uint32_t& hi, uint32_t& lo) {
    hi = tc_pack(x0, x1);
    lo = tc_pack(x0 - bf16_lo(hi), x1 - bf16_hi(hi));
}

// s times a 16 x 16 accumulator tile (two 8-column mma tiles) as the hi and lo A fragments of a
// product with the same rows (the accumulator layout is that A layout: tc_acc_as_a).
__device__ __forceinline__ void tc_split_acc(uint32_t (&hi)[4], uint32_t (&lo)[4],
                                             const float (&x)[2][4], float s) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const float* pair = x[r >> 1] + 2 * (r & 1);
        tc_split(s * pair[0], s * pair[1], hi[r], lo[r]);
    }
}

// acc += X M^T: X a 16 x 16 tile as split A fragments, M a 16 x 16 fp32 block in shared memory
// (row stride TC_LDF); column n of M^T is M's row n, so each B register is two adjacent floats.
// Three products, hi hi + hi lo + lo hi; lo lo, about 2^-16 of the whole, is left out.
__device__ __forceinline__ void tc_mma_split_mt(float (&acc)[2][4], const uint32_t (&hi)[4],
                                                const uint32_t (&lo)[4], const float* m,
                                                int lane) {
    const int gq = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
        const float* row = m + (8 * nt + gq) * TC_LDF + 2 * t4;
        const float2 m0 = *reinterpret_cast<const float2*>(row);
        const float2 m1 = *reinterpret_cast<const float2*>(row + 8);
        uint32_t bh0, bl0, bh1, bl1;
        tc_split(m0.x, m0.y, bh0, bl0);
        tc_split(m1.x, m1.y, bh1, bl1);
        tc_mma(acc[nt], hi, bh0, bh1);
        tc_mma(acc[nt], hi, bl0, bl1);
        tc_mma(acc[nt], lo, bh0, bh1);
    }
}

// TC_SOLVE 1. With L's 16 x 16 blocks L_ik and D_i = (I + L_ii)^-1, A's diagonal blocks are D_i
// and those below it A_ij = -D_i sum_{j <= k < i} L_ik A_kj (FLA's solve_tril merges 16 x 16
// inverses the same way): a column of blocks needs only its own blocks and the D's. Warp w
// inverts I + L_ww by forward substitution (lane c: column c, in fp32 as TC_SOLVE 0 does), all
// four side by side; then, once every D is in place, walks block column w down on tensor
// cores, transposed so that each result is the A operand of the next product: X_i = A_iw^T,
// X_w = D_w^T, X_i = -(sum_k X_k L_ik^T) D_i^T. Operands are fp32 split into bf16 hi + lo
// (tc_mma_split_mt): about 16 bits of mantissa per product, as many as the bf16 hi + lo terms of
// A that U is made with. Warp 0 has the longest chain, 9 products of 16 x 16 x 16 (54 mma.sync);
// warp 3 has none. The blocks above the diagonal keep whatever L's place held (L never wrote
// there); nothing reads them: W and U take A's block (rb, kb) for kb <= rb only.
__device__ __forceinline__ void tc_solve_blocks(float* sL, int w, int lane) {
    const int gq = lane >> 2, t4 = lane & 3, c = lane & 15;  // lanes 16-31 repeat lanes 0-15
    const float* lw = sL + 16 * w * TC_LDF + 16 * w;          // I + L_ww, then D_w
    float x[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) x[i] = i == c ? 1.0f : 0.0f;
#pragma unroll
    for (int i = 1; i < 16; ++i) {  // row i of L_ww in float4s (broadcast reads)
#pragma unroll
        for (int j4 = 0; j4 < i; j4 += 4) {
            const float4 l = *reinterpret_cast<const float4*>(lw + i * TC_LDF + j4);
            const float lj[4] = {l.x, l.y, l.z, l.w};
#pragma unroll
            for (int j = j4; j < i && j < j4 + 4; ++j) x[i] -= lj[j - j4] * x[j];
        }
    }
    __syncthreads();  // every warp has read its L_ww
    if (lane < 16) {
#pragma unroll
        for (int i = 0; i < 16; ++i) sL[(16 * w + i) * TC_LDF + 16 * w + c] = x[i];
    }
    __syncthreads();  // every D_i in place

    // X_k, k >= w, as accumulator tiles, element e of tile nt at (row gq + 8 (e / 2), column
    // 8 nt + 2 t4 + e % 2), and as split A fragments.
    float xs[4][2][4];
    uint32_t xh[4][4], xl[4][4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        if (k != w) continue;
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = gq + 8 * (e >> 1), col = 8 * nt + 2 * t4 + (e & 1);
                xs[k][nt][e] = lw[col * TC_LDF + r];  // X_w = D_w^T
            }
        }
        tc_split_acc(xh[k], xl[k], xs[k], 1.0f);
    }
#pragma unroll
    for (int i = 1; i < 4; ++i) {
        if (i <= w) continue;  // warp-uniform: the whole warp takes every mma.sync
        float sum[2][4] = {};
#pragma unroll
        for (int k = 0; k < i; ++k) {  // sum_k X_k L_ik^T
            if (k >= w) tc_mma_split_mt(sum, xh[k], xl[k], sL + 16 * i * TC_LDF + 16 * k, lane);
        }
        uint32_t sh[4], sl[4];
        tc_split_acc(sh, sl, sum, -1.0f);
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) xs[i][nt][e] = 0.0f;
        }
        tc_mma_split_mt(xs[i], sh, sl, sL + 16 * i * TC_LDF + 16 * i, lane);  // times D_i^T
        tc_split_acc(xh[i], xl[i], xs[i], 1.0f);
    }
    __syncthreads();  // every warp has read the L blocks of its column
#pragma unroll
    for (int i = 1; i < 4; ++i) {
        if (i <= w) continue;
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {  // A_iw = X_i^T (8 consecutive rows: 32 banks)
                const int r = gq + 8 * (e >> 1), col = 8 * nt + 2 * t4 + (e & 1);
                sL[(16 * i + col) * TC_LDF + 16 * w + r] = xs[i][nt][e];
            }
        }
    }
    __syncthreads();
}
#endif

__global__ void __launch_bounds__(TC_PREP_THREADS) gdn_tc_prep(
    const uint16_t* __restrict__ q, const uint16_t* __restrict__ k,
    const uint16_t* __restrict__ v, const float* __restrict__ g,
    const float* __restrict__ beta, uint16_t* __restrict__ ws_w, u_t* __restrict__ ws_u,
    uint16_t* __restrict__ ws_p, float* __restrict__ ws_g, const int64_t* __restrict__ cu_seqlens,
    int T, int H, int HV, int NC, int NSEQ) {
    HIP_DYNAMIC_SHARED(float4, smem4)
    unsigned char* smem = reinterpret_cast<unsigned char*>(smem4);
    uint16_t* sK = reinterpret_cast<uint16_t*>(smem + PREP_K);
    uint16_t* sQ = reinterpret_cast<uint16_t*>(smem + PREP_QV);
    uint16_t* sV = sQ;  // after Q K^T
    float* sL = reinterpret_cast<float*>(smem + PREP_L);  // L, becoming A
    uint16_t* sAhi = reinterpret_cast<uint16_t*>(smem + PREP_AHI);
    uint16_t* sAlo = reinterpret_cast<uint16_t*>(smem + PREP_ALO);
    float* sG = reinterpret_cast<float*>(smem + PREP_SMALL);
    float* sB = sG + C;
    float* sGam = sB + C;
    float* sEg = sGam + C;

    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, gq = lane >> 2, t4 = lane & 3;
    // Block order: runs of TC_PREP_RUN consecutive chunks of one head, heads varying faster than
    // the runs, so the prep ends on the last chunks of every head, not on every chunk of the
    // last heads (the header's speed paragraph has the measurement).
    int n, hv;
    {
        const int whole = NC / TC_PREP_RUN * TC_PREP_RUN, x = blockIdx.x;
        if (x < whole * HV) {
            hv = x / TC_PREP_RUN % HV;
            n = x / (TC_PREP_RUN * HV) * TC_PREP_RUN + x % TC_PREP_RUN;
        } else {  // the runs of the last NC - whole chunks
            hv = (x - whole * HV) / (NC - whole);
            n = whole + (x - whole * HV) % (NC - whole);
        }
    }
    // Batch rows: chunk n of row blockIdx.y. Packed sequences: n is a workspace slot of head hv
    // (tc_slot), and the block finds the sequence and chunk it holds, or that it holds none.
    int b = blockIdx.y;
    const int64_t chd = tc_prep_chunk(cu_seqlens, NSEQ, HV, NC, hv, b, n);
    if (chd < 0) return;  // an unused slot: the whole block leaves before any barrier
    const Seq seq = seq_of(cu_seqlens, b, T);
    const int hk = hv / (HV / H), t0 = n * C;

    // K, Q, V chunk tiles; rows past T are zeros, and so are their g and beta. Each thread copies
    // column chunk lch of rows lrow + RSTEP r of each tile: fixed shared offsets, global ones a
    // row stride apart (a row past the end reads nothing, from the sequence's row 0).
    constexpr int RSTEP = TC_PREP_THREADS / 16;
    const int lrow = tid >> 4, lch = tid & 15, tile_at = lrow * TC_LD + lch * 8;
    const int rows_in = seq.len - t0;  // rows of this chunk inside the sequence
    const uint16_t* k_row0 = k + (seq.bos * H + hk) * DK + lch * 8;
    const uint16_t* q_row0 = q + (seq.bos * H + hk) * DK + lch * 8;
    const int64_t qk_row = static_cast<int64_t>(H) * DK;
#pragma unroll
    for (int r = 0; r < C / RSTEP; ++r) {
        const bool in = lrow + r * RSTEP < rows_in;
        const int64_t at = in ? (t0 + lrow + r * RSTEP) * qk_row : 0;
        tc_cp16(sK + tile_at + r * RSTEP * TC_LD, k_row0 + at, in);
        tc_cp16(sQ + tile_at + r * RSTEP * TC_LD, q_row0 + at, in);
    }
    tc_commit();
    if (tid < C) {
        const bool in = t0 + tid < seq.len;
        const int64_t off = (seq.bos + (in ? t0 + tid : 0)) * HV + hv;
        sG[tid] = in ? g[off] : 0.0f;
        sB[tid] = in ? beta[off] : 0.0f;
    }
    tc_wait_all();
    __syncthreads();
    if (tid < C) {  // warps 0 and 1, whole: inclusive scan of g by shuffles
        float upto = sG[tid];
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
            const float y = __shfl_up_sync(0xffffffffu, upto, off);
            if (lane >= off) upto += y;
        }
        if (w == 1) {
            float first = sG[lane];  // warp 1 adds the sum of g over the first 32 rows
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) {
                first += __shfl_xor_sync(0xffffffffu, first, off);
            }
            upto += first;
        }
        sGam[tid] = upto;
        sEg[tid] = expf(upto);
        ws_g[chd * C + tid] = upto;
    }

    // K K^T and Q K^T: warp w owns rows 16w .. 16w + 15; column tiles past the diagonal block
    // are never needed (both matrices are used on or below the diagonal only).
    float skk[8][4], sqk[8][4];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) skk[j][e] = sqk[j][e] = 0.0f;
    }
#pragma unroll
    for (int kk = 0; kk < DK / 16; ++kk) {
        uint32_t ak[4], aq[4];
        tc_ldsm4<false>(ak, tc_at(sK, TC_LD, 16 * w, 16 * kk, lane));
        tc_ldsm4<false>(aq, tc_at(sQ, TC_LD, 16 * w, 16 * kk, lane));
#pragma unroll
        for (int np = 0; np < 4; ++np) {
            if (np <= w) {
                uint32_t bk[4];
                tc_ldsm4<false>(bk, tc_at_t(sK, TC_LD, 16 * np, 16 * kk, lane));
                tc_mma(skk[2 * np], ak, bk[0], bk[1]);
                tc_mma(skk[2 * np + 1], ak, bk[2], bk[3]);
                tc_mma(sqk[2 * np], aq, bk[0], bk[1]);
                tc_mma(sqk[2 * np + 1], aq, bk[2], bk[3]);
            }
        }
    }
    __syncthreads();  // gamma; every warp is done with Q: V goes in its place
    {
        const uint16_t* v_row0 = v + (seq.bos * HV + hv) * DV + lch * 8;
        const int64_t v_row = static_cast<int64_t>(HV) * DV;
#pragma unroll
        for (int r = 0; r < C / RSTEP; ++r) {
            const bool in = lrow + r * RSTEP < rows_in;
            const int64_t at = in ? (t0 + lrow + r * RSTEP) * v_row : 0;
            tc_cp16(sV + tile_at + r * RSTEP * TC_LD, v_row0 + at, in);
        }
    }
    tc_commit();

    // L = tril(beta_i (k_i . k_j) Gamma_ij, -1) -> shared; P = tril(scale q_i . k_j Gamma_ij)
    // -> workspace (bf16). Zeros past the diagonal (the tiles the scan reads there). Gamma_ij =
    // e^(gamma_i - gamma_j) through the hardware's exp2 (tc_exp: ex2.approx's 2^-22 plus the
    // rounding of x log2 e, under 1e-5 relative for |x| < 100, far inside the task's 5e-3;
    // expf spends two more FMAs of range reduction on each of a thread's 32 entries).
    const float scale = 1.0f / sqrtf(static_cast<float>(DK));
    uint16_t* p_out = ws_p + (chd * C + 16 * w + gq) * C + 2 * t4;  // row 16 w + gq, column 2 t4
#pragma unroll
    for (int np = 0; np < 4; ++np) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
#pragma unroll
            for (int pair = 0; pair < 2; ++pair) {
                const int i = 16 * w + gq + 8 * pair;
                const int j0 = 16 * np + 8 * half + 2 * t4;
                float lv[2] = {0.0f, 0.0f}, pv[2] = {0.0f, 0.0f};
#pragma unroll
                for (int e2 = 0; e2 < 2; ++e2) {
                    const int j = j0 + e2;
                    if (np <= w && j <= i) {
                        const float dec = tc_exp(sGam[i] - sGam[j]);
                        if (j < i) lv[e2] = sB[i] * skk[2 * np + half][2 * pair + e2] * dec;
                        pv[e2] = scale * sqk[2 * np + half][2 * pair + e2] * dec;
                    }
                }
                *reinterpret_cast<float2*>(sL + i * TC_LDF + j0) = make_float2(lv[0], lv[1]);
                *reinterpret_cast<uint32_t*>(p_out + 8 * pair * C + 16 * np + 8 * half) =
                    tc_pack(pv[0], pv[1]);
            }
        }
    }
    __syncthreads();

#if TC_SOLVE
    tc_solve_blocks(sL, w, lane);
#else
    tc_solve_substitution(sL, tid);
#endif

    // W = (A diag(beta)) (e^gamma K) and U = (A diag(beta)) V on tensor cores (FLA groups W's
    // factors the same way), A diag(beta) as bf16 tiles: for U as hi + lo (about 16 bits of
    // mantissa, since U stays fp32), for W hi only (W is stored in bf16 anyway), and K's rows
    // scaled by e^gamma in place, in bf16. The tiles go over the fp32 A, through registers.
    {
        constexpr int PER = C * C / 2 / TC_PREP_THREADS;  // pairs of A per thread
        uint32_t hi[PER], lo[PER];
#pragma unroll
        for (int u = 0; u < PER; ++u) {
            const int e = tid + u * TC_PREP_THREADS, i = e >> 5, j = 2 * (e & 31);
            const float2 a = *reinterpret_cast<const float2*>(sL + i * TC_LDF + j);
            const float a0 = a.x * sB[j], a1 = a.y * sB[j + 1];
            hi[u] = tc_pack(a0, a1);
            lo[u] = tc_pack(a0 - __uint_as_float(hi[u] << 16),
                            a1 - __uint_as_float(hi[u] & 0xffff0000u));
        }
#pragma unroll
        for (int r = 0; r < C / RSTEP; ++r) {  // 16 bytes of a row each: this thread's pieces
            uint4* p = reinterpret_cast<uint4*>(sK + tile_at + r * RSTEP * TC_LD);
            const float e = sEg[lrow + r * RSTEP];
            uint4 x = *p;
            x.x = tc_pack(bf16_lo(x.x) * e, bf16_hi(x.x) * e);
            x.y = tc_pack(bf16_lo(x.y) * e, bf16_hi(x.y) * e);
            x.z = tc_pack(bf16_lo(x.z) * e, bf16_hi(x.z) * e);
            x.w = tc_pack(bf16_lo(x.w) * e, bf16_hi(x.w) * e);
            *p = x;
        }
        __syncthreads();  // every thread holds its part of A
#pragma unroll
        for (int u = 0; u < PER; ++u) {
            const int e = tid + u * TC_PREP_THREADS, i = e >> 5, j = 2 * (e & 31);
            *reinterpret_cast<uint32_t*>(sAhi + tc_swz64(i, j)) = hi[u];
            *reinterpret_cast<uint32_t*>(sAlo + tc_swz64(i, j)) = lo[u];
        }
    }
    // Warp w computes columns 32w .. 32w + 31 of every row block rb; A is lower triangular, so
    // only token blocks kb <= rb contribute. Results go out through shared memory, 16 bytes per
    // lane in whole rows (from the mma fragments, a lane holds 4 or 8 bytes of a row): W over
    // K's tile, U (32 KB in fp32) in halves over V's tile and, once W is out, K's; each is dead
    // once its last reader holds its fragments.
    constexpr int LD_UOUT = DV + U_PER_16B;  // row stride of the staged U
    static_assert(C / 2 * LD_UOUT * static_cast<int>(sizeof(u_t)) <= TC_TILE_BYTES, "U halves");
    const auto u_out = [&](int row) {
        return row < C / 2 ? reinterpret_cast<u_t*>(sV) + row * LD_UOUT
                           : reinterpret_cast<u_t*>(sK) + (row - C / 2) * LD_UOUT;
    };
#pragma unroll 1
    for (int pass = 0; pass < 2; ++pass) {
        if (pass == 1) tc_wait_all();  // V
        __syncthreads();  // the A tiles and the scaled K; in pass 1 also V, and W is out
        const uint16_t* src = pass == 0 ? sK : sV;
        uint32_t bfr[4][2][4];  // B fragments: token block kb, 16-column half np
#pragma unroll
        for (int kb = 0; kb < 4; ++kb) {
#pragma unroll
            for (int np = 0; np < 2; ++np) {
                tc_ldsm4<true>(bfr[kb][np], tc_at(src, TC_LD, 16 * kb, 32 * w + 16 * np, lane));
            }
        }
        __syncthreads();  // K (V) is dead: the outputs go over it
#pragma unroll
        for (int rb = 0; rb < 4; ++rb) {
            float acc[4][4];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;
            }
#pragma unroll
            for (int kb = 0; kb <= rb; ++kb) {
                uint32_t a[4];
                const int ar = 16 * rb + (lane & 15), ac = 16 * kb + 8 * (lane >> 4);
                tc_ldsm4<false>(a, sAhi + tc_swz64(ar, ac));
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const uint32_t* bj = bfr[kb][j >> 1] + 2 * (j & 1);
                    tc_mma(acc[j], a, bj[0], bj[1]);
                }
                if (pass == 1) {
                    tc_ldsm4<false>(a, sAlo + tc_swz64(ar, ac));
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        const uint32_t* bj = bfr[kb][j >> 1] + 2 * (j & 1);
                        tc_mma(acc[j], a, bj[0], bj[1]);
                    }
                }
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) {
#pragma unroll
                for (int pair = 0; pair < 2; ++pair) {
                    const int i = 16 * rb + gq + 8 * pair;
                    const int c = 32 * w + 8 * j + 2 * t4;
                    const float x0 = acc[j][2 * pair], x1 = acc[j][2 * pair + 1];
                    if (pass == 0) {
                        *reinterpret_cast<uint32_t*>(sK + i * TC_LD + c) = tc_pack(x0, x1);
                    } else {
                        tc_store_u(u_out(i) + c, x0, x1);
                    }
                }
            }
        }
        __syncthreads();  // the output tile is complete
        if (pass == 0) {
            for (int e = tid; e < C * 16; e += TC_PREP_THREADS) {
                const int row = e >> 4, ch = e & 15;
                *reinterpret_cast<uint4*>(ws_w + (chd * C + row) * DK + ch * 8) =
                    *reinterpret_cast<const uint4*>(sK + row * TC_LD + ch * 8);
            }
        } else {
            constexpr int CHUNKS = DV / U_PER_16B;  // 16-byte chunks in a row of U
            for (int e = tid; e < C * CHUNKS; e += TC_PREP_THREADS) {
                const int row = e / CHUNKS, ch = e % CHUNKS;
                *reinterpret_cast<uint4*>(ws_u + (chd * C + row) * DV + ch * U_PER_16B) =
                    *reinterpret_cast<const uint4*>(u_out(row) + ch * U_PER_16B);
            }
        }
    }
}

// ---- gdn_tc_scan ----------------------------------------------------------------------------
// Shared memory and warps of the scan for a V slice of BVS columns: STAGES stages of (W, Q, K,
// P, U slice, gamma), then h, Vn and e^(gamma_C - gamma) Vn in bf16; the loads of chunk n are
// issued STAGES - 1 chunks ahead. P's rows have no padding: their 16-byte chunks are XOR-swizzled
// by row (tc_p_at). Warps: 4 along the chunk's rows x BVS / TC_WCOLS along V, each TC_WCOLS
// columns wide (TC_WCOLS / 8 mma tiles of 8).
// One stage of a scan over a V slice of BVS columns (both scans): W, Q, K, P, the U slice, gamma.
template <int BVS>
struct StageLayout {
    static constexpr int SLICE = BVS;
    static constexpr int LDU = BVS + U_PER_16B;   // row stride of U (16 bytes of padding)
    static constexpr int W = 0;
    static constexpr int Q = W + TC_TILE_BYTES;
    static constexpr int K = Q + TC_TILE_BYTES;
    static constexpr int P = K + TC_TILE_BYTES;
    static constexpr int U = P + C * C * 2;
    static constexpr int G = U + C * LDU * static_cast<int>(sizeof(u_t));
    static constexpr int STAGE = G + C * 4;
    static_assert((BVS == 32 || BVS == 64) && STAGE % 16 == 0, "layout");
};

template <int BVS, int STAGES>
struct ScanShape : StageLayout<BVS> {
    using L = StageLayout<BVS>;
    static constexpr int WARPS = 4 * BVS / TC_WCOLS;
    static constexpr int THREADS = 32 * WARPS;
    static constexpr int LDH = BVS + 8;   // bf16 row stride of h, Vn, Vd
    static constexpr int H = STAGES * L::STAGE;
    static constexpr int VN = H + DK * LDH * 2;
    static constexpr int VD = VN + C * LDH * 2;
    static constexpr int BYTES = VD + C * LDH * 2;
    static_assert(STAGES >= 2, "layout");
    static_assert(THREADS == 128 * BVS / TC_WCOLS, "gdn_tc_scan's launch bounds");
};

// A scan's stage loads (shape S: ScanShape or RsShape). Each thread copies the same 16-byte
// pieces of every chunk: column chunk lch of rows lrow + RSTEP r of the W, Q and K tiles, pieces
// of P's and U's rows likewise, so its shared offsets are fixed and its global addresses move by
// one chunk's stride; only the last chunk of a sequence checks its rows against the length
// (zeros past it). That keeps the address arithmetic out of the chunk loop: counted in the PTX,
// the loads were about 450 of a chunk's 1150 instructions before and are about 160 now, and ncu
// on long_32 had the scan issuing 0.25 instructions a cycle per scheduler (latency-bound).
template <class S>
struct ScanLoads {
    static constexpr int RSTEP = S::THREADS / 16, ROWS = C / RSTEP;       // 16 pieces a row
    static constexpr int P_RSTEP = S::THREADS / 8, P_ROWS = C / P_RSTEP;  // P: 8 pieces a row
    static constexpr int U_PIECES = S::SLICE / U_PER_16B;                 // U: a row of a slice
    static constexpr int U_RSTEP = S::THREADS / U_PIECES, U_ROWS = C / U_RSTEP;
    static_assert(ROWS * RSTEP == C && P_ROWS * P_RSTEP == C && U_ROWS * U_RSTEP == C &&
                  P_RSTEP % 8 == 0, "each thread copies whole columns of pieces");
    int lrow, lch, prow, pch, urow, uch, off_tile, off_p, off_u;
    int64_t qk_tok;  // q, k: one token on
    const uint16_t* q_seq;  // the sequence's row 0, this thread's column chunk
    const uint16_t* k_seq;

    __device__ ScanLoads(int tid, const uint16_t* q, const uint16_t* k, const Seq& seq, int hk,
                         int H)
        : lrow(tid >> 4), lch(tid & 15), prow(tid >> 3), pch(tid & 7), urow(tid / U_PIECES),
          uch(tid % U_PIECES), off_tile(lrow * TC_LD + lch * 8),
          off_p(prow * C + ((pch ^ (prow & 7)) << 3)),  // prow & 7: fixed per thread
          off_u(urow * S::LDU + uch * U_PER_16B), qk_tok(static_cast<int64_t>(H) * DK),
          q_seq(q + (seq.bos * H + hk) * DK + lch * 8),
          k_seq(k + (seq.bos * H + hk) * DK + lch * 8) {}

    // Chunk `chd` (workspace slot) at token t0 of a sequence of `len` tokens, into the stage at
    // `base`; SUM: no Q or P; msl: no U (a slice of M).
    template <bool SUM>
    __device__ void stage(unsigned char* base, int64_t chd, int t0, int len,
                          const uint16_t* ws_w, const uint16_t* ws_p, const u_t* ws_u,
                          const float* ws_g, int v0, bool msl, int tid) const {
        uint16_t* sW = reinterpret_cast<uint16_t*>(base + S::W) + off_tile;
        uint16_t* sQ = reinterpret_cast<uint16_t*>(base + S::Q) + off_tile;
        uint16_t* sK = reinterpret_cast<uint16_t*>(base + S::K) + off_tile;
        uint16_t* sP = reinterpret_cast<uint16_t*>(base + S::P) + off_p;
        u_t* sU = reinterpret_cast<u_t*>(base + S::U) + off_u;
        float* sG = reinterpret_cast<float*>(base + S::G);
        const uint16_t* src_w = ws_w + (chd * C + lrow) * DK + lch * 8;
        const uint16_t* src_q = q_seq + (t0 + lrow) * qk_tok;
        const uint16_t* src_k = k_seq + (t0 + lrow) * qk_tok;
        if (t0 + C <= len) {  // every row inside the sequence
#pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                tc_cp16(sW + r * RSTEP * TC_LD, src_w + r * RSTEP * DK, true);
                if (!SUM) tc_cp16(sQ + r * RSTEP * TC_LD, src_q + r * RSTEP * qk_tok, true);
                tc_cp16(sK + r * RSTEP * TC_LD, src_k + r * RSTEP * qk_tok, true);
            }
        } else {  // the last chunk: rows past the end are zeros (read from row 0, not at all)
#pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                const bool in = t0 + lrow + r * RSTEP < len;
                const int64_t at = in ? r * RSTEP * qk_tok : 0;
                tc_cp16(sW + r * RSTEP * TC_LD, src_w + r * RSTEP * DK, true);
                if (!SUM) tc_cp16(sQ + r * RSTEP * TC_LD, (in ? src_q : q_seq) + at, in);
                tc_cp16(sK + r * RSTEP * TC_LD, (in ? src_k : k_seq) + at, in);
            }
        }
        if (!SUM) {
            const uint16_t* src_p = ws_p + (chd * C + prow) * C + pch * 8;
#pragma unroll
            for (int r = 0; r < P_ROWS; ++r) {
                tc_cp16(sP + r * P_RSTEP * C, src_p + r * P_RSTEP * C, true);
            }
        }
        if (!msl) {
            const u_t* src_u = ws_u + (chd * C + urow) * DV + v0 + uch * U_PER_16B;
#pragma unroll
            for (int r = 0; r < U_ROWS; ++r) {
                tc_cp16(sU + r * U_RSTEP * S::LDU, src_u + r * U_RSTEP * DV, true);
            }
        }
        if (tid < C / 4) tc_cp16(sG + tid * 4, ws_g + chd * C + tid * 4, true);
    }
};

template <int BVS, int STAGES, int MODE>
__global__ void __launch_bounds__(128 * BVS / TC_WCOLS) gdn_tc_scan(  // ScanShape's THREADS
    const uint16_t* __restrict__ q, const uint16_t* __restrict__ k,
    const uint16_t* __restrict__ ws_w, const u_t* __restrict__ ws_u,
    const uint16_t* __restrict__ ws_p, const float* __restrict__ ws_g,
    const float* __restrict__ h0, uint16_t* __restrict__ o, float* __restrict__ ht,
    const int64_t* __restrict__ cu_seqlens, const int* __restrict__ out_row, int T, int H, int HV,
    int NC) {
    using S = ScanShape<BVS, STAGES>;
    HIP_DYNAMIC_SHARED(float4, smem4)
    unsigned char* smem = reinterpret_cast<unsigned char*>(smem4);
    uint16_t* sH = reinterpret_cast<uint16_t*>(smem + S::H);
    uint16_t* sVn = reinterpret_cast<uint16_t*>(smem + S::VN);
    uint16_t* sVd = reinterpret_cast<uint16_t*>(smem + S::VD);

    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, gq = lane >> 2, t4 = lane & 3;
    const int wm = w & 3, wn = w >> 2;   // rows 16 wm (chunk) or 32 wm (state); columns WC wn
    constexpr int WC = TC_WCOLS, NJ = WC / 8, NP = NJ / 2;  // a warp's columns: NJ mma tiles
    constexpr bool SUM = MODE == GDN_SUMMARY;  // no Q, P or o: the state map only
    const bool msl = SUM && blockIdx.x >= DV / BVS;  // a slice of M: from I, with U = 0
    const int v0 = blockIdx.x % (DV / BVS) * BVS, hv = blockIdx.y, b = blockIdx.z;
    const int hk = hv / (HV / H);
    const int64_t bh = static_cast<int64_t>(b) * HV + hv;
    const Seq seq = seq_of(cu_seqlens, b, T);  // its tokens: seq.bos .. seq.bos + seq.len - 1
    if (SUM && (seq.len == 0 || out_row[b] >= 0)) return;  // no map needed
    const int nc = (seq.len + C - 1) / C;    // and its chunks
    const int64_t slot0 = tc_slot(cu_seqlens, b, hv, HV, NC, seq.bos);  // chunk 0's workspace
    const float scale = 1.0f / sqrtf(static_cast<float>(DK));

    // The state tile of this thread: rows (keys) 32 wm + 16 mt + g (+ 8), columns WC wn + 8 j +
    // 2t (+ 1) of the slice; fp32 for the whole sequence.
    float hacc[2][NJ][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
#pragma unroll
            for (int pair = 0; pair < 2; ++pair) {
                const int key = 32 * wm + 16 * mt + gq + 8 * pair;
                const int col = WC * wn + 8 * j + 2 * t4;
                float2 x;
                if constexpr (SUM) {
                    x.x = h0_at<MODE>(h0, bh, key, v0 + col, msl);
                    x.y = h0_at<MODE>(h0, bh, key, v0 + col + 1, msl);
                } else {
                    x = *reinterpret_cast<const float2*>(h0 + (bh * DK + key) * DV + v0 + col);
                }
                hacc[mt][j][2 * pair] = x.x;
                hacc[mt][j][2 * pair + 1] = x.y;
                *reinterpret_cast<uint32_t*>(sH + key * S::LDH + col) = tc_pack(x.x, x.y);
            }
        }
    }

    const ScanLoads<S> loads(tid, q, k, seq, hk, H);
    auto load_stage = [&](int n, int s) {
        loads.template stage<SUM>(smem + s * S::STAGE, slot0 + n, n * C, seq.len, ws_w, ws_p,
                                  ws_u, ws_g, v0, msl, tid);
    };

    // Chunk n goes to stage n % STAGES, STAGES - 1 chunks ahead; every thread commits one group
    // per chunk (empty past the end), so the group of chunk n is done when STAGES - 2 are left.
    constexpr int AHEAD = STAGES - 1;
#pragma unroll
    for (int n = 0; n < AHEAD; ++n) {
        if (n < nc) load_stage(n, n);
        tc_commit();
    }
    for (int n = 0; n < nc; ++n) {
        const int s = n % STAGES;
        tc_wait_pending<STAGES - 2>();
        __syncthreads();  // stage s and the bf16 state are in place; chunk n - 1's stage is free
        if (n + AHEAD < nc) load_stage(n + AHEAD, (n + AHEAD) % STAGES);
        tc_commit();
        unsigned char* base = smem + s * S::STAGE;
        const uint16_t* sW = reinterpret_cast<const uint16_t*>(base + S::W);
        const uint16_t* sQ = reinterpret_cast<const uint16_t*>(base + S::Q);
        const uint16_t* sK = reinterpret_cast<const uint16_t*>(base + S::K);
        const uint16_t* sP = reinterpret_cast<const uint16_t*>(base + S::P);
        const u_t* sU = reinterpret_cast<const u_t*>(base + S::U);
        const float* sG = reinterpret_cast<const float*>(base + S::G);
        const int t0 = n * C;

        // W h and Q h: rows 16 wm .. 16 wm + 15, columns WC wn .. WC wn + WC - 1.
        float av[NJ][4], ao[NJ][4];
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) av[j][e] = ao[j][e] = 0.0f;
        }
#pragma unroll
        for (int kk = 0; kk < DK / 16; ++kk) {
            uint32_t aw[4], aq[4];
            tc_ldsm4<false>(aw, tc_at(sW, TC_LD, 16 * wm, 16 * kk, lane));
            if constexpr (!SUM) tc_ldsm4<false>(aq, tc_at(sQ, TC_LD, 16 * wm, 16 * kk, lane));
#pragma unroll
            for (int np = 0; np < NP; ++np) {
                uint32_t bh4[4];
                tc_ldsm4<true>(bh4, tc_at(sH, S::LDH, 16 * kk, WC * wn + 16 * np, lane));
                tc_mma(av[2 * np], aw, bh4[0], bh4[1]);
                tc_mma(av[2 * np + 1], aw, bh4[2], bh4[3]);
                if constexpr (!SUM) {
                    tc_mma(ao[2 * np], aq, bh4[0], bh4[1]);
                    tc_mma(ao[2 * np + 1], aq, bh4[2], bh4[3]);
                }
            }
        }

        // Vn = U - W h -> shared (bf16), and e^(gamma_C - gamma) Vn for the state update;
        // O starts as scale e^gamma (Q h).
        const float gC = sG[C - 1];
#pragma unroll
        for (int pair = 0; pair < 2; ++pair) {
            const int i = 16 * wm + gq + 8 * pair;
            const float gi = sG[i];
            const float fo = scale * expf(gi), fd = expf(gC - gi);
#pragma unroll
            for (int j = 0; j < NJ; ++j) {
                const int c = WC * wn + 8 * j + 2 * t4;
                const float2 u = msl ? make_float2(0.0f, 0.0f) : tc_load_u(sU + i * S::LDU + c);
                const float vn0 = u.x - av[j][2 * pair], vn1 = u.y - av[j][2 * pair + 1];
                if (!SUM) *reinterpret_cast<uint32_t*>(sVn + i * S::LDH + c) = tc_pack(vn0, vn1);
                *reinterpret_cast<uint32_t*>(sVd + i * S::LDH + c) = tc_pack(vn0 * fd, vn1 * fd);
                ao[j][2 * pair] *= fo;
                ao[j][2 * pair + 1] *= fo;
            }
        }
        __syncthreads();  // Vn complete; every warp is done reading the bf16 state

        // O += P Vn over the token blocks on or below the diagonal, then O -> bf16 out.
#pragma unroll
        for (int kb = 0; kb < 4; ++kb) {
            if (!SUM && kb <= wm) {
                uint32_t ap[4];
                tc_ldsm4<false>(ap, tc_p_at(sP, 16 * wm, 16 * kb, lane));
#pragma unroll
                for (int np = 0; np < NP; ++np) {
                    uint32_t bv[4];
                    tc_ldsm4<true>(bv, tc_at(sVn, S::LDH, 16 * kb, WC * wn + 16 * np, lane));
                    tc_mma(ao[2 * np], ap, bv[0], bv[1]);
                    tc_mma(ao[2 * np + 1], ap, bv[2], bv[3]);
                }
            }
        }
#pragma unroll
        for (int pair = 0; pair < 2; ++pair) {
            const int i = 16 * wm + gq + 8 * pair;
            if (!SUM && t0 + i < seq.len) {
                uint16_t* dst = o + ((seq.bos + t0 + i) * HV + hv) * DV + v0;
#pragma unroll
                for (int j = 0; j < NJ; ++j) {
                    const int c = WC * wn + 8 * j + 2 * t4;
                    *reinterpret_cast<uint32_t*>(dst + c) =
                        tc_pack(ao[j][2 * pair], ao[j][2 * pair + 1]);
                }
            }
        }

        // h' = e^gamma_C h + K^T (e^(gamma_C - gamma) Vn): A = K^T read transposed from the K tile.
        const float ec = expf(gC);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
            for (int j = 0; j < NJ; ++j) {
#pragma unroll
                for (int e = 0; e < 4; ++e) hacc[mt][j][e] *= ec;
            }
#pragma unroll
            for (int kb = 0; kb < 4; ++kb) {
                uint32_t ak[4];
                tc_ldsm4<true>(ak, tc_at_t(sK, TC_LD, 16 * kb, 32 * wm + 16 * mt, lane));
#pragma unroll
                for (int np = 0; np < NP; ++np) {
                    uint32_t bv[4];
                    tc_ldsm4<true>(bv, tc_at(sVd, S::LDH, 16 * kb, WC * wn + 16 * np, lane));
                    tc_mma(hacc[mt][2 * np], ak, bv[0], bv[1]);
                    tc_mma(hacc[mt][2 * np + 1], ak, bv[2], bv[3]);
                }
            }
        }
        // The bf16 copy for the next chunk (every reader of the old one passed the barrier above).
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
            for (int j = 0; j < NJ; ++j) {
#pragma unroll
                for (int pair = 0; pair < 2; ++pair) {
                    const int key = 32 * wm + 16 * mt + gq + 8 * pair;
                    const int col = WC * wn + 8 * j + 2 * t4;
                    *reinterpret_cast<uint32_t*>(sH + key * S::LDH + col) =
                        tc_pack(hacc[mt][j][2 * pair], hacc[mt][j][2 * pair + 1]);
                }
            }
        }
    }

    float* out = state_out<MODE>(ht, bh, msl);
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
#pragma unroll
            for (int pair = 0; pair < 2; ++pair) {
                const int key = 32 * wm + 16 * mt + gq + 8 * pair;
                const int col = WC * wn + 8 * j + 2 * t4;
                *reinterpret_cast<float2*>(out + key * STATE_LD<MODE> + v0 + col) =
                    make_float2(hacc[mt][j][2 * pair], hacc[mt][j][2 * pair + 1]);
            }
        }
    }
}

// ---- gdn_tc_scan_rs: the scan with the state in registers, transposed (TC_RS) --------------
// The same chunk chain as gdn_tc_scan, from the same stages (W, Q, K, P, U, gamma), but each warp
// owns 16 value columns of the slice and all 128 keys, with the state transposed, h^T [16 x 128]
// fp32 in mma accumulators. An accumulator tile of m16n8k16 (row g, columns 2t, 2t + 1; row
// g + 8, the same) is, packed to bf16, the A fragment of the next product over those columns
// (FlashAttention-2's P V; FlashInfer keeps its GDN state so, GDN-DESIGN.md 4.3), so per chunk:
//   u^T = h^T W^T and o^T = h^T Q^T   (A: h^T from registers; B: W's and Q's rows, ldmatrix)
//   v^T = U^T - u^T                    (U by ldmatrix.trans, straight into the accumulator layout)
//   o^T = scale e^gamma o^T + v^T P^T  (A: v^T from registers; B: P's rows)
//   h^T = e^gamma_C h^T + (e^(gamma_C - gamma) v)^T K   (A: from registers; B: K, .trans)
// No shared-memory copy of h, Vn or Vd and one barrier a chunk (the stage ring's), against the
// plain scan's two barriers and three shared round trips on the chain. Each warp reads all of
// W, Q and K from shared memory (16 columns a warp, against 16 rows a warp in gdn_tc_scan).
// The same roundings as gdn_tc_scan: bf16 h for W h and Q h, bf16 Vn for P Vn, bf16 Vd.
template <int BVS, int STAGES>
struct RsShape : StageLayout<BVS> {
    static constexpr int WARPS = BVS / 16;
    static constexpr int THREADS = 32 * WARPS;
    static constexpr int BYTES = STAGES * StageLayout<BVS>::STAGE;
    static_assert(STAGES >= 2, "layout");
};

#if TC_RS_SCAN
// ldmatrix row address of lane `lane` in the scan's swizzled 64 x 64 P tile, in tc_at_t's order:
// plain, the B fragments of rows r0 and r0 + 8 (P's rows: the output tokens) over columns c0 ..
__device__ __forceinline__ const uint16_t* tc_pt_at(const uint16_t* tile, int r0, int c0,
                                                    int lane) {
    const int row = r0 + (lane & 7) + 8 * (lane >> 4), chunk = (c0 >> 3) + ((lane >> 3) & 1);
    return tile + row * C + ((chunk ^ (row & 7)) << 3);
}

// The A fragment of columns 16 kb .. 16 kb + 15 of an accumulator row block held as tiles
// x[2 kb], x[2 kb + 1] (8 columns each), in bf16.
__device__ __forceinline__ void tc_acc_as_a(uint32_t (&a)[4], const float (&lo)[4],
                                            const float (&hi)[4]) {
    a[0] = tc_pack(lo[0], lo[1]);
    a[1] = tc_pack(lo[2], lo[3]);
    a[2] = tc_pack(hi[0], hi[1]);
    a[3] = tc_pack(hi[2], hi[3]);
}

template <int BVS, int STAGES, int MODE>
__global__ void __launch_bounds__(2 * BVS) gdn_tc_scan_rs(  // RsShape's THREADS
    const uint16_t* __restrict__ q, const uint16_t* __restrict__ k,
    const uint16_t* __restrict__ ws_w, const u_t* __restrict__ ws_u,
    const uint16_t* __restrict__ ws_p, const float* __restrict__ ws_g,
    const float* __restrict__ h0, uint16_t* __restrict__ o, float* __restrict__ ht,
    const int64_t* __restrict__ cu_seqlens, const int* __restrict__ out_row, int T, int H, int HV,
    int NC) {
    using S = RsShape<BVS, STAGES>;
    static_assert(sizeof(u_t) == 2, "U is read by ldmatrix: TC_RS needs U_BF16 1");
    HIP_DYNAMIC_SHARED(float4, smem4)
    unsigned char* smem = reinterpret_cast<unsigned char*>(smem4);
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, gq = lane >> 2, t4 = lane & 3;
    constexpr bool SUM = MODE == GDN_SUMMARY;  // no Q, P or o: the state map only
    const bool msl = SUM && blockIdx.x >= DV / BVS;  // a slice of M: from I, with U = 0
    const int v0 = blockIdx.x % (DV / BVS) * BVS, hv = blockIdx.y, b = blockIdx.z;
    const int hk = hv / (HV / H);
    const int64_t bh = static_cast<int64_t>(b) * HV + hv;
    const Seq seq = seq_of(cu_seqlens, b, T);
    if (SUM && (seq.len == 0 || out_row[b] >= 0)) return;  // no map needed
    const int nc = (seq.len + C - 1) / C;
    const int64_t slot0 = tc_slot(cu_seqlens, b, hv, HV, NC, seq.bos);
    const float scale = 1.0f / sqrtf(static_cast<float>(DK));
    const int col0 = v0 + 16 * w + gq;  // this thread's columns: col0 and col0 + 8

    // h^T tile j (keys 8 j ..): (column col0 + 8 (e >> 1), key 8 j + 2 t4 + (e & 1)), fp32.
    float hT[DK / 8][4];
#pragma unroll
    for (int j = 0; j < DK / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            hT[j][e] = h0_at<MODE>(h0, bh, 8 * j + 2 * t4 + (e & 1), col0 + 8 * (e >> 1), msl);
        }
    }

    const ScanLoads<S> loads(tid, q, k, seq, hk, H);
    constexpr int AHEAD = STAGES - 1;
#pragma unroll
    for (int n = 0; n < AHEAD; ++n) {
        if (n < nc) loads.template stage<SUM>(smem + n * S::STAGE, slot0 + n, n * C, seq.len,
                                              ws_w, ws_p, ws_u, ws_g, v0, msl, tid);
        tc_commit();
    }
    for (int n = 0; n < nc; ++n) {
        const int s = n % STAGES;
        tc_wait_pending<STAGES - 2>();
        __syncthreads();  // stage s is in place; every warp is done with chunk n - 1's stage
        if (n + AHEAD < nc) {
            loads.template stage<SUM>(smem + (n + AHEAD) % STAGES * S::STAGE, slot0 + n + AHEAD,
                                      (n + AHEAD) * C, seq.len, ws_w, ws_p, ws_u, ws_g, v0, msl,
                                      tid);
        }
        tc_commit();
        const unsigned char* base = smem + s * S::STAGE;
        const uint16_t* sW = reinterpret_cast<const uint16_t*>(base + S::W);
        const uint16_t* sQ = reinterpret_cast<const uint16_t*>(base + S::Q);
        const uint16_t* sK = reinterpret_cast<const uint16_t*>(base + S::K);
        const uint16_t* sP = reinterpret_cast<const uint16_t*>(base + S::P);
        const uint16_t* sU = reinterpret_cast<const uint16_t*>(base + S::U);
        const float* sG = reinterpret_cast<const float*>(base + S::G);
        const int t0 = n * C;

        // u^T = h^T W^T and o^T = h^T Q^T, tile nt: (column col0 + 8 (e >> 1), token 8 nt + 2 t4
        // + (e & 1)).
        float uT[C / 8][4], oT[C / 8][4];
#pragma unroll
        for (int nt = 0; nt < C / 8; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) uT[nt][e] = oT[nt][e] = 0.0f;
        }
#pragma unroll
        for (int kk = 0; kk < DK / 16; ++kk) {
            uint32_t a[4];
            tc_acc_as_a(a, hT[2 * kk], hT[2 * kk + 1]);
#pragma unroll
            for (int np = 0; np < C / 16; ++np) {
                uint32_t bw[4];
                tc_ldsm4<false>(bw, tc_at_t(sW, TC_LD, 16 * np, 16 * kk, lane));
                tc_mma(uT[2 * np], a, bw[0], bw[1]);
                tc_mma(uT[2 * np + 1], a, bw[2], bw[3]);
                if constexpr (!SUM) {
                    uint32_t bq[4];
                    tc_ldsm4<false>(bq, tc_at_t(sQ, TC_LD, 16 * np, 16 * kk, lane));
                    tc_mma(oT[2 * np], a, bq[0], bq[1]);
                    tc_mma(oT[2 * np + 1], a, bq[2], bq[3]);
                }
            }
        }

        // v^T = U^T - u^T: ldmatrix.trans of U's [token][column] tile gives lane (g, t) the
        // tokens 2 t, 2 t + 1 of column g, the accumulator layout (matrix m: tokens 16 np + 8
        // (m >> 1), columns + 8 (m & 1)).
#pragma unroll
        for (int np = 0; np < C / 16 && !msl; ++np) {
            uint32_t ur[4];
            const int m = lane >> 3;
            tc_ldsm4<true>(ur, sU + (16 * np + 8 * (m >> 1) + (lane & 7)) * S::LDU + 16 * w +
                                   8 * (m & 1));
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                float* x = uT[2 * np + half];
                const uint32_t lo = ur[2 * half], hi = ur[2 * half + 1];  // columns g, g + 8
                x[0] = bf16_lo(lo) - x[0];
                x[1] = bf16_hi(lo) - x[1];
                x[2] = bf16_lo(hi) - x[2];
                x[3] = bf16_hi(hi) - x[3];
            }
        }
        if (msl) {
#pragma unroll
            for (int nt = 0; nt < C / 8; ++nt) {
#pragma unroll
                for (int e = 0; e < 4; ++e) uT[nt][e] = -uT[nt][e];
            }
        }
        // uT holds v^T now. Per token of this thread: scale e^gamma (o) and e^(gamma_C - gamma).
        const float gC = sG[C - 1];
        float fd[C / 8][2];
#pragma unroll
        for (int nt = 0; nt < C / 8; ++nt) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const float gi = sG[8 * nt + 2 * t4 + e];
                fd[nt][e] = tc_exp(gC - gi);
                if constexpr (!SUM) {
                    const float fo = scale * tc_exp(gi);
                    oT[nt][e] *= fo;
                    oT[nt][e + 2] *= fo;
                }
            }
        }
        if constexpr (!SUM) {
            // o^T += v^T P^T over token blocks kj <= np (P is zero above its diagonal).
#pragma unroll
            for (int kj = 0; kj < C / 16; ++kj) {
                uint32_t av[4];
                tc_acc_as_a(av, uT[2 * kj], uT[2 * kj + 1]);
#pragma unroll
                for (int np = kj; np < C / 16; ++np) {
                    uint32_t bp[4];
                    tc_ldsm4<false>(bp, tc_pt_at(sP, 16 * np, 16 * kj, lane));
                    tc_mma(oT[2 * np], av, bp[0], bp[1]);
                    tc_mma(oT[2 * np + 1], av, bp[2], bp[3]);
                }
            }
#pragma unroll
            for (int nt = 0; nt < C / 8; ++nt) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int tok = t0 + 8 * nt + 2 * t4 + (e & 1);
                    if (tok < seq.len) {
                        o[((seq.bos + tok) * HV + hv) * DV + col0 + 8 * (e >> 1)] =
                            static_cast<uint16_t>(tc_pack(oT[nt][e], 0.0f));
                    }
                }
            }
        }
        // h^T = e^gamma_C h^T + Vd^T K, Vd^T = v^T scaled per token, A from registers, B = K's
        // tile read transposed (token rows as k).
        const float ec = tc_exp(gC);
#pragma unroll
        for (int j = 0; j < DK / 8; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) hT[j][e] *= ec;
        }
#pragma unroll
        for (int kj = 0; kj < C / 16; ++kj) {
            float lo[4], hi[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                lo[e] = uT[2 * kj][e] * fd[2 * kj][e & 1];
                hi[e] = uT[2 * kj + 1][e] * fd[2 * kj + 1][e & 1];
            }
            uint32_t ad[4];
            tc_acc_as_a(ad, lo, hi);
#pragma unroll
            for (int m = 0; m < DK / 16; ++m) {
                uint32_t bk[4];
                tc_ldsm4<true>(bk, tc_at(sK, TC_LD, 16 * kj, 16 * m, lane));
                tc_mma(hT[2 * m], ad, bk[0], bk[1]);
                tc_mma(hT[2 * m + 1], ad, bk[2], bk[3]);
            }
        }
    }

    float* out = state_out<MODE>(ht, bh, msl);
#pragma unroll
    for (int j = 0; j < DK / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            out[(8 * j + 2 * t4 + (e & 1)) * STATE_LD<MODE> + col0 + 8 * (e >> 1)] = hT[j][e];
        }
    }
}
#endif  // TC_RS_SCAN

// The scan's three shapes: 32-column slices with three stages where the device's shared memory
// per block allows (H100 / H200: 227 KB), else two; 64-column slices with two.
using ScanNarrowDeep = ScanShape<32, 3>;
using ScanNarrow = ScanShape<32, 2>;
using ScanWide = ScanShape<64, 2>;
using RsNarrow = RsShape<32, 3>;  // 196 KB
using RsWide = RsShape<64, 3>;    // 210 KB

// What the launchers need to know of the current device, asked once per device: whether it runs
// these kernels (sm_80 or later, and shared memory for the prep and the narrow scan), which
// scan shapes fit, and its SM count; on first use the kernels' shared-memory limits are raised
// there too. Threads that race on a first use both ask and store the same answer; the flag is
// published after the answer (compiler builtins: the screen's header allowlist has no <atomic>).
struct TcDevice {
    bool usable, deep, wide, rs_wide;
    int sms;
};

static hipError_t tc_device(TcDevice* out) {
    constexpr int MAX_DEVICES = 64;
    static TcDevice known[MAX_DEVICES];
    static bool asked[MAX_DEVICES] = {};
    int device = 0;
    hipError_t err = hipGetDevice(&device);
    if (err != hipSuccess) return err;
    if (device < 0 || device >= MAX_DEVICES) return hipErrorInvalidValue;
    if (!__atomic_load_n(&asked[device], __ATOMIC_ACQUIRE)) {
        int major = 0, sms = 0, smem = 0;
        err = hipDeviceGetAttribute(&major, hipDeviceAttributeComputeCapabilityMajor, device);
        if (err == hipSuccess) {
            err = hipDeviceGetAttribute(&sms, hipDeviceAttributeMultiprocessorCount, device);
        }
        if (err == hipSuccess) {
            err = hipDeviceGetAttribute(&smem, hipDeviceAttributeSharedMemPerBlockOptin, device);
        }
        const auto fits = [&](int bytes) { return major >= 8 && bytes <= smem; };
        TcDevice facts = {fits(PREP_BYTES) && fits(ScanNarrow::BYTES), fits(ScanNarrowDeep::BYTES),
                          fits(ScanWide::BYTES), fits(RsShape<64, 3>::BYTES), sms};
        const auto raise = [&](bool use, const void* kernel, int bytes) {
            if (err == hipSuccess && use) {
                const hipFuncAttribute limit = hipFuncAttributeMaxDynamicSharedMemorySize;
                err = hipFuncSetAttribute(kernel, limit, bytes);
            }
        };
        raise(facts.usable, reinterpret_cast<const void*>(gdn_tc_prep), PREP_BYTES);
        if (err == hipSuccess && facts.usable) {  // four prep blocks per SM need all of it
            err = hipFuncSetAttribute(reinterpret_cast<const void*>(gdn_tc_prep),
                                      hipFuncAttributePreferredSharedMemoryCarveout, 100);
        }
        const auto raise_modes = [&](bool use, auto plain, auto summary, int bytes) {
            raise(use, reinterpret_cast<const void*>(plain), bytes);
            raise(use, reinterpret_cast<const void*>(summary), bytes);
        };
        raise_modes(facts.usable, gdn_tc_scan<32, 2, GDN_PLAIN>, gdn_tc_scan<32, 2, GDN_SUMMARY>,
                    ScanNarrow::BYTES);
        raise_modes(facts.deep, gdn_tc_scan<32, 3, GDN_PLAIN>, gdn_tc_scan<32, 3, GDN_SUMMARY>,
                    ScanNarrowDeep::BYTES);
        raise_modes(facts.wide, gdn_tc_scan<64, 2, GDN_PLAIN>, gdn_tc_scan<64, 2, GDN_SUMMARY>,
                    ScanWide::BYTES);
#if TC_RS_NARROW
        raise_modes(fits(RsNarrow::BYTES), gdn_tc_scan_rs<32, 3, GDN_PLAIN>,
                    gdn_tc_scan_rs<32, 3, GDN_SUMMARY>, RsNarrow::BYTES);
#endif
#if TC_RS_WIDE
        raise_modes(fits(RsWide::BYTES), gdn_tc_scan_rs<64, 3, GDN_PLAIN>,
                    gdn_tc_scan_rs<64, 3, GDN_SUMMARY>, RsWide::BYTES);
#endif
        if (err != hipSuccess) return err;
        known[device] = facts;
        __atomic_store_n(&asked[device], true, __ATOMIC_RELEASE);
        *out = facts;
        return hipSuccess;
    }
    *out = known[device];
    return hipSuccess;
}

#if TC_RS_SCAN
template <int BVS, int STAGES, int MODE>
static hipError_t gdn_tc_scan_rs_launch(const uint16_t* q, const uint16_t* k,
                                        const uint16_t* ws_w, const u_t* ws_u,
                                        const uint16_t* ws_p, const float* ws_g, const float* h0,
                                        uint16_t* o, float* ht, const int64_t* cu_seqlens,
                                        const int* out_row, int B, int T, int H, int HV, int NC,
                                        hipStream_t stream) {
    const int slices = (MODE == GDN_SUMMARY ? 2 : 1) * DV / BVS;
    using S = RsShape<BVS, STAGES>;
    hipLaunchKernelGGL((gdn_tc_scan_rs<BVS, STAGES, MODE>), dim3(slices, HV, B), dim3(S::THREADS),
                       S::BYTES, stream, q, k, ws_w, ws_u, ws_p, ws_g, h0, o, ht, cu_seqlens,
                       out_row, T, H, HV, NC);
    return hipGetLastError();
}
#endif

template <int BVS, int STAGES, int MODE>
static hipError_t gdn_tc_scan_launch(const uint16_t* q, const uint16_t* k, const uint16_t* ws_w,
                                     const u_t* ws_u, const uint16_t* ws_p, const float* ws_g,
                                     const float* h0, uint16_t* o, float* ht,
                                     const int64_t* cu_seqlens, const int* out_row, int B, int T,
                                     int H, int HV, int NC, hipStream_t stream) {
    const int slices = (MODE == GDN_SUMMARY ? 2 : 1) * DV / BVS;
    using S = ScanShape<BVS, STAGES>;
    hipLaunchKernelGGL((gdn_tc_scan<BVS, STAGES, MODE>), dim3(slices, HV, B), dim3(S::THREADS),
                       S::BYTES, stream, q, k, ws_w, ws_u, ws_p, ws_g, h0, o, ht, cu_seqlens,
                       out_row, T, H, HV, NC);
    return hipGetLastError();
}

// Workspace chunks per (batch row, value head), or per value head for packed sequences (tc_slot).
static int tc_slots(bool packed, int B, int T) {
    return (T + C - 1) / C + (packed ? B : 0);
}

// The tensor-core workspace: W, U, P and gamma of every chunk (tc_slot), and the prep that
// fills it.
struct TcWork {
    uint16_t* w;
    u_t* u;
    uint16_t* p;
    float* g;
    int NC;
};

static hipError_t gdn_tc_prep_launch(const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                     const float* g, const float* beta, const int64_t* cu_seqlens,
                                     void* work, int B, int T, int H, int HV, hipStream_t stream,
                                     TcWork* ws) {
    const int NC = tc_slots(cu_seqlens != nullptr, B, T);
    const int rows = cu_seqlens != nullptr ? 1 : B;  // packed: B sequences share the slots
    const int64_t chunks = static_cast<int64_t>(rows) * HV * NC;
    unsigned char* at = static_cast<unsigned char*>(work);
    *ws = {reinterpret_cast<uint16_t*>(at), reinterpret_cast<u_t*>(at + chunks * WS_W),
           reinterpret_cast<uint16_t*>(at + chunks * (WS_W + WS_U)),
           reinterpret_cast<float*>(at + chunks * (WS_W + WS_U + WS_P)), NC};
    if (NC > 0) {
        hipLaunchKernelGGL(gdn_tc_prep, dim3(NC * HV, rows), dim3(TC_PREP_THREADS), PREP_BYTES,
                           stream, q, k, v, g, beta, ws->w, ws->u, ws->p, ws->g, cu_seqlens, T, H,
                           HV, NC, B);
    }
    return hipGetLastError();
}

// The scan runs one block per SM (its shared memory): 32-column slices while they fit in one
// wave (the chain of chunks is the time), 64 beyond (half the W, Q, K, P traffic per column)
// where the device has the shared memory for them. A summary has twice the slices.
template <int MODE>
static hipError_t gdn_tc_scan_any(const uint16_t* q, const uint16_t* k, const TcWork& ws,
                                  const float* h0, uint16_t* o, float* ht,
                                  const int64_t* cu_seqlens, const int* out_row, int B, int T,
                                  int H, int HV, const TcDevice& device, hipStream_t stream) {
    const int64_t narrow_blocks =
        static_cast<int64_t>(B) * HV * (DV / 32) * (MODE == GDN_SUMMARY ? 2 : 1);
    const int bv = TC_BV != 0 ? TC_BV : narrow_blocks <= device.sms ? 32 : 64;
    const bool deep = device.deep && TC_STAGES == 3;
    auto scan = bv == 64 && device.wide ? gdn_tc_scan_launch<64, 2, MODE>
                : deep                  ? gdn_tc_scan_launch<32, 3, MODE>
                                        : gdn_tc_scan_launch<32, 2, MODE>;
    // The register-state scans take three stages (196 and 210 KB) where the device has them.
#if TC_RS_WIDE
    if (bv == 64 && device.rs_wide) scan = gdn_tc_scan_rs_launch<64, 3, MODE>;
#endif
#if TC_RS_NARROW
    if (bv == 32 && device.deep) scan = gdn_tc_scan_rs_launch<32, 3, MODE>;
#endif
    return scan(q, k, ws.w, ws.u, ws.p, ws.g, h0, o, ht, cu_seqlens, out_row, B, T, H, HV, ws.NC,
                stream);
}

static hipError_t gdn_tc_fwd(const uint16_t* q, const uint16_t* k, const uint16_t* v,
                             const float* g, const float* beta, const float* h0,
                             const int64_t* cu_seqlens, uint16_t* o, float* ht, void* work,
                             int B, int T, int H, int HV, const TcDevice& device,
                             hipStream_t stream) {
    TcWork ws;
    const hipError_t err =
        gdn_tc_prep_launch(q, k, v, g, beta, cu_seqlens, work, B, T, H, HV, stream, &ws);
    if (err != hipSuccess) return err;
    return gdn_tc_scan_any<GDN_PLAIN>(q, k, ws, h0, o, ht, cu_seqlens, nullptr, B, T, H, HV,
                                      device, stream);
}
#endif  // __HIP_PLATFORM_NVIDIA__ && MATRIX_CORES

static hipError_t workspace_bytes(bool packed, int B, int T, int HV, int64_t* bytes) {
    if (B <= 0 || T < 0 || HV <= 0) return hipErrorInvalidValue;
    *bytes = 0;
#if defined(__HIP_PLATFORM_NVIDIA__) && MATRIX_CORES
    TcDevice device;
    const hipError_t err = tc_device(&device);
    if (err != hipSuccess) return err;
    if (device.usable) {
        const int rows = packed ? 1 : B;
        const int64_t chunks = static_cast<int64_t>(rows) * HV * tc_slots(packed, B, T);
        *bytes = chunks * (WS_W + WS_U + WS_P + WS_G);
    }
#endif
    return hipSuccess;
}

// The fused kernel over B sequences (batch rows, or packed by cu_seqlens), in one of its modes.
template <int MODE>
static hipError_t gdn_fused_launch(const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                   const float* g, const float* beta, const float* h0,
                                   const int64_t* cu_seqlens, const int* out_row, uint16_t* o,
                                   float* ht, int B, int T, int H, int HV, hipStream_t stream) {
    const dim3 grid(DV / FBV, HV, B);
#if defined(__HIP_PLATFORM_AMD__)
    hipLaunchKernelGGL(gdn_chunk_kernel<MODE>, grid, dim3(NT), 0, stream, q, k, v, g, beta, h0, o,
                       ht, cu_seqlens, out_row, T, H, HV);
#else
    const hipError_t err =
        hipFuncSetAttribute(reinterpret_cast<const void*>(gdn_chunk_kernel<MODE>),
                            hipFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
    if (err != hipSuccess) return err;
    hipLaunchKernelGGL(gdn_chunk_kernel<MODE>, grid, dim3(NT), SMEM_BYTES, stream, q, k, v, g,
                       beta, h0, o, ht, cu_seqlens, out_row, T, H, HV);
#endif
    return hipGetLastError();
}

// B batch rows of T tokens, or (cu_seqlens given) B packed sequences in T tokens.
static hipError_t gdn_fwd(const uint16_t* q, const uint16_t* k, const uint16_t* v,
                          const float* g, const float* beta, const float* h0,
                          const int64_t* cu_seqlens, uint16_t* o, float* ht, void* work, int B,
                          int T, int H, int HV, hipStream_t stream) {
    if (B <= 0 || T < 0 || H <= 0 || HV <= 0 || HV % H != 0) return hipErrorInvalidValue;
#if defined(__HIP_PLATFORM_NVIDIA__) && MATRIX_CORES
    TcDevice device;
    const hipError_t tc_err = tc_device(&device);
    if (tc_err != hipSuccess) return tc_err;
    if (device.usable) {
        return gdn_tc_fwd(q, k, v, g, beta, h0, cu_seqlens, o, ht, work, B, T, H, HV, device,
                          stream);
    }
#endif
    return gdn_fused_launch<GDN_PLAIN>(q, k, v, g, beta, h0, cu_seqlens, nullptr, o, ht, B, T, H,
                                       HV, stream);
}

// ============================================================================================
// Context parallelism (CP): long sequences with few heads give the chunk loops above too few
// blocks (one per V slice, value head and sequence, each walking every chunk of its sequence in
// series). CP cuts every sequence into segments of CP_L chunks (the last one shorter) and runs
// them as packed sequences, side by side. A segment maps its initial state exactly, linearly:
// S_out = M S_in + c, M = prod over its tokens of e^(g_t) (I - beta_t k_t k_t^T) (128 x 128, the
// same for every value column), c its final state from zero. So, exactly (no truncation):
//   1. gdn_cp_plan: the segments' token bounds, which sequence each ends, each sequence's first
//      segment (on the device, from cu_seqlens: no host sync, CUDA graphs capture it);
//   2. the chunk loop in GDN_SUMMARY mode: c from a zero state with the real v, and M as the
//      final state from the identity with v = 0 (W, U, P and gamma of the tensor-core prep are
//      the segments', computed once and shared with step 4);
//   3. gdn_cp_fixup, in series over a sequence's segments: h_0 = the sequence's initial state,
//      h_{s+1} = M_s h_s + c_s, every h_s stored as segment s's initial state; fp32 throughout;
//   4. the chunk loop in GDN_PLAIN mode over all segments in parallel, each from its h_s: o,
//      and every segment's final state (into cm, free once the fixup is done);
//   5. gdn_cp_final: the final state of the segment that ends each sequence, copied to ht.
// Ideas and sources (problems/gated_delta_net/seeds/chunked/README.md): FLA's intra-card CP
// (fp32 [h | M] per segment), FlashQLA's segment split and wave-model choice of the segment
// length, FlashInfer's fp32 fixup chain.

// Fixup: a block per (V tile of CP_FIX_BV columns, value head, sequence); M arrives in 128 x 32
// quarters through shared memory, the next quarter loaded into registers while this one is used.
// @tunable CP_FIX_BV: 8, 16, 32
#define CP_FIX_BV 16

// Use CP: never (0); when the wave model below predicts a gain of 5 % or more (1); whenever a
// sequence is longer than one segment (2).
// @tunable CP_MODE: 0, 1, 2
#define CP_MODE 1

// Segment length in chunks: chosen by the wave model (0), or fixed.
// @tunable CP_SEG_CHUNKS: 0, 8, 16, 32, 64
#define CP_SEG_CHUNKS 0

constexpr int PLAN_NT = 256;
constexpr int FIX_NT = 256;
constexpr int FIX_KQ = 32;           // M's columns per pass through shared memory
constexpr int FIX_LDM = FIX_KQ + 4;  // padded row stride of that quarter
constexpr int FIX_CPT = CP_FIX_BV / 2;  // columns per thread: thread t owns row t / 2
static_assert(CP_FIX_BV == 8 || CP_FIX_BV == 16 || CP_FIX_BV == 32, "CP_FIX_BV: 8, 16 or 32");
static_assert(FIX_NT == 2 * DK && DK % FIX_KQ == 0, "the fixup's thread map");

__global__ void __launch_bounds__(PLAN_NT) gdn_cp_plan(const int64_t* __restrict__ cu_seqlens,
                                                        int N, int T, int L, int S,
                                                        int64_t* __restrict__ seg_cu,
                                                        int* __restrict__ out_row,
                                                        int* __restrict__ seq_seg0) {
    const int t = threadIdx.x;
    const int64_t span = static_cast<int64_t>(L) * C;
    if (t == 0) {
        int running = 0;
        for (int i = 0; i < N; ++i) {
            const Seq seq = seq_of(cu_seqlens, i, T);
            seq_seg0[i] = running;
            running += seq.len > span ? static_cast<int>((seq.len + span - 1) / span) : 1;
        }
        seq_seg0[N] = running;
    }
    __syncthreads();
    for (int i = t; i < N; i += PLAN_NT) {
        const Seq seq = seq_of(cu_seqlens, i, T);
        const int s0 = seq_seg0[i], n = seq_seg0[i + 1] - s0;
        for (int j = 0; j < n; ++j) {
            seg_cu[s0 + j] = seq.bos + j * span;
            out_row[s0 + j] = j == n - 1 ? i : -1;
        }
    }
    // Segments past the real ones (S is a bound): empty, at the end of the token axis.
    const int64_t end = cu_seqlens != nullptr ? cu_seqlens[N] : static_cast<int64_t>(N) * T;
    for (int s = seq_seg0[N] + t; s <= S; s += PLAN_NT) {
        seg_cu[s] = end;
        if (s < S) out_row[s] = -1;
    }
}

// A thread's share of one 128 x 32 quarter of M: four float4, rows t / 8 + 32 m, columns
// 4 (t % 8) .. + 3 (named, not an array: an array here went to scratch on gfx942).
struct FixQuarter {
    float4 m0, m1, m2, m3;
};

__device__ __forceinline__ FixQuarter fix_fetch(const float* cms, int kq, int t) {
    const float* at = cms + (t / (FIX_KQ / 4)) * (2 * DV) + DV + kq * FIX_KQ + t % (FIX_KQ / 4) * 4;
    constexpr int STEP = FIX_NT / (FIX_KQ / 4) * (2 * DV);  // 32 rows further
    return {*reinterpret_cast<const float4*>(at), *reinterpret_cast<const float4*>(at + STEP),
            *reinterpret_cast<const float4*>(at + 2 * STEP),
            *reinterpret_cast<const float4*>(at + 3 * STEP)};
}

// acc[j] += m h[j] over this thread's columns, h read from shared memory as float4.
__device__ __forceinline__ void fix_fma(float (&acc)[FIX_CPT], float m, const float* h) {
#pragma unroll
    for (int j = 0; j < FIX_CPT; j += 4) {
        const float4 x = *reinterpret_cast<const float4*>(h + j);
        acc[j] += m * x.x;
        acc[j + 1] += m * x.y;
        acc[j + 2] += m * x.z;
        acc[j + 3] += m * x.w;
    }
}

__global__ void __launch_bounds__(FIX_NT) gdn_cp_fixup(const float* __restrict__ h0,
                                                        const float* __restrict__ cm,
                                                        const int* __restrict__ seq_seg0,
                                                        float* __restrict__ seg_h0, int HV) {
    __shared__ float4 sM4[DK * FIX_LDM / 4];
    __shared__ float4 sH4[DK * CP_FIX_BV / 4];
    float* sM = reinterpret_cast<float*>(sM4);
    float* sH = reinterpret_cast<float*>(sH4);
    const int t = threadIdx.x, r = t >> 1, c0 = (t & 1) * FIX_CPT;
    const int col = blockIdx.x * CP_FIX_BV + c0, hv = blockIdx.y, i = blockIdx.z;
    const int s0 = seq_seg0[i], s1 = seq_seg0[i + 1];
    const int64_t state = static_cast<int64_t>(DK) * DV, map = static_cast<int64_t>(DK) * 2 * DV;
    float acc[FIX_CPT];
    const float* src = h0 + (static_cast<int64_t>(i) * HV + hv) * state + r * DV + col;
#pragma unroll
    for (int j = 0; j < FIX_CPT; ++j) acc[j] = src[j];
    FixQuarter next = {};
    if (s0 + 1 < s1) next = fix_fetch(cm + (static_cast<int64_t>(s0) * HV + hv) * map, 0, t);
    for (int s = s0;; ++s) {
        float* dst = seg_h0 + (static_cast<int64_t>(s) * HV + hv) * state + r * DV + col;
#pragma unroll
        for (int j = 0; j < FIX_CPT; ++j) dst[j] = acc[j];
        if (s + 1 >= s1) break;  // the sequence's last segment: its map is not needed
        const float* cms = cm + (static_cast<int64_t>(s) * HV + hv) * map;
        __syncthreads();  // every reader of the previous h is done
#pragma unroll
        for (int j = 0; j < FIX_CPT; ++j) {
            sH[r * CP_FIX_BV + c0 + j] = acc[j];
            acc[j] = cms[r * (2 * DV) + col + j];  // c_s
        }
#pragma unroll 1
        for (int kq = 0; kq < DK / FIX_KQ; ++kq) {
            __syncthreads();  // the quarter's buffer is free; h is in place
            {
                float* at = sM + (t / (FIX_KQ / 4)) * FIX_LDM + t % (FIX_KQ / 4) * 4;
                constexpr int STEP = FIX_NT / (FIX_KQ / 4) * FIX_LDM;
                *reinterpret_cast<float4*>(at) = next.m0;
                *reinterpret_cast<float4*>(at + STEP) = next.m1;
                *reinterpret_cast<float4*>(at + 2 * STEP) = next.m2;
                *reinterpret_cast<float4*>(at + 3 * STEP) = next.m3;
            }
            __syncthreads();
            if (kq + 1 < DK / FIX_KQ) {  // the next quarter, in flight while this one is used
                next = fix_fetch(cms, kq + 1, t);
            } else if (s + 2 < s1) {
                next = fix_fetch(cms + static_cast<int64_t>(HV) * map, 0, t);
            }
#pragma unroll 2
            for (int kk = 0; kk < FIX_KQ; kk += 4) {
                const float4 m4 = *reinterpret_cast<const float4*>(sM + r * FIX_LDM + kk);
                const float* hrow = sH + (kq * FIX_KQ + kk) * CP_FIX_BV + c0;
                fix_fma(acc, m4.x, hrow);
                fix_fma(acc, m4.y, hrow + CP_FIX_BV);
                fix_fma(acc, m4.z, hrow + 2 * CP_FIX_BV);
                fix_fma(acc, m4.w, hrow + 3 * CP_FIX_BV);
            }
        }
    }
}

// Step 5: ht[i] = the final state of sequence i's last segment (seq_seg0[i + 1] - 1: the plan
// gives every sequence at least one), from the main pass's per-segment states. A block copies
// FIN_NT float4 of one (sequence, head).
constexpr int FIN_NT = 256;
__global__ void __launch_bounds__(FIN_NT) gdn_cp_final(const float* __restrict__ seg_ht,
                                                        const int* __restrict__ seq_seg0,
                                                        float* __restrict__ ht, int HV) {
    const int hv = blockIdx.y, i = blockIdx.z;
    const int64_t state = static_cast<int64_t>(DK) * DV;
    const int64_t at = static_cast<int64_t>(blockIdx.x) * FIN_NT * 4 + threadIdx.x * 4;
    const int64_t src = (static_cast<int64_t>(seq_seg0[i + 1] - 1) * HV + hv) * state + at;
    *reinterpret_cast<float4*>(ht + (static_cast<int64_t>(i) * HV + hv) * state + at) =
        *reinterpret_cast<const float4*>(seg_ht + src);
}
static_assert(DK * DV % (4 * FIN_NT) == 0, "gdn_cp_final's grid");

// Segments the plan can make (a bound: each sequence makes at most one more than its whole
// segments), and the CP workspace: segment bounds, out_row, each sequence's first segment, the
// maps cm (c | M, fp32; then the segments' final states), the segments' initial states (fp32),
// then the chunk loop's workspace.
static int cp_segments(bool packed, int N, int T, int L) {
    const int64_t span = static_cast<int64_t>(L) * C;
    return packed ? static_cast<int>(T / span) + N : N * static_cast<int>((T + span - 1) / span);
}

struct CpWork {
    int64_t* seg_cu;
    int* out_row;
    int* seq_seg0;
    float* cm;
    float* seg_h0;
    void* rest;
};

static int64_t cp_align(int64_t x) { return (x + 255) / 256 * 256; }

static hipError_t cp_layout(bool packed, int N, int T, int HV, int L, unsigned char* base,
                            CpWork* out, int64_t* bytes) {
    const int S = cp_segments(packed, N, T, L);
    const int64_t total = packed ? T : static_cast<int64_t>(N) * T;
    int64_t at = 0;
    const auto take = [&](int64_t size) {
        const int64_t here = at;
        at += cp_align(size);
        return base + here;
    };
    CpWork w;
    w.seg_cu = reinterpret_cast<int64_t*>(take((S + 1) * 8));
    w.out_row = reinterpret_cast<int*>(take(S * 4));
    w.seq_seg0 = reinterpret_cast<int*>(take((N + 1) * 4));
    w.cm = reinterpret_cast<float*>(take(static_cast<int64_t>(S) * HV * DK * 2 * DV * 4));
    w.seg_h0 = reinterpret_cast<float*>(take(static_cast<int64_t>(S) * HV * DK * DV * 4));
    w.rest = base + at;
    if (total > 0x7fffffff) return hipErrorInvalidValue;
    int64_t rest = 0;
    const hipError_t err = workspace_bytes(true, S, static_cast<int>(total), HV, &rest);
    if (err != hipSuccess) return err;
    if (out != nullptr) *out = w;
    *bytes = at + rest;
    return hipSuccess;
}

// The wave model (GDN-DESIGN.md 4.1): a chunk loop of `blocks` blocks, one block per SM, takes
// ceil(blocks / SMs) waves x depth chunk steps. On NVIDIA the tensor-core scan runs 32-column
// blocks while they fit in one wave, else 64-column ones, half as many (gdn_tc_scan_any), after
// the prep (a cost per chunk and value head, the same with CP or without); the summary is one
// launch of twice the main pass's blocks. Elsewhere the fused kernel runs BV-column blocks and the
// summary two launches (c, then M), no prep. Times in microseconds, fitted on an H200
// (bench/gdn_vs_fla.py, graph mode, 132 SMs; the seed README lists each case's prediction):
// - CP_STEP_NARROW_US, one 32-column scan step: qwen35_tp8_32k (1361 us plain, 32 blocks)
//   less its prep, over 512 chunks: 2.30 (qwen_tp1_short 2.23, long_32 2.06: 128 blocks);
// - CP_STEP_WIDE_US, one 64-column step: qwen_tp1_batch 2.73 (4 waves x 64), mha_16 3.08;
// - CP_PREP_US, the prep per chunk and value head: long_32's 726 us over 16384 (U_BF16's note);
// - CP_SUMMARY_STEP, a summary step over a main step (no Q, P, o): 0.8, from qwen35_tp8_32k
//   with CP (681.4 us at L = 64: prep 181, main 186, summary 297, fixup 10, launches 12);
// - CP_FIX_STEP_US, a fixup step (one 128 x 128 x CP_FIX_BV product): 1.5, not measured alone;
// - CP_LAUNCH_US, each launch CP adds (plan, summary, fixup, final; the summary's second on the
//   fused path): 4, not measured alone.
// The fused kernel's steps (AMD) are not measured yet: the H200's stand in for them.
constexpr double CP_STEP_NARROW_US = 2.3;
constexpr double CP_STEP_WIDE_US = 2.9;
constexpr double CP_PREP_US = 726.0 / 16384;
constexpr double CP_SUMMARY_STEP = 0.8;
constexpr double CP_FIX_STEP_US = 1.5;
constexpr double CP_LAUNCH_US = 4.0;
// Which path the model costs: the tensor-core one (1) or the fused kernel's (0); the build's own
// unless set before this file (tests on CPU threads set 1 to check the H200 picks).
#ifndef CP_MODEL_TC
#if defined(__HIP_PLATFORM_NVIDIA__) && MATRIX_CORES
#define CP_MODEL_TC 1
#else
#define CP_MODEL_TC 0
#endif
#endif
constexpr bool CP_TC = CP_MODEL_TC;

static double cp_waves(int64_t blocks, int sms) {
    return static_cast<double>((blocks + sms - 1) / sms);
}

// One chunk-loop launch over `seqs` sequences of `depth` chunks and HV heads, `copies` times the
// slices (the tensor-core summary: 2), each step `step` times a main one.
static double cp_loop_us(int64_t seqs, int HV, int depth, int copies, double step, int sms) {
    if (!CP_TC) {
        return cp_waves(seqs * HV * (DV / FBV) * copies, sms) * depth * step * CP_STEP_NARROW_US;
    }
    const int64_t narrow = seqs * HV * (DV / 32) * copies;
    if (narrow <= sms) return cp_waves(narrow, sms) * depth * step * CP_STEP_NARROW_US;
    return cp_waves((narrow + 1) / 2, sms) * depth * step * CP_STEP_WIDE_US;
}

// Predicted microseconds of the forward over N sequences of nt chunks each: plain (L = 0) or CP
// with L-chunk segments.
static double cp_predict_us(int N, int nt, int HV, int L, int sms) {
    const double prep = CP_TC ? CP_PREP_US * N * nt * HV : 0.0;
    if (L <= 0 || nt <= L) return prep + cp_loop_us(N, HV, nt, 1, 1.0, sms);
    const int segs = (nt + L - 1) / L;
    const int64_t S = static_cast<int64_t>(N) * segs;
    const double main = cp_loop_us(S, HV, L, 1, 1.0, sms);
    const double summary = CP_TC ? cp_loop_us(S - N, HV, L, 2, CP_SUMMARY_STEP, sms)
                                 : 2 * cp_loop_us(S - N, HV, L, 1, CP_SUMMARY_STEP, sms);
    const int64_t fix_blocks = static_cast<int64_t>(N) * HV * (DV / CP_FIX_BV);
    const double fixup = CP_FIX_STEP_US * (segs - 1) * cp_waves(fix_blocks, sms);
    return prep + main + summary + fixup + (CP_TC ? 4 : 5) * CP_LAUNCH_US;
}

// Chunks per sequence: batch rows all have T tokens; packed lengths live on the device, so the
// mean stands in for them (CP then splits only what is longer than a segment).
static int cp_chunks(bool packed, int N, int T) {
    const int64_t per_seq = packed ? (static_cast<int64_t>(T) + N - 1) / N : T;
    return static_cast<int>((per_seq + C - 1) / C);
}

// The segment lengths (chunks) the wave model chooses from.
static constexpr int CP_SEGMENT_CHOICES[] = {8, 16, 32, 64, 128};

static int cp_choose(bool packed, int N, int T, int HV, int sms) {
    if (CP_MODE == 0 || N <= 0 || T <= 0 || HV <= 0 || sms <= 0) return 0;
    const int nt = cp_chunks(packed, N, T);
    const double plain = cp_predict_us(N, nt, HV, 0, sms);
    int best = 0;
    double best_us = 0.0;
    for (int L : CP_SEGMENT_CHOICES) {
        if (CP_SEG_CHUNKS != 0 && L != CP_SEG_CHUNKS) continue;
        if (nt <= L) continue;
        const double us = cp_predict_us(N, nt, HV, L, sms);
        if (best == 0 || us < best_us) {
            best = L;
            best_us = us;
        }
    }
    if (best != 0 && CP_MODE == 1 && best_us > 0.95 * plain) return 0;
    return best;
}

// The wave model's prediction in microseconds (out[0]) for L-chunk segments (0: the plain
// path), with gdn_cp_choose's N, T, HV, packed and sms: for the seed README's table and tests.
extern "C" hipError_t gdn_cp_predict(int N, int T, int HV, int packed, int sms, int L,
                                     double* out) {
    if (N <= 0 || T < 0 || HV <= 0 || sms <= 0 || L < 0) return hipErrorInvalidValue;
    out[0] = cp_predict_us(N, cp_chunks(packed != 0, N, T), HV, L, sms);
    return hipSuccess;
}

// CP or not, and its workspace: out[0] = the segment length in chunks (0: no CP, use
// gdn_chunk_workspace(_varlen) and gdn_chunk_fwd(_varlen)), out[1] = gdn_cp_fwd's workspace
// bytes. N sequences: batch rows of T tokens (packed 0) or packed in T tokens (packed 1); sms:
// the device's multiprocessor count.
extern "C" hipError_t gdn_cp_choose(int N, int T, int HV, int packed, int sms, int64_t* out) {
    if (N <= 0 || T < 0 || HV <= 0) return hipErrorInvalidValue;
    out[0] = cp_choose(packed != 0, N, T, HV, sms);
    out[1] = 0;
    if (out[0] == 0) return hipSuccess;
    return cp_layout(packed != 0, N, T, HV, static_cast<int>(out[0]), nullptr, nullptr, &out[1]);
}

// The CP forward, L chunks per segment (gdn_cp_choose's out[0], or any L >= 1): the arguments of
// gdn_chunk_fwd (cu_seqlens nullptr: N batch rows of T tokens) or gdn_chunk_fwd_varlen (N packed
// sequences in T tokens); work: gdn_cp_choose's out[1] bytes for the same N, T, HV and L.
static hipError_t cp_forward(const uint16_t* q, const uint16_t* k, const uint16_t* v,
                             const float* g, const float* beta, const float* h0,
                             const int64_t* cu_seqlens, uint16_t* o, float* ht, void* work, int N,
                             int T, int H, int HV, int L, hipStream_t stream) {
    if (N <= 0 || T < 0 || H <= 0 || HV <= 0 || HV % H != 0 || L <= 0) {
        return hipErrorInvalidValue;
    }
    const bool packed = cu_seqlens != nullptr;
    CpWork w;
    int64_t bytes = 0;
    hipError_t err = cp_layout(packed, N, T, HV, L, static_cast<unsigned char*>(work), &w, &bytes);
    if (err != hipSuccess) return err;
    const int S = cp_segments(packed, N, T, L);
    const int total = packed ? T : N * T;  // the token axis the segments cut
    hipLaunchKernelGGL(gdn_cp_plan, dim3(1), dim3(PLAN_NT), 0, stream, cu_seqlens, N, T, L, S,
                       w.seg_cu, w.out_row, w.seq_seg0);
    err = hipGetLastError();
    if (err != hipSuccess) return err;
    const auto fixup = [&]() {
        hipLaunchKernelGGL(gdn_cp_fixup, dim3(DV / CP_FIX_BV, HV, N), dim3(FIX_NT), 0, stream, h0,
                           w.cm, w.seq_seg0, w.seg_h0, HV);
        return hipGetLastError();
    };
    const auto final_states = [&]() {  // the main pass left every segment's final state in cm
        hipLaunchKernelGGL(gdn_cp_final, dim3(DK * DV / (4 * FIN_NT), HV, N), dim3(FIN_NT), 0,
                           stream, w.cm, w.seq_seg0, ht, HV);
        return hipGetLastError();
    };
#if defined(__HIP_PLATFORM_NVIDIA__) && MATRIX_CORES
    TcDevice device;
    err = tc_device(&device);
    if (err != hipSuccess) return err;
    if (device.usable) {
        TcWork ws;
        err = gdn_tc_prep_launch(q, k, v, g, beta, w.seg_cu, w.rest, S, total, H, HV, stream, &ws);
        if (err == hipSuccess) {
            err = gdn_tc_scan_any<GDN_SUMMARY>(q, k, ws, nullptr, nullptr, w.cm, w.seg_cu,
                                               w.out_row, S, total, H, HV, device, stream);
        }
        if (err == hipSuccess) err = fixup();
        if (err == hipSuccess) {
            err = gdn_tc_scan_any<GDN_PLAIN>(q, k, ws, w.seg_h0, o, w.cm, w.seg_cu, nullptr, S,
                                             total, H, HV, device, stream);
        }
        return err == hipSuccess ? final_states() : err;
    }
#endif
    err = gdn_fused_launch<GDN_SUM_C>(q, k, v, g, beta, nullptr, w.seg_cu, w.out_row, nullptr,
                                      w.cm, S, total, H, HV, stream);
    if (err == hipSuccess) {
        err = gdn_fused_launch<GDN_SUM_M>(q, k, v, g, beta, nullptr, w.seg_cu, w.out_row, nullptr,
                                          w.cm, S, total, H, HV, stream);
    }
    if (err == hipSuccess) err = fixup();
    if (err == hipSuccess) {
        err = gdn_fused_launch<GDN_PLAIN>(q, k, v, g, beta, w.seg_h0, w.seg_cu, nullptr, o, w.cm,
                                          S, total, H, HV, stream);
    }
    return err == hipSuccess ? final_states() : err;
}

// cp_forward with a segment length of the caller's (the tests' CP runs at any L).
extern "C" hipError_t gdn_cp_fwd(const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                 const float* g, const float* beta, const float* h0,
                                 const int64_t* cu_seqlens, uint16_t* o, float* ht, void* work,
                                 int N, int T, int H, int HV, int L, hipStream_t stream) {
    return cp_forward(q, k, v, g, beta, h0, cu_seqlens, o, ht, work, N, T, H, HV, L, stream);
}

// The segment length gdn_chunk_fwd(_varlen) picks on the device it launches on (cp_choose with
// that device's multiprocessor count, asked once per device; 0: the plain path). Chosen at the
// launch, not in model.py: the launch plan is recorded where no device is (record.py), and the
// executor that replays it runs on the one the kernels time on.
static int cp_launch_choice(bool packed, int N, int T, int HV) {
    if (CP_MODE == 0) return 0;
    constexpr int MAX_DEVICES = 64;
    static int sms_of[MAX_DEVICES] = {};
    int device = 0;
    if (hipGetDevice(&device) != hipSuccess || device < 0 || device >= MAX_DEVICES) return 0;
    int sms = __atomic_load_n(&sms_of[device], __ATOMIC_ACQUIRE);
    if (sms == 0) {
        if (hipDeviceGetAttribute(&sms, hipDeviceAttributeMultiprocessorCount, device) !=
            hipSuccess) {
            return 0;
        }
        __atomic_store_n(&sms_of[device], sms, __ATOMIC_RELEASE);
    }
    return cp_choose(packed, N, T, HV, sms);
}

// The workspace for either path: the plain one's, or the largest CP layout a launch may pick
// (the shortest segments allowed), whichever is larger; no device is asked for the choice.
static hipError_t any_workspace_bytes(bool packed, int N, int T, int HV, int64_t* bytes) {
    hipError_t err = workspace_bytes(packed, N, T, HV, bytes);
    if (err != hipSuccess || CP_MODE == 0) return err;
    const int nt = cp_chunks(packed, N, T);
    for (int L : CP_SEGMENT_CHOICES) {
        if ((CP_SEG_CHUNKS != 0 && L != CP_SEG_CHUNKS) || nt <= L) continue;
        int64_t cp = 0;
        err = cp_layout(packed, N, T, HV, L, nullptr, nullptr, &cp);
        if (err != hipSuccess) return err;
        *bytes = cp > *bytes ? cp : *bytes;
    }
    return hipSuccess;
}

// Bytes of device workspace gdn_chunk_fwd needs for these sizes (0 for the fused kernel without
// CP).
extern "C" hipError_t gdn_chunk_workspace(int B, int T, int HV, int64_t* bytes) {
    return any_workspace_bytes(false, B, T, HV, bytes);
}

// The same for gdn_chunk_fwd_varlen: N packed sequences in T tokens.
extern "C" hipError_t gdn_chunk_workspace_varlen(int N, int T, int HV, int64_t* bytes) {
    return any_workspace_bytes(true, N, T, HV, bytes);
}

// q, k [B, T, H, 128] bf16; v [B, T, HV, 128] bf16; g, beta [B, T, HV] fp32;
// h0 [B, HV, 128, 128] fp32 (read only); o [B, T, HV, 128] bf16; ht like h0 (the final state);
// work: gdn_chunk_workspace bytes of device memory (unused by the fused kernel).
extern "C" hipError_t gdn_chunk_fwd(const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                    const float* g, const float* beta, const float* h0,
                                    uint16_t* o, float* ht, void* work, int B, int T, int H,
                                    int HV, hipStream_t stream) {
    if (B <= 0 || T < 0 || H <= 0 || HV <= 0) return hipErrorInvalidValue;
    const int L = cp_launch_choice(false, B, T, HV);
    if (L > 0) {
        return cp_forward(q, k, v, g, beta, h0, nullptr, o, ht, work, B, T, H, HV, L, stream);
    }
    return gdn_fwd(q, k, v, g, beta, h0, nullptr, o, ht, work, B, T, H, HV, stream);
}

// Packed sequences (FLA's varlen form): q, k [1, T, H, 128]; v [1, T, HV, 128]; g, beta
// [1, T, HV]; cu_seqlens [N + 1] int64 on the device (0 = cu_seqlens[0] < ... < cu_seqlens[N] =
// T); h0 and ht [N, HV, 128, 128]; work: gdn_chunk_workspace_varlen bytes.
extern "C" hipError_t gdn_chunk_fwd_varlen(const uint16_t* q, const uint16_t* k,
                                           const uint16_t* v, const float* g, const float* beta,
                                           const float* h0, const int64_t* cu_seqlens,
                                           uint16_t* o, float* ht, void* work, int N, int T,
                                           int H, int HV, hipStream_t stream) {
    if (cu_seqlens == nullptr || N <= 0 || T < 0 || H <= 0 || HV <= 0) {
        return hipErrorInvalidValue;
    }
    const int L = cp_launch_choice(true, N, T, HV);
    if (L > 0) {
        return cp_forward(q, k, v, g, beta, h0, cu_seqlens, o, ht, work, N, T, H, HV, L, stream);
    }
    return gdn_fwd(q, k, v, g, beta, h0, cu_seqlens, o, ht, work, N, T, H, HV, stream);
}
