// ---------------------------------------------------------------------------- GEMM template
constexpr int DT_F32 = 0, DT_BF16 = 1, DT_F16 = 2;
template <int D> struct GemmElem;
template <> struct GemmElem<DT_F32> {
    typedef float T;
    static __device__ __forceinline__ float get(float v) { return v; }
};
template <> struct GemmElem<DT_BF16> {
    typedef uint16_t T;
    static __device__ __forceinline__ float get(uint16_t v) { return bf16_to_float(v); }
};

// Which matrix cores this compile pass has (0: none, the FMA path). Device passes only: the
// host pass of nvcc and hipcc sees 0, which changes nothing the host uses.
#if defined(__HIP_PLATFORM_NVIDIA__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define GEMM_MATRIX_CORES 1
#elif defined(__gfx942__) || defined(__gfx950__)
#define GEMM_MATRIX_CORES 2
#else
#define GEMM_MATRIX_CORES 0
#endif

// Whether the operands take the NVIDIA tensor-core path on sm_80+: 16-bit pairs, and fp32
// pairs whose B is transposed in memory ([N, K], as nn.Linear's weight), as 3xTF32 (ldmatrix
// .trans moves 16-bit elements only, so an fp32 [K, N] B stays on the FMA path).
template <int DA, int DB, bool BT>
constexpr bool gemm_nvidia_tensor_cores() {
    return DA == DB && (DA != DT_F32 || BT);
}

#if defined(__HIP_PLATFORM_NVIDIA__)
// Bytes of one pipeline stage of the tensor-core path: an A and a B tile of BK.
template <int D>
constexpr int gemm_stage_bytes() {
    return (BM + BN) * BK * (D == DT_F32 ? 4 : 2);
}

// Pipeline stages of the tensor-core path: GEMM_STAGES, fewer where they would pass the 227 KB
// of shared memory an sm_90 block may opt into (fp32 tiles at BK 64).
template <int D>
constexpr int gemm_stages() {
    constexpr int most = 227 * 1024 / gemm_stage_bytes<D>();
    return GEMM_STAGES < most ? GEMM_STAGES : most;
}
#endif

// Bytes of dynamic shared memory a launch passes: the NVIDIA tensor-core path's pipeline
// stages. The host pass cannot see the device arch, so it asks whenever the operands take
// that path on sm_80+ (the build targets sm_90); the other paths use static shared memory.
template <int DA, int DB, bool BT>
constexpr int gemm_dynamic_smem() {
#if defined(__HIP_PLATFORM_NVIDIA__)
    return gemm_nvidia_tensor_cores<DA, DB, BT>() ? gemm_stages<DA>() * gemm_stage_bytes<DA>() : 0;
#else
    return 0;
#endif
}

// One LDS tile, 16-byte aligned (the matrix-core paths read it 4 or 8 bytes at a time).
template <typename S, int ROWS_, int LD_>
struct alignas(16) GemmTile {
    S v[ROWS_][LD_];
};

// 16 bytes of a row, moved as one access.
template <typename T>
struct alignas(16) GemmChunk {
    T v[16 / sizeof(T)];
};

// Whether the tiles may be staged 16 bytes at a time: both operands 16-byte aligned and every
// chunk inside or outside the matrix as a whole (K, or N for a [K, N] B, a multiple of it).
template <int DA, int DB, bool BT>
inline int gemm_vector_ok(const void* A, const void* B, int64_t N, int64_t K) {
    constexpr int64_t EA = 16 / sizeof(typename GemmElem<DA>::T);
    constexpr int64_t EB = 16 / sizeof(typename GemmElem<DB>::T);
    const bool aligned = reinterpret_cast<uintptr_t>(A) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(B) % 16 == 0;
    return aligned && K % EA == 0 && (BT ? K % EB : N % EB) == 0;
}

template <int D, bool RAW, typename S>
__device__ __forceinline__ S gemm_value(typename GemmElem<D>::T v) {
    if constexpr (RAW) {
        return v;
    } else {
        return GemmElem<D>::get(v);
    }
}

