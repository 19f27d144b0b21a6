// Worked example: one gfx942 matrix-core (MFMA) instruction per wave, with its lane layout.
// C[16x16] (fp32) = A[16x16] (bf16, row-major) x B[16x16] (bf16, row-major); one wave of 64 lanes.
// v_mfma_f32_16x16x16bf16_1k (AMD's matrix instruction calculator; wave64, CDNA3):
//   A[i][k]: lane = i + 16 * (k / 4), item k % 4     -> lane l holds A[l % 16][4 * (l / 16) + 0..3]
//   B[k][j]: lane = j + 16 * (k / 4), item k % 4     -> lane l holds B[4 * (l / 16) + 0..3][l % 16]
//   D[i][j]: lane = j + 16 * (i / 4), item i % 4     -> lane l holds D[4 * (l / 16) + 0..3][l % 16]
// The 32x32x8 shape (v_mfma_f32_32x32x8bf16_1k): A[i][k] lane = i + 32 * (k / 4), item k % 4;
// D[i][j] lane = j + 32 * ((i / 4) % 2), item (i % 4) + 4 * (i / 8) (16 floats a lane).
// NVIDIA has no MFMA: keep a portable path under the other branch (here, plain FMAs).
#include <hip/hip_runtime.h>
#include <stdint.h>

#if defined(__HIP_PLATFORM_AMD__)
typedef short bf16x4 __attribute__((ext_vector_type(4)));
typedef float floatx4 __attribute__((ext_vector_type(4)));
#endif

__device__ inline float bf16_to_float(uint16_t h) { return __uint_as_float(uint32_t(h) << 16); }

__global__ void mfma_16x16x16_bf16(const uint16_t* a, const uint16_t* b, float* c) {
    const int lane = threadIdx.x;  // one wave: 64 lanes
#if defined(__HIP_PLATFORM_AMD__)
    const int r = lane % 16, k0 = 4 * (lane / 16);  // A row, B and D column
    bf16x4 av, bv;
    for (int j = 0; j < 4; ++j) {
        av[j] = static_cast<short>(a[r * 16 + k0 + j]);    // A[lane % 16][k0 + j]
        bv[j] = static_cast<short>(b[(k0 + j) * 16 + r]);  // B[k0 + j][lane % 16]
    }
    floatx4 acc = {0.f, 0.f, 0.f, 0.f};
    acc = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(av, bv, acc, 0, 0, 0);
    for (int j = 0; j < 4; ++j) c[(k0 + j) * 16 + r] = acc[j];  // D[k0 + j][lane % 16]
#else
    for (int e = lane; e < 256; e += blockDim.x) {
        const int i = e / 16, n = e % 16;
        float sum = 0.f;
        for (int k = 0; k < 16; ++k) sum += bf16_to_float(a[i * 16 + k]) * bf16_to_float(b[k * 16 + n]);
        c[e] = sum;
    }
#endif
}

extern "C" hipError_t mfma_example(const uint16_t* a, const uint16_t* b, float* c, hipStream_t stream) {
    hipLaunchKernelGGL(mfma_16x16x16_bf16, dim3(1), dim3(64), 0, stream, a, b, c);
    return hipGetLastError();
}
