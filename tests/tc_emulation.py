"""NVIDIA's warp-level tensor-core instructions, emulated on CPU threads from the PTX ISA's
fragment layouts, so the GDN prefill seed's tensor-core kernels (gdn_tc_prep, gdn_tc_scan) run
on a machine without a GPU (tests/test_gdn_tensor_core.py).

The seed wraps every PTX instruction in one function of its "PTX primitives" section;
`cpu_tensor_core_source` swaps that section for the C++ below. The CPU shim of
tests/gdn_cpu_threads.py runs one OS thread per GPU thread; its per-warp barriers let the 32
lanes of a warp exchange their registers through memory, as mma.sync, ldmatrix and the shuffles
do in hardware:
- mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, g = lane / 4, t = lane % 4: A's registers
  a0..a3 hold (row g, columns 2t, 2t + 1), (g + 8, 2t..), (g, 2t + 8..), (g + 8, 2t + 8..); B's
  b0, b1 hold (rows 2t, 2t + 1 | 2t + 8, 2t + 9; column g); C's c0..c3 hold (g, 2t), (g, 2t + 1),
  (g + 8, 2t), (g + 8, 2t + 1). The lower column (or row) of a pair is the low half of a register.
  Products are summed in fp32 in k order (hardware's order differs in the last bits).
- ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lane 8i + r gives the address of row r of
  matrix i; register i of lane l holds matrix i's (row l / 4, columns 2 (l % 4), + 1), or with
  .trans its (rows 2 (l % 4), + 1; column l / 4).
- cp.async copies at once (zeros when its source size is 0); commit and wait do nothing.
- cvt.rn.bf16x2.f32 rounds to nearest even.
- ex2.approx.ftz.f32 (tc_exp) is exp2f, with results below 2^-126 flushed to zero.
"""

from __future__ import annotations

import re

BEGIN = "// ---- PTX primitives"
END = "// ---- end of PTX primitives"

CPU_TENSOR_CORES = r"""
// ---- PTX primitives, emulated on CPU threads (tests/tc_emulation.py) ----------------------
// This lane's row of the warp's exchange area (8 words a lane), between two warp barriers.
inline uint32_t* cpu_lane_words(int lane) {
    return cpu_warp_exchange.data() + (threadIdx.x / 32) * 32 * 8 + lane * 8;
}

inline uint16_t cpu_half(uint32_t word, int high) { return high ? word >> 16 : word & 0xffffu; }
inline float cpu_bf16(uint16_t h) { return __uint_as_float(static_cast<uint32_t>(h) << 16); }

__device__ __forceinline__ void tc_mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                       uint32_t b1) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    uint32_t* mine = cpu_lane_words(lane);
    for (int i = 0; i < 4; ++i) mine[i] = a[i];
    mine[4] = b0;
    mine[5] = b1;
    cpu_warp_sync();
    auto A = [&](int r, int k) {
        const uint32_t* w = cpu_lane_words((r % 8) * 4 + (k % 8) / 2);
        return cpu_bf16(cpu_half(w[(r >= 8) + 2 * (k >= 8)], k % 2));
    };
    auto B = [&](int k, int c) {
        const uint32_t* w = cpu_lane_words(c * 4 + (k % 8) / 2);
        return cpu_bf16(cpu_half(w[4 + (k >= 8)], k % 2));
    };
    float out[4];
    for (int e = 0; e < 4; ++e) {
        const int r = g + 8 * (e / 2), c = 2 * t + e % 2;
        float sum = d[e];
        for (int k = 0; k < 16; ++k) sum += A(r, k) * B(k, c);
        out[e] = sum;
    }
    cpu_warp_sync();
    for (int e = 0; e < 4; ++e) d[e] = out[e];
}

template <bool TRANS>
__device__ __forceinline__ void tc_ldsm4(uint32_t (&r)[4], const uint16_t* row) {
    const int lane = threadIdx.x % 32;
    const uint16_t** rows = reinterpret_cast<const uint16_t**>(cpu_lane_words(0));
    rows[lane] = row;  // the warp's exchange area holds its 32 row pointers
    cpu_warp_sync();
    for (int i = 0; i < 4; ++i) {
        uint16_t lo, hi;
        if constexpr (TRANS) {
            lo = rows[8 * i + 2 * (lane % 4)][lane / 4];
            hi = rows[8 * i + 2 * (lane % 4) + 1][lane / 4];
        } else {
            lo = rows[8 * i + lane / 4][2 * (lane % 4)];
            hi = rows[8 * i + lane / 4][2 * (lane % 4) + 1];
        }
        r[i] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
    }
    cpu_warp_sync();
}

__device__ __forceinline__ void tc_cp16(void* dst, const void* src, bool inside) {
    if (inside) {
        std::memcpy(dst, src, 16);
    } else {
        std::memset(dst, 0, 16);
    }
}

__device__ __forceinline__ void tc_commit() {}

__device__ __forceinline__ void tc_wait_all() {}

template <int pending>
__device__ __forceinline__ void tc_wait_pending() {}

__device__ __forceinline__ uint32_t tc_pack(float lo, float hi) {
    return bf16_bits(lo) | (bf16_bits(hi) << 16);
}

// ex2.approx.ftz.f32 of x log2(e): exp2 in fp32 (the hardware's is within about 2^-22 of it),
// results below 2^-126 flushed to zero as .ftz does.
__device__ __forceinline__ float tc_exp(float x) {
    const float r = exp2f(x * 1.4426950408889634f);
    return r < 1.17549435e-38f ? 0.0f : r;
}
"""