// Stages A[m0:m0+BM, k0:k0+KD] into As[row][k] and B's matching tile into Bs[col][k] (k
// contiguous for both), zero outside the matrices. RAW keeps the 16-bit bits (matrix cores);
// otherwise values are converted to float (the FMA path). vec (the same for the whole grid):
// 16-byte loads; else one element per load.
template <int DA, int DB, bool BT, bool RAW, typename S, int KD, int LD>
__device__ __forceinline__ void gemm_stage(const typename GemmElem<DA>::T* __restrict__ A,
                                           const typename GemmElem<DB>::T* __restrict__ B,
                                           int64_t M, int64_t N, int64_t K, int64_t m0,
                                           int64_t n0, int64_t k0, GemmTile<S, BM, LD>& As,
                                           GemmTile<S, BN, LD>& Bs, bool vec) {
    typedef typename GemmElem<DA>::T TA;
    typedef typename GemmElem<DB>::T TB;
    constexpr int EA = 16 / sizeof(TA), EB = 16 / sizeof(TB);
    if (vec) {
        for (int idx = threadIdx.x; idx < BM * KD / EA; idx += GEMM_THREADS) {
            const int r = idx / (KD / EA), k = idx % (KD / EA) * EA;
            const int64_t gr = m0 + r, gk = k0 + k;
            GemmChunk<TA> c;
            if (gr < M && gk < K) {
                c = *reinterpret_cast<const GemmChunk<TA>*>(A + gr * K + gk);
            } else {
#pragma unroll
                for (int e = 0; e < EA; ++e) c.v[e] = TA(0);
            }
#pragma unroll
            for (int e = 0; e < EA; ++e) As.v[r][k + e] = gemm_value<DA, RAW, S>(c.v[e]);
        }
        for (int idx = threadIdx.x; idx < BN * KD / EB; idx += GEMM_THREADS) {
            // B^T ([N, K] in memory): chunks along k; B ([K, N]): chunks along n.
            const int n = BT ? idx / (KD / EB) : idx % (BN / EB) * EB;
            const int k = BT ? idx % (KD / EB) * EB : idx / (BN / EB);
            const int64_t gn = n0 + n, gk = k0 + k;
            GemmChunk<TB> c;
            if (gn < N && gk < K) {
                c = *reinterpret_cast<const GemmChunk<TB>*>(B + (BT ? gn * K + gk : gk * N + gn));
            } else {
#pragma unroll
                for (int e = 0; e < EB; ++e) c.v[e] = TB(0);
            }
#pragma unroll
            for (int e = 0; e < EB; ++e) {
                if (BT) {
                    Bs.v[n][k + e] = gemm_value<DB, RAW, S>(c.v[e]);
                } else {
                    Bs.v[n + e][k] = gemm_value<DB, RAW, S>(c.v[e]);
                }
            }
        }
        return;
    }
    for (int idx = threadIdx.x; idx < BM * KD; idx += GEMM_THREADS) {
        const int r = idx / KD, k = idx % KD;
        const int64_t gr = m0 + r, gk = k0 + k;
        As.v[r][k] = gr < M && gk < K ? gemm_value<DA, RAW, S>(A[gr * K + gk]) : S(0);
    }
    for (int idx = threadIdx.x; idx < BN * KD; idx += GEMM_THREADS) {
        // Either way neighbouring threads read neighbouring addresses.
        const int n = BT ? idx / KD : idx % BN, k = BT ? idx % KD : idx / BN;
        const int64_t gn = n0 + n, gk = k0 + k;
        const int64_t at = BT ? gn * K + gk : gk * N + gn;
        Bs.v[n][k] = gn < N && gk < K ? gemm_value<DB, RAW, S>(B[at]) : S(0);
    }
}

// From this depth on the launcher runs the kernel's LONG_K instantiation, whose portable path
// sums in two levels: each K tile's products apart (FK terms), then that partial into the
// accumulator. One fp32 sum over all of K drifts: 4_Matrix_vector_multiplication_'s 1,048,576
// positive products summed in order erred by -33 to -47 against KernelBench's tolerance of
// 26.2; in two levels the accumulator takes K / FK additions. A compile-time choice, so each
// kernel has one K loop: both loops in one kernel behind a runtime test took the gemm_bf16
// kernel on gfx90a to 398 VGPRs + 142 AGPRs, past the 512 it has. Below it (and on the
// matrix-core paths, which ignore LONG_K) the code is that of the one-level sum.
#define GEMM_LONG_K 65536

