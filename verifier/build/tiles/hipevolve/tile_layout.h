// hipevolve/tile_layout.h: which lane of a wave holds which element of a matrix instruction's
// operands, for the instructions hipevolve/tile.h uses. Pure constexpr index arithmetic, no
// includes: the CPU tests (tests/test_tile_layout.py) compile this file on the host and check
// every (lane, item) against an emulation of the vendors' documented layouts.
//
// Conventions: the instruction computes D[M x N] = A[M x K] B[K x N] + C, fp32 C/D, bf16 A/B.
// `item` counts a lane's elements of one operand in register order: for 16-bit operands two
// items share a 32-bit register, the even item in the low half.
#pragma once

#if defined(__HIPCC__) || defined(__CUDACC__)
#define HVT_HD __host__ __device__
#else
#define HVT_HD
#endif

namespace hvt {

// AMD CDNA3 (gfx942) v_mfma_f32_16x16x16bf16_1k, wave64 (AMD matrix instruction calculator,
// CDNA3 ISA "Matrix fused multiply-add"): lane l holds A[l % 16][4 (l / 16) + i],
// B[4 (l / 16) + i][l % 16] and D[4 (l / 16) + i][l % 16], i = 0..3.
struct Mfma16x16x16Bf16 {
    static constexpr int M = 16, N = 16, K = 16, LANES = 64;
    static constexpr int A_ITEMS = 4, B_ITEMS = 4, C_ITEMS = 4;
    HVT_HD static constexpr int a_row(int lane, int) { return lane % 16; }
    HVT_HD static constexpr int a_col(int lane, int item) { return 4 * (lane / 16) + item; }
    HVT_HD static constexpr int b_row(int lane, int item) { return 4 * (lane / 16) + item; }
    HVT_HD static constexpr int b_col(int lane, int) { return lane % 16; }
    HVT_HD static constexpr int c_row(int lane, int item) { return 4 * (lane / 16) + item; }
    HVT_HD static constexpr int c_col(int lane, int) { return lane % 16; }
};

// NVIDIA mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, warp32 (PTX ISA, "Matrix
// Fragments for mma.m16n8k16"), g = lane / 4, t = lane % 4: A registers a0..a3 hold
// (g, 2t..2t+1), (g + 8, 2t..), (g, 2t + 8..), (g + 8, 2t + 8..); B registers b0, b1 hold
// (2t..2t+1, g), (2t + 8.., g); C/D c0..c3 hold (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1).
struct MmaM16n8k16Bf16 {
    static constexpr int M = 16, N = 8, K = 16, LANES = 32;
    static constexpr int A_ITEMS = 8, B_ITEMS = 4, C_ITEMS = 4;
    HVT_HD static constexpr int a_row(int lane, int item) { return lane / 4 + 8 * (item / 2 % 2); }
    HVT_HD static constexpr int a_col(int lane, int item) {
        return 2 * (lane % 4) + item % 2 + 8 * (item / 4);
    }
    HVT_HD static constexpr int b_row(int lane, int item) {
        return 2 * (lane % 4) + item % 2 + 8 * (item / 2);
    }
    HVT_HD static constexpr int b_col(int lane, int) { return lane / 4; }
    HVT_HD static constexpr int c_row(int lane, int item) { return lane / 4 + 8 * (item / 2); }
    HVT_HD static constexpr int c_col(int lane, int item) { return 2 * (lane % 4) + item % 2; }
};

#if defined(__HIP_PLATFORM_AMD__)
using Atom = Mfma16x16x16Bf16;
#else
using Atom = MmaM16n8k16Bf16;
#endif

}  // namespace hvt