# What the tensor-core kernels need beyond the shim of tests/gdn_cpu_threads.py (which has no
# warps): per-warp barriers and exchange memory, warp shuffles, float2, and the device facts the
# launcher asks for (an sm_90 with 227 KB of shared memory per block).
CPU_WARPS = r"""
#include <memory>
struct alignas(8) float2 { float x, y; };
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline std::vector<uint32_t> cpu_warp_exchange;
inline std::vector<std::barrier<>*> cpu_warp_barriers;
inline void cpu_warp_sync() { cpu_warp_barriers[threadIdx.x / 32]->arrive_and_wait(); }
inline float cpu_warp_read(float value, int from) {
    float* slots = reinterpret_cast<float*>(cpu_warp_exchange.data()) + (threadIdx.x / 32) * 32 * 8;
    slots[threadIdx.x % 32] = value;
    cpu_warp_sync();
    const float out = slots[from];
    cpu_warp_sync();
    return out;
}
inline float __shfl_up_sync(unsigned, float value, int delta) {
    const int lane = threadIdx.x % 32;
    return cpu_warp_read(value, lane >= delta ? lane - delta : lane);
}
inline float __shfl_xor_sync(unsigned, float value, int mask) {
    return cpu_warp_read(value, (threadIdx.x % 32) ^ mask);
}
"""


def cpu_tensor_core_source(source: str) -> str:
    """The seed's source with its PTX primitives replaced by the CPU emulation."""
    pattern = re.compile(rf"^{re.escape(BEGIN)}.*?^{re.escape(END)}[^\n]*$", re.S | re.M)
    replaced, count = pattern.subn(lambda _: CPU_TENSOR_CORES, source)
    assert count == 1, "the seed has no single PTX primitives section"
    return "#define __HIP_PLATFORM_NVIDIA__ 1\n" + replaced


# Edits of the CPU shim (tests/gdn_cpu_threads.py): each text must appear once.
LAUNCH = "                std::barrier<> bar(n);\n                cpu_barrier = &bar;\n"
WARP_EDITS = (
    # each block's launch: one barrier and an exchange area per 32 threads
    (LAUNCH, LAUNCH + (
        "                std::vector<std::unique_ptr<std::barrier<>>> warps;\n"
        "                cpu_warp_barriers.clear();\n"
        "                for (unsigned w = 0; w < n / 32; ++w) {\n"
        "                    warps.push_back(std::make_unique<std::barrier<>>(32));\n"
        "                    cpu_warp_barriers.push_back(warps.back().get());\n"
        "                }\n"
        "                cpu_warp_exchange.assign(n * 8, 0u);\n")),
    # the device facts the tensor-core launcher asks for: an sm_90 with 227 KB per block
    ("enum hipDeviceAttribute_t { hipDeviceAttributeMultiprocessorCount };",
     "enum hipDeviceAttribute_t { hipDeviceAttributeMultiprocessorCount,\n"
     "    hipDeviceAttributeComputeCapabilityMajor, hipDeviceAttributeSharedMemPerBlockOptin };\n"
     "enum { hipFuncAttributePreferredSharedMemoryCarveout = 1 };"),
    ("hipDeviceGetAttribute(int* value, hipDeviceAttribute_t, int)",
     "hipDeviceGetAttribute(int* value, hipDeviceAttribute_t a, int)"),
    ("    *value = CPU_SMS;\n",
     "    *value = a == hipDeviceAttributeComputeCapabilityMajor ? 9\n"
     "             : a == hipDeviceAttributeSharedMemPerBlockOptin ? 232448 : CPU_SMS;\n"),
    ("inline hipError_t hipFuncSetAttribute(const void*, hipFuncAttribute, int)",
     "inline hipError_t hipFuncSetAttribute(const void*, int, int)"),
    ("#define HIP_DYNAMIC_SHARED", CPU_WARPS + "#define HIP_DYNAMIC_SHARED"),
)  # fmt: skip


def with_warps(runtime: str) -> str:
    """The CPU shim with warps (per-warp barriers, exchange memory, shuffles) and a device that
    reports an sm_90."""
    for old, new in WARP_EDITS:
        assert runtime.count(old) == 1, f"the CPU shim changed: {old.strip()[:60]!r}"
        runtime = runtime.replace(old, new)
    return runtime