// The portable path: thread (ty, tx) owns rows ty + i * TY and columns tx + j * TX of the tile
// (strided, so neighbouring threads store neighbouring columns).
template <int DA, int DB, bool BT, bool LONG_K, class Epi>
__device__ __forceinline__ void gemm_fma(const typename GemmElem<DA>::T* __restrict__ A,
                                         const typename GemmElem<DB>::T* __restrict__ B,
                                         int64_t M, int64_t N, int64_t K, int64_t m0, int64_t n0,
                                         bool vec, Epi& epi) {
    constexpr int TX = 16, TY = GEMM_THREADS / TX, TM = BM / TY, TN = BN / TX;
    constexpr int FK = BK < 32 ? BK : 32;  // fp32 tiles of a deeper BK would pass 48 KB
    static_assert(GEMM_THREADS % TX == 0 && BM % TY == 0 && BN % TX == 0, "FMA thread layout");
    __shared__ GemmTile<float, BM, FK + 1> As;  // +1: column reads hit distinct banks
    __shared__ GemmTile<float, BN, FK + 1> Bs;
    const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    for (int64_t k0 = 0; k0 < K; k0 += FK) {
        gemm_stage<DA, DB, BT, false, float, FK, FK + 1>(A, B, M, N, K, m0, n0, k0, As, Bs, vec);
        __syncthreads();
        if constexpr (LONG_K) {  // P rows of the micro-tile at a time: P * TN more registers
            constexpr int P = TM < 2 ? TM : 2;
            static_assert(TM % P == 0, "FMA long-K row groups");
#pragma unroll
            for (int i0 = 0; i0 < TM; i0 += P) {
                float part[P][TN];
#pragma unroll
                for (int i = 0; i < P; ++i)
#pragma unroll
                    for (int j = 0; j < TN; ++j) part[i][j] = 0.0f;
                // Not unrolled: a row at a time unrolled 4 deep (9b3057f's loop) took sm_90 to
                // all 255 registers and gfx90a to 256 VGPRs + 61 AGPRs at the default 128 x 128
                // tiles; two rows not unrolled: 226 (the short path's) and 256 + 43.
#pragma unroll 1
                for (int k = 0; k < FK; ++k) {
                    float a[P], b[TN];
#pragma unroll
                    for (int i = 0; i < P; ++i) a[i] = As.v[ty + (i0 + i) * TY][k];
#pragma unroll
                    for (int j = 0; j < TN; ++j) b[j] = Bs.v[tx + j * TX][k];
#pragma unroll
                    for (int i = 0; i < P; ++i)
#pragma unroll
                        for (int j = 0; j < TN; ++j) part[i][j] = fmaf(a[i], b[j], part[i][j]);
                }
#pragma unroll
                for (int i = 0; i < P; ++i)
#pragma unroll
                    for (int j = 0; j < TN; ++j) acc[i0 + i][j] += part[i][j];
            }
        } else {
#pragma unroll 4
            for (int k = 0; k < FK; ++k) {
                float a[TM], b[TN];
#pragma unroll
                for (int i = 0; i < TM; ++i) a[i] = As.v[ty + i * TY][k];
#pragma unroll
                for (int j = 0; j < TN; ++j) b[j] = Bs.v[tx + j * TX][k];
#pragma unroll
                for (int i = 0; i < TM; ++i)
#pragma unroll
                    for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int64_t r = m0 + ty + i * TY, c = n0 + tx + j * TX;
            if (r < M && c < N) epi(r, c, acc[i][j]);
        }
}

#if GEMM_MATRIX_CORES == 1
// NVIDIA tensor cores (sm_80+): a GEMM_STAGES-deep cp.async pipeline of 16-byte copies into
// XOR-swizzled shared tiles, fragments loaded by ldmatrix, multiplied with fp32 accumulators by
// mma.sync m16n8k16 (bf16, f16) or m16n8k8 (fp32 as 3xTF32). The PTX primitives come first,
// each a thin wrapper of one instruction.
// ---- PTX primitives (begin)
__device__ __forceinline__ uint32_t gemm_smem_address(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// mma.sync m16n8k16, fp32 accumulate. Fragment layout (PTX ISA, "Matrix Fragments for
// mma.m16n8k16"): g = lane / 4, t = lane % 4; A regs hold (row g or g + 8, k 2t..2t+1 or
// 2t+8..2t+9), B regs (k 2t..2t+1 or 2t+8.., column g), C (row g or g + 8, column 2t..2t+1).
template <int D>
__device__ __forceinline__ void gemm_mma16816(float (&d)[4], const uint32_t (&a)[4],
                                              const uint32_t (&b)[2]) {
    if constexpr (D == DT_BF16) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
            "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
            "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
}

// mma.sync m16n8k8 with tf32 operands, fp32 accumulate. Fragment layout (PTX ISA, "Matrix
// Fragments for mma.m16n8k8", .tf32): A regs hold (row g or g + 8, k t or t + 4) in the order
// (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4); B regs (k t or t + 4, column g); C as above.
__device__ __forceinline__ void gemm_mma1688(float (&d)[4], const uint32_t (&a)[4],
                                             const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, "
        "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// cvt.rna.tf32.f32: x rounded to TF32 (10 fraction bits, to nearest, ties away from zero), as
// 32 bits whose low 13 are zero.
__device__ __forceinline__ uint32_t gemm_tf32(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

// ldmatrix m8n8 (.x2 or .x4, optionally .trans): lanes 8i..8i+7 give the row addresses (16
// contiguous bytes each) of matrix i; register i of lane l receives row l / 4, columns
// 2 (l % 4) and 2 (l % 4) + 1 of matrix i (of its transpose with TRANS). Without .trans a row
// of 32-bit elements loads as well: the register holds element l % 4 of row l / 4.
template <int X, bool TRANS>
__device__ __forceinline__ void gemm_ldmatrix(uint32_t (&r)[X], const void* row) {
    const uint32_t at = gemm_smem_address(row);
    if constexpr (X == 4 && TRANS) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(at));
    } else if constexpr (X == 4) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(at));
    } else if constexpr (TRANS) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                     : "=r"(r[0]), "=r"(r[1]) : "r"(at));
    } else {
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                     : "=r"(r[0]), "=r"(r[1]) : "r"(at));
    }
}

