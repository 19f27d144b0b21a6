// hipevolve/tile.h: register tiles over the matrix cores, one source for NVIDIA and AMD.
//
// A wave (64 lanes on CDNA, a 32-lane warp on NVIDIA) holds register tiles (fragments) of a
// matrix instruction ("atom", hipevolve/tile_layout.h):
//   TileA<R, K>  bf16 left operand A[R x K]           (R, K multiples of 16)
//   TileB<K, N>  bf16 right operand B[K x N]          (K, N multiples of 16)
//   TileC<R, N>  fp32 accumulator C[R x N]
// and multiplies them: mma(c, a, b) is c += a b, one atom at a time:
//   AMD  (gfx90a, gfx942, gfx950): v_mfma_f32_16x16x16bf16_1k, 16 x 16 x 16 per wave64;
//   NVIDIA (sm_80+): mma.sync.aligned.m16n8k16 bf16, 16 x 8 x 16 per warp32.
// Tiles load from LDS or global memory through an accessor at(row, col) -> the bf16 bits
// (uint16_t): row_major(p, ld) reads p[row * ld + col], col_major(p, ld) p[col * ld + row]
// (so B = K^T of a row-major K is load_b(b, col_major(k, ld))); any other layout (swizzled
// LDS, masks) is a lambda. Accumulators go out through each(c, f): f(row, col, float&) on every
// element this lane holds, for stores, scaling and masks.
// The lane is threadIdx.x % Atom::LANES (one-dimensional blocks); which rows and columns of a
// larger matrix a wave owns is the caller's choice (offset the accessor).
#pragma once
#include <hip/hip_runtime.h>
#include <stdint.h>

#include "tile_layout.h"

#define HVT_DEV __device__ __forceinline__

namespace hvt {

template <int R, int K>
struct TileA {
    static_assert(R % Atom::M == 0 && K % Atom::K == 0, "TileA: R and K multiples of the atom");
    static constexpr int TM = R / Atom::M, TK = K / Atom::K;
    uint32_t w[TM][TK][Atom::A_ITEMS / 2];  // two bf16 items a register, the even one low
};

template <int K, int N>
struct TileB {
    static_assert(K % Atom::K == 0 && N % 16 == 0, "TileB: K and N multiples of 16");
    static constexpr int TK = K / Atom::K, TN = N / Atom::N;
    uint32_t w[TK][TN][Atom::B_ITEMS / 2];
};

template <int R, int N>
struct TileC {
    static_assert(R % Atom::M == 0 && N % 16 == 0, "TileC: R and N multiples of 16");
    static constexpr int TM = R / Atom::M, TN = N / Atom::N;
    float x[TM][TN][Atom::C_ITEMS];
};

HVT_DEV int lane() { return static_cast<int>(threadIdx.x) % Atom::LANES; }

struct RowMajor {
    const uint16_t* p;
    int ld;
    HVT_DEV uint16_t operator()(int r, int c) const { return p[r * ld + c]; }
};
struct ColMajor {
    const uint16_t* p;
    int ld;
    HVT_DEV uint16_t operator()(int r, int c) const { return p[c * ld + r]; }
};
HVT_DEV RowMajor row_major(const uint16_t* p, int ld) { return {p, ld}; }
HVT_DEV ColMajor col_major(const uint16_t* p, int ld) { return {p, ld}; }

template <int R, int K, class At>
HVT_DEV void load_a(TileA<R, K>& a, At at) {
    const int l = lane();
#pragma unroll
    for (int m = 0; m < a.TM; ++m)
#pragma unroll
        for (int kk = 0; kk < a.TK; ++kk)
#pragma unroll
            for (int r = 0; r < Atom::A_ITEMS / 2; ++r) {
                const int i = 2 * r;
                const uint32_t lo = at(m * Atom::M + Atom::a_row(l, i), kk * Atom::K + Atom::a_col(l, i));
                const uint32_t hi =
                    at(m * Atom::M + Atom::a_row(l, i + 1), kk * Atom::K + Atom::a_col(l, i + 1));
                a.w[m][kk][r] = lo | hi << 16;
            }
}

template <int K, int N, class At>
HVT_DEV void load_b(TileB<K, N>& b, At at) {
    const int l = lane();
#pragma unroll
    for (int kk = 0; kk < b.TK; ++kk)
#pragma unroll
        for (int n = 0; n < b.TN; ++n)
#pragma unroll
            for (int r = 0; r < Atom::B_ITEMS / 2; ++r) {
                const int i = 2 * r;
                const uint32_t lo = at(kk * Atom::K + Atom::b_row(l, i), n * Atom::N + Atom::b_col(l, i));
                const uint32_t hi =
                    at(kk * Atom::K + Atom::b_row(l, i + 1), n * Atom::N + Atom::b_col(l, i + 1));
                b.w[kk][n][r] = lo | hi << 16;
            }
}

template <int R, int N>
HVT_DEV void zero(TileC<R, N>& c) {
#pragma unroll
    for (int m = 0; m < c.TM; ++m)
#pragma unroll
        for (int n = 0; n < c.TN; ++n)
#pragma unroll
            for (int i = 0; i < Atom::C_ITEMS; ++i) c.x[m][n][i] = 0.0f;
}

// f(row, col, x) on each accumulator element this lane holds (row, col within the tile).
template <int R, int N, class F>
HVT_DEV void each(TileC<R, N>& c, F f) {
    const int l = lane();
#pragma unroll
    for (int m = 0; m < c.TM; ++m)
#pragma unroll
        for (int n = 0; n < c.TN; ++n)
#pragma unroll
            for (int i = 0; i < Atom::C_ITEMS; ++i)
                f(m * Atom::M + Atom::c_row(l, i), n * Atom::N + Atom::c_col(l, i), c.x[m][n][i]);
}

// ---- the atom: one matrix instruction per wave -------------------------------------------
#if defined(__HIP_PLATFORM_AMD__)
typedef short hvt_bf16x4 __attribute__((ext_vector_type(4)));
typedef float hvt_floatx4 __attribute__((ext_vector_type(4)));

HVT_DEV void atom_mma(float (&d)[4], const uint32_t (&a)[2], const uint32_t (&b)[2]) {
    hvt_bf16x4 av, bv;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        av[i] = static_cast<short>(a[i / 2] >> (16 * (i % 2)));
        bv[i] = static_cast<short>(b[i / 2] >> (16 * (i % 2)));
    }
    hvt_floatx4 acc = {d[0], d[1], d[2], d[3]};
    acc = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(av, bv, acc, 0, 0, 0);
#pragma unroll
    for (int i = 0; i < 4; ++i) d[i] = acc[i];
}
#else
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "hipevolve/tile.h: bf16 mma.sync needs sm_80 or newer"
#endif
// ---- PTX primitives (begin)
HVT_DEV void atom_mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// ---- PTX primitives (end)
#endif

// c += a b
template <int R, int K, int N>
HVT_DEV void mma(TileC<R, N>& c, const TileA<R, K>& a, const TileB<K, N>& b) {
#pragma unroll
    for (int kk = 0; kk < a.TK; ++kk)
#pragma unroll
        for (int m = 0; m < c.TM; ++m)
#pragma unroll
            for (int n = 0; n < c.TN; ++n) atom_mma(c.x[m][n], a.w[m][kk], b.w[kk][n]);
}

}  // namespace hvt
