// A GEMM on hipevolve/tile.h: C[M x N] (fp32) = A[M x K] B[K x N] (bf16, row-major), M, N
// multiples of 64 and K of 32. A block of 4 waves owns a 64 x 64 tile of C (each wave 16 rows);
// 64 x 32 slices of A and 32 x 64 of B go through LDS. The same source runs mma.sync on NVIDIA
// and MFMA on AMD (tests/test_tile_layer.py).
#include <hip/hip_runtime.h>
#include <hipevolve/tile.h>

constexpr int BM = 64, BN = 64, BK = 32, WAVES = 4;
constexpr int THREADS = WAVES * hvt::Atom::LANES;

__global__ void __launch_bounds__(THREADS) tile_gemm(const uint16_t* a, const uint16_t* b,
                                                     float* c, int M, int N, int K) {
    __shared__ uint16_t sa[BM * BK], sb[BK * BN];
    const int wave = threadIdx.x / hvt::Atom::LANES;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    hvt::TileC<16, BN> acc;
    hvt::zero(acc);
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int e = threadIdx.x; e < BM * BK; e += THREADS)
            sa[e] = a[(m0 + e / BK) * K + k0 + e % BK];
        for (int e = threadIdx.x; e < BK * BN; e += THREADS)
            sb[e] = b[(k0 + e / BN) * N + n0 + e % BN];
        __syncthreads();
        hvt::TileA<16, BK> ta;
        hvt::TileB<BK, BN> tb;
        hvt::load_a(ta, hvt::row_major(sa + wave * 16 * BK, BK));
        hvt::load_b(tb, hvt::row_major(sb, BN));
        hvt::mma(acc, ta, tb);
        __syncthreads();
    }
    float* out = c + (m0 + wave * 16) * N + n0;
    hvt::each(acc, [&](int r, int col, float x) { out[r * N + col] = x; });
}

extern "C" hipError_t tile_gemm_launch(const uint16_t* a, const uint16_t* b, float* c, int M,
                                       int N, int K, hipStream_t stream) {
    if (M % BM || N % BN || K % BK) return hipErrorInvalidValue;
    hipLaunchKernelGGL(tile_gemm, dim3(N / BN, M / BM), dim3(THREADS), 0, stream, a, b, c, M, N,
                       K);
    return hipGetLastError();
}