// 16 bytes global -> shared, asynchronously (L1 bypassed); with inside false nothing is read
// and the 16 bytes are zero-filled (src-size 0).
__device__ __forceinline__ void gemm_cp_async16(void* dst, const void* src, bool inside) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(gemm_smem_address(dst)),
                 "l"(src), "r"(inside ? 16 : 0) : "memory");
}

// Closes this thread's group of cp.async copies issued since the last commit.
__device__ __forceinline__ void gemm_cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void gemm_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// ---- PTX primitives (end)

// Position of 16-byte chunk c in a shared row of CH chunks: XOR-swizzled by the row so that 8
// consecutive rows at the same logical chunk (one ldmatrix) fall in 8 distinct bank groups. It
// depends on r % 8 only (rows of 128 bytes / CH chunks repeat every 8 rows), so row offsets
// that are multiples of 8 leave it unchanged: addresses stay affine in the unrolled loops.
template <int CH>
__device__ __forceinline__ int gemm_swizzle(int r, int c) {
    constexpr int period = CH < 8 ? CH : 8, shift = CH >= 8 ? 0 : CH == 4 ? 1 : CH == 2 ? 2 : 3;
    return c ^ (((r & 7) >> shift) & (period - 1));
}

// Warps along M: the split whose warp tile loads the fewest fragment bytes per mma
// (16 FM + 8 FN bytes-ish per FM x FN tiles), among those that tile BM x BN exactly.
constexpr int gemm_warps_m(int warps) {
    int best = 0;
    double best_cost = 1e30;
    for (int wm = 1; wm <= warps; wm *= 2) {
        const int wn = warps / wm;
        if (warps % wm != 0 || BM % (16 * wm) != 0 || BN % (8 * wn) != 0) continue;
        const double fm = BM / wm / 16, fn = BN / wn / 8, cost = (16 * fm + 8 * fn) / (fm * fn);
        if (cost < best_cost) best = wm, best_cost = cost;
    }
    return best;
}

// One K tile into pipeline stage (As: BM rows of BK; Bs: BN rows of BK for B^T, else BK rows of
// BN), zero outside the matrices, in 16-byte chunks of E = 16 / sizeof(T) elements. vec:
// 16-byte cp.async copies (every chunk wholly inside or outside, pointers aligned:
// gemm_vector_ok); else element by element, synchronously.
template <typename T, bool BT>
__device__ __forceinline__ void gemm_mma_stage(const T* __restrict__ A, const T* __restrict__ B,
                                               int64_t M, int64_t N, int64_t K, int64_t m0,
                                               int64_t n0, int64_t k0, T* As, T* Bs, bool vec) {
    constexpr int E = 16 / sizeof(T), CK = BK / E, CN = BN / E;
    if (vec) {
        // Thread tid copies chunk tid % C of rows tid / C + i * (GEMM_THREADS / C), C chunks a
        // row: one column and one swizzle per thread (the row step is a multiple of 8), one
        // running source pointer, and a row bound checked against immediates.
        constexpr int AR = GEMM_THREADS / CK, BR = GEMM_THREADS / (BT ? CK : CN);
        static_assert(GEMM_THREADS % CN == 0 && AR % 8 == 0 && BR % 8 == 0, "copy layout");
        const int tid = threadIdx.x;
        {
            const int r = tid / CK, c = tid % CK;
            const int64_t rows = M - m0 - r, gk = k0 + c * E;
            const T* src = A + (m0 + r) * K + gk;
            T* const dst = As + r * BK + gemm_swizzle<CK>(r, c) * E;
#pragma unroll
            for (int i = 0; i < (BM + AR - 1) / AR; ++i, src += AR * K) {
                if (BM % AR == 0 || r + i * AR < BM) {
                    const bool inside = i * AR < rows && gk < K;
                    gemm_cp_async16(dst + i * AR * BK, inside ? src : A, inside);
                }
            }
        }
        if constexpr (BT) {  // B^T ([N, K] in memory): rows of k, as A
            const int n = tid / CK, c = tid % CK;
            const int64_t rows = N - n0 - n, gk = k0 + c * E;
            const T* src = B + (n0 + n) * K + gk;
            T* const dst = Bs + n * BK + gemm_swizzle<CK>(n, c) * E;
#pragma unroll
            for (int i = 0; i < (BN + BR - 1) / BR; ++i, src += BR * K) {
                if (BN % BR == 0 || n + i * BR < BN) {
                    const bool inside = i * BR < rows && gk < K;
                    gemm_cp_async16(dst + i * BR * BK, inside ? src : B, inside);
                }
            }
        } else {  // B ([K, N]): rows of n, read transposed by ldmatrix
            const int k = tid / CN, c = tid % CN;
            const int64_t depth = K - k0 - k, gn = n0 + c * E;
            const T* src = B + (k0 + k) * N + gn;
            T* const dst = Bs + k * BN + gemm_swizzle<CN>(k, c) * E;
#pragma unroll
            for (int i = 0; i < (BK + BR - 1) / BR; ++i, src += BR * N) {
                if (BK % BR == 0 || k + i * BR < BK) {
                    const bool inside = i * BR < depth && gn < N;
                    gemm_cp_async16(dst + i * BR * BN, inside ? src : B, inside);
                }
            }
        }
        return;
    }
    for (int idx = threadIdx.x; idx < BM * BK; idx += GEMM_THREADS) {
        const int r = idx / BK, k = idx % BK;
        const int64_t gr = m0 + r, gk = k0 + k;
        As[r * BK + gemm_swizzle<CK>(r, k / E) * E + k % E] =
            gr < M && gk < K ? A[gr * K + gk] : T(0);
    }
    for (int idx = threadIdx.x; idx < BN * BK; idx += GEMM_THREADS) {
        if constexpr (BT) {
            const int n = idx / BK, k = idx % BK;
            const int64_t gn = n0 + n, gk = k0 + k;
            Bs[n * BK + gemm_swizzle<CK>(n, k / E) * E + k % E] =
                gn < N && gk < K ? B[gn * K + gk] : T(0);
        } else {  // neighbouring threads read neighbouring addresses
            const int k = idx / BN, n = idx % BN;
            const int64_t gn = n0 + n, gk = k0 + k;
            Bs[k * BN + gemm_swizzle<CN>(k, n / E) * E + n % E] =
                gn < N && gk < K ? B[gk * N + gn] : T(0);
        }
    }
}

// 3xTF32: fp32 products from TF32 tensor cores. Each operand splits as x = big + small, big =
// tf32(x) and small = tf32(x - big) (together 22 of fp32's 24 significant bits), and
// a b = a_small b_big + a_big b_small + a_big b_big, the small terms first; the dropped
// a_small b_small lies below fp32's rounding of the product. The tensor cores round an mma's
// fp32 sum toward zero, and along a chain of mma that bias adds up: accumulated in acc over
// all of K, the error grew linearly with K (20x an FMA loop's at K = 8192 with the
// truncation emulated; five KernelBench level-2 tasks past rtol 1e-4 on the H200). So each
// k8 step's three products go to a fresh fragment, which an fp32 add (rounded to nearest,
// unbiased) carries into acc: the truncation touches one step's sum only. a comes in as fp32
// bits and is left as its big part.
template <int FM, int FN>
__device__ __forceinline__ void gemm_mma_3xtf32(float (&acc)[FM][FN][4], uint32_t (&a)[FM][4],
                                                const uint32_t (&b)[FN][2]) {
    uint32_t a_small[FM][4];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const float x = __uint_as_float(a[i][q]);
            a[i][q] = gemm_tf32(x);
            a_small[i][q] = gemm_tf32(x - __uint_as_float(a[i][q]));
        }
#pragma unroll
    for (int j = 0; j < FN; ++j) {
        uint32_t big[2], small[2];
#pragma unroll
        for (int q = 0; q < 2; ++q) {
            const float x = __uint_as_float(b[j][q]);
            big[q] = gemm_tf32(x);
            small[q] = gemm_tf32(x - __uint_as_float(big[q]));
        }
#pragma unroll
        for (int i = 0; i < FM; ++i) {
            float step[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            gemm_mma1688(step, a_small[i], big);
            gemm_mma1688(step, a[i], small);
            gemm_mma1688(step, a[i], big);
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[i][j][q] += step[q];
        }
    }
}

template <int D, bool BT, class Epi>
__device__ __forceinline__ void gemm_mc(const typename GemmElem<D>::T* __restrict__ A,
                                        const typename GemmElem<D>::T* __restrict__ B,
                                        int64_t M, int64_t N, int64_t K, int64_t m0, int64_t n0,
                                        bool vec, Epi& epi) {
    typedef typename GemmElem<D>::T T;
    // E elements per 16-byte chunk; one mma step covers two chunks of k (k16 of 16-bit
    // elements, k8 of tf32 ones), so fragments are addressed in chunks the same way for both.
    constexpr int E = 16 / sizeof(T), STAGES = gemm_stages<D>();
    constexpr int NW = GEMM_THREADS / 32, WARPS_M = gemm_warps_m(NW), WARPS_N = NW / WARPS_M;
    constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N, FM = WTM / 16, FN = WTN / 8;
    constexpr int CK = BK / E, CN = BN / E, A_STAGE = BM * BK, B_STAGE = BN * BK;
    static_assert(WARPS_M > 0 && BK % (2 * E) == 0 && STAGES >= 2, "mma warp tiling");
    static_assert(FN == 1 || FN % 2 == 0, "B fragments load in pairs of n8 tiles");
    static_assert(BT || E == 8, "a [K, N] B is read transposed: 16-bit elements only");
    HIP_DYNAMIC_SHARED(uint16_t, gemm_smem)
    T* const As = reinterpret_cast<T*>(gemm_smem);
    T* const Bs = As + STAGES * A_STAGE;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N;
    // The thread's ldmatrix row in its warp's first fragment, and that row's swizzle (XOR 0 of
    // the chunk gives it): A rows lane % 16; B^T rows (n) and B rows (k) lane % 8 + a half.
    const int a_row = wm * WTM + lane % 16, a_swizzle = gemm_swizzle<CK>(lane, 0);
    const int b_row = BT ? wn * WTN + lane % 8 + (FN == 1 ? 0 : 8 * (lane / 16))
                         : lane % 8 + 8 * ((lane / 8) % 2);
    const int b_swizzle = BT ? gemm_swizzle<CK>(lane, 0) : gemm_swizzle<CN>(lane, 0);
    float acc[FM][FN][4];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.0f;
    const int64_t tiles = (K + BK - 1) / BK;
    // Prologue: the first STAGES - 1 tiles in flight, one commit group each (empty groups past
    // the end keep the group count, and so the wait below, uniform).
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < tiles) {
            gemm_mma_stage<T, BT>(A, B, M, N, K, m0, n0, static_cast<int64_t>(s) * BK,
                                  As + s * A_STAGE, Bs + s * B_STAGE, vec);
        }
        gemm_cp_async_commit();
    }
    int read = 0, write = STAGES - 1;
    for (int64_t kt = 0; kt < tiles; ++kt) {
        // Tile kt has landed (this thread's copies); the barrier makes every thread's copies
        // visible and ends all reads of stage `write` (multiplied in iteration kt - 1).
        gemm_cp_async_wait<STAGES - 2>();
        __syncthreads();
        if (kt + STAGES - 1 < tiles) {
            gemm_mma_stage<T, BT>(A, B, M, N, K, m0, n0, (kt + STAGES - 1) * BK,
                                  As + write * A_STAGE, Bs + write * B_STAGE, vec);
        }
        gemm_cp_async_commit();
        const T* const as = As + read * A_STAGE;
        const T* const bs = Bs + read * B_STAGE;
        // Two mma steps unrolled at most (one for 3xTF32, whose split fragments take 32 more
        // registers): deeper, the compiler keeps the next steps' fragments and addresses live
        // beside 128 accumulators and spills (BK 64 at 64 x 64 warp tiles).
        constexpr int UNROLL = D == DT_F32 ? 1 : 2;
#pragma unroll UNROLL
        for (int kk = 0; kk < BK; kk += 2 * E) {
            uint32_t a[FM][4], b[FN][2];
            // Rows step by 16 (A) and 8 (B^T) and k by 16 (B): the swizzle stays that of the
            // thread's first row, so each fragment is a constant offset from one address.
            // A matrices: rows 0-7 | 8-15 at the step's first chunk of k, then its second.
            const T* const a_at = as + a_row * BK + ((kk / E + lane / 16) ^ a_swizzle) * E;
#pragma unroll
            for (int i = 0; i < FM; ++i) gemm_ldmatrix<4, false>(a[i], a_at + i * 16 * BK);
            if constexpr (BT) {  // matrices: (tile j, chunk 0), (j, chunk 1), (j + 1, chunk 0), ...
                const T* const b_at = bs + b_row * BK + ((kk / E + (lane / 8) % 2) ^ b_swizzle) * E;
                if constexpr (FN == 1) {
                    uint32_t r[2];
                    gemm_ldmatrix<2, false>(r, b_at);
                    b[0][0] = r[0];
                    b[0][1] = r[1];
                } else {
#pragma unroll
                    for (int j = 0; j < FN; j += 2) {
                        uint32_t r[4];
                        gemm_ldmatrix<4, false>(r, b_at + j * 8 * BK);
                        b[j][0] = r[0];
                        b[j][1] = r[1];
                        b[j + 1][0] = r[2];
                        b[j + 1][1] = r[3];
                    }
                }
            } else {  // matrices (k rows, read transposed): (k 0-7, tile j), (k 8-15, j), ...
                const T* const b_at = bs + (kk + b_row) * BN;
                if constexpr (FN == 1) {
                    uint32_t r[2];
                    gemm_ldmatrix<2, true>(r, b_at + ((wn * WTN / 8) ^ b_swizzle) * 8);
                    b[0][0] = r[0];
                    b[0][1] = r[1];
                } else {
#pragma unroll
                    for (int j = 0; j < FN; j += 2) {
                        uint32_t r[4];
                        const int c = (wn * WTN + j * 8) / 8 + lane / 16;
                        gemm_ldmatrix<4, true>(r, b_at + (c ^ b_swizzle) * 8);
                        b[j][0] = r[0];
                        b[j][1] = r[1];
                        b[j + 1][0] = r[2];
                        b[j + 1][1] = r[3];
                    }
                }
            }
            if constexpr (D == DT_F32) {
                gemm_mma_3xtf32(acc, a, b);
            } else {
#pragma unroll
                for (int i = 0; i < FM; ++i)
#pragma unroll
                    for (int j = 0; j < FN; ++j) gemm_mma16816<D>(acc[i][j], a[i], b[j]);
            }
        }
        read = read == STAGES - 1 ? 0 : read + 1;
        write = write == STAGES - 1 ? 0 : write + 1;
    }
    gemm_cp_async_wait<0>();  // only empty groups remain; no copy outlives the block
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int64_t r = m0 + wm * WTM + i * 16 + g + (q >> 1) * 8;
                const int64_t c = n0 + wn * WTN + j * 8 + 2 * t + (q & 1);
                if (r < M && c < N) epi(r, c, acc[i][j][q]);
            }
}
#elif GEMM_MATRIX_CORES == 2
// CDNA3/CDNA4 matrix cores: v_mfma_f32_16x16x16{bf16_1k,f16}, one 16x16 tile per wave of 64.
// Lane l holds A[l % 16][4 * (l / 16) + 0..3], B[4 * (l / 16) + 0..3][l % 16] and
// C[4 * (l / 16) + 0..3][l % 16] (AMD's matrix instruction layout).
typedef short gemm_bf16x4 __attribute__((ext_vector_type(4)));
typedef _Float16 gemm_f16x4 __attribute__((ext_vector_type(4)));
typedef float gemm_f32x4 __attribute__((ext_vector_type(4)));

template <int D>
__device__ __forceinline__ gemm_f32x4 gemm_mfma16(const uint16_t* a, const uint16_t* b,
                                                 gemm_f32x4 c) {
    if constexpr (D == DT_BF16) {
        return __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(
            *reinterpret_cast<const gemm_bf16x4*>(a), *reinterpret_cast<const gemm_bf16x4*>(b),
            c, 0, 0, 0);
    } else {
        return __builtin_amdgcn_mfma_f32_16x16x16f16(*reinterpret_cast<const gemm_f16x4*>(a),
                                                     *reinterpret_cast<const gemm_f16x4*>(b),
                                                     c, 0, 0, 0);
    }
}

template <int D, bool BT, class Epi>
__device__ __forceinline__ void gemm_mc(const uint16_t* __restrict__ A,
                                        const uint16_t* __restrict__ B, int64_t M, int64_t N,
                                        int64_t K, int64_t m0, int64_t n0, bool vec,
                                        Epi& epi) {
    constexpr int NW = GEMM_THREADS / 64, WARPS_M = NW >= 4 ? 2 : 1, WARPS_N = NW / WARPS_M;
    constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N, FM = WTM / 16, FN = WTN / 16;
    constexpr int LD = BK + 8;  // rows stay 16-byte aligned; fragment reads spread over banks
    static_assert(WTM % 16 == 0 && WTN % 16 == 0 && BK % 16 == 0, "MFMA wave tiling");
    __shared__ GemmTile<uint16_t, BM, LD> As;
    __shared__ GemmTile<uint16_t, BN, LD> Bs;
    const int wave = threadIdx.x / 64, lane = threadIdx.x % 64, l16 = lane % 16, lq = lane / 16;
    const int wm = wave / WARPS_N, wn = wave % WARPS_N;
    gemm_f32x4 acc[FM][FN];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) acc[i][j] = gemm_f32x4{0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t k0 = 0; k0 < K; k0 += BK) {
        gemm_stage<D, D, BT, true, uint16_t, BK, LD>(A, B, M, N, K, m0, n0, k0, As, Bs, vec);
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
#pragma unroll
            for (int i = 0; i < FM; ++i)
#pragma unroll
                for (int j = 0; j < FN; ++j)
                    acc[i][j] = gemm_mfma16<D>(&As.v[wm * WTM + i * 16 + l16][kk + lq * 4],
                                               &Bs.v[wn * WTN + j * 16 + l16][kk + lq * 4],
                                               acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int64_t r = m0 + wm * WTM + i * 16 + lq * 4 + q;
                const int64_t c = n0 + wn * WTN + j * 16 + l16;
                if (r < M && c < N) epi(r, c, acc[i][j][q]);
            }
}
#endif

// C = A @ B (B transposed in memory when BT) for this block's tile; epi(r, c, value) for every
// element inside the matrix. LONG_K: the portable path's two-level sum (GEMM_LONG_K).
template <int DA, int DB, bool BT, bool LONG_K, class Epi>
__device__ __forceinline__ void gemm_block(const typename GemmElem<DA>::T* __restrict__ A,
                                           const typename GemmElem<DB>::T* __restrict__ B,
                                           int64_t M, int64_t N, int64_t K, bool vec,
                                           Epi epi) {
    // Grouped order: consecutive blocks walk GEMM_GROUP tile rows down one tile column before
    // moving right, so the A rows and B columns in use at once stay in L2.
    constexpr int64_t GEMM_GROUP = 8;
    const int64_t tiles_n = gridDim.x, tiles_m = gridDim.y;
    const int64_t id = static_cast<int64_t>(blockIdx.y) * tiles_n + blockIdx.x;
    const int64_t first = id / (GEMM_GROUP * tiles_n) * GEMM_GROUP;
    const int64_t rows = tiles_m - first < GEMM_GROUP ? tiles_m - first : GEMM_GROUP;
    const int64_t within = id % (GEMM_GROUP * tiles_n);
    const int64_t m0 = (first + within % rows) * BM;
    const int64_t n0 = within / rows * BN;
#if GEMM_MATRIX_CORES == 1
    if constexpr (gemm_nvidia_tensor_cores<DA, DB, BT>()) {
        gemm_mc<DA, BT>(A, B, M, N, K, m0, n0, vec, epi);
    } else {
        gemm_fma<DA, DB, BT, LONG_K>(A, B, M, N, K, m0, n0, vec, epi);
    }
#elif GEMM_MATRIX_CORES == 2
    if constexpr (DA == DB && DA != DT_F32) {
        gemm_mc<DA, BT>(A, B, M, N, K, m0, n0, vec, epi);
    } else {
        gemm_fma<DA, DB, BT, LONG_K>(A, B, M, N, K, m0, n0, vec, epi);
    }
#else
    gemm_fma<DA, DB, BT, LONG_K>(A, B, M, N, K, m0, n0, vec, epi);
#endif
}
