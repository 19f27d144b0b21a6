"""The matrix-core paths of the lowered GEMM template on CPU threads: their data-moving and
matrix instructions (PTX mma.sync, ldmatrix, cp.async, cvt.rna.tf32; AMD MFMA) emulated from
what the vendors document, around the kernel's own code (tests/test_lowering_gemm.py)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from test_lowering import CPU_BF16, CPU_FP16, SHIM_EXTRAS

# The data-moving and matrix instructions of each matrix-core path, computed on CPU threads from
# what the vendors document; everything around them (the pipeline, swizzled addressing,
# fragment indexing, the epilogue) is the lowered kernel's own code. Instructions that exchange
# data across a warp (wave) publish between two barriers, as every thread of the block reaches
# each of them together.
PRIMITIVES = ("// ---- PTX primitives (begin)", "// ---- PTX primitives (end)")
EMULATED_MMA = r"""
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <deque>
static uint32_t emu_a[1024][4], emu_b[1024][2];
static const uint16_t* emu_rows[1024];
static std::atomic<int> emu_error{0};  // what the next hipGetLastError() reports
static float emu_half(int d, uint32_t h) {
    if (d == 1) return __uint_as_float((h & 0xffffu) << 16);
    return __half2float(__ushort_as_half(static_cast<uint16_t>(h)));
}
// Dynamic shared memory, as CUDA has it: above 48 KB a launch fails unless the kernel's limit
// was raised. One buffer serves every block (the shim runs one block at a time); each launch
// poisons all of it with NaN bits (stale or unwritten tiles show), and the bytes past the
// launch's size must still hold the poison afterwards.
alignas(128) static unsigned char emu_smem[1 << 18];
static int emu_smem_limit = 48 * 1024;
#define HIP_DYNAMIC_SHARED(type, var) type* var = reinterpret_cast<type*>(emu_smem);
#define hipFuncAttributeMaxDynamicSharedMemorySize 8
inline hipError_t hipFuncSetAttribute(const void*, int attribute, int value) {
    if (attribute != 8 || value > static_cast<int>(sizeof(emu_smem))) return 1;
    emu_smem_limit = value;
    return hipSuccess;
}
template <class F> void emu_launch(dim3 grid, dim3 block, int bytes, F body) {
    if (bytes > emu_smem_limit) {
        emu_error = 2;
        return;
    }
    std::memset(emu_smem, 0xff, sizeof(emu_smem));
    cpu_launch(grid, block, body);
    for (size_t i = bytes; i < sizeof(emu_smem); ++i)
        if (emu_smem[i] != 0xff) emu_error = 3;
}
#undef hipLaunchKernelGGL
#define hipLaunchKernelGGL(kernel, grid, block, lds, stream, ...) \
    emu_launch((grid), (block), (lds), [=] { kernel(__VA_ARGS__); })
inline hipError_t emu_last_error() { return emu_error.exchange(0); }
#define hipGetLastError() emu_last_error()
static bool emu_in_smem(const void* p, size_t bytes) {
    const auto* c = static_cast<const unsigned char*>(p);
    return c >= emu_smem && c + bytes <= emu_smem + emu_smem_limit &&
           reinterpret_cast<uintptr_t>(p) % 16 == 0;
}
struct EmuCopy { void* dst; const void* src; bool inside; };
static thread_local std::vector<EmuCopy> emu_open;  // issued, not yet committed
static thread_local std::deque<std::vector<EmuCopy>> emu_groups;  // committed, in flight
"""
# PTX ISA, mma.m16n8k16 with .bf16/.f16: g = lane / 4, t = lane % 4; a0..a3 hold (row g | g + 8,
# k 2t, 2t + 1 | 2t + 8, 2t + 9) in the order (g, k), (g + 8, k), (g, k + 8), (g + 8, k + 8);
# b0, b1 hold (k 2t, 2t + 1 | 2t + 8, 2t + 9, column g); c0..c3 (row g | g + 8, column 2t, 2t + 1).
# ldmatrix.sync.aligned.m8n8.{x2,x4}[.trans].shared.b16: lanes 8i..8i+7 give the addresses of
# rows 0..7 of matrix i (16 aligned bytes each); lane l receives in register i the elements
# (row l / 4, columns 2 (l % 4), 2 (l % 4) + 1) of matrix i, or with .trans of its transpose,
# the lower column in the lower half.
# cp.async.cg.shared.global [dst], [src], 16, src-size: 16 bytes, zero-filled past src-size,
# complete only once cp.async.wait_group N leaves at most N of the thread's committed groups
# (cp.async.commit_group) pending: the emulation copies then, so a read before the wait sees
# the poison or a stale tile.
EMULATED_PTX = r"""
// Rounding toward zero of an exact sum to fp32: what the tensor cores do with the sum of an
// mma's products and its accumulator (the PTX ISA leaves the rounding unspecified; measured
// on V100, T4 and A100: products exact, the aligned sum truncated. Fasi, Higham, Mikaitis,
// Pranesh, "Numerical behavior of NVIDIA tensor cores", PeerJ CS 2021). The bias is what
// makes a long chain of mma accumulations drift from an fp32 FMA loop.
static float emu_truncate(double s) {
    float f = static_cast<float>(s);
    if (std::fabs(static_cast<double>(f)) > std::fabs(s)) f = std::nextafter(f, 0.0f);
    return f;
}

// One warp's d += A B from its published fragments; P elements per 32-bit register (2 for
// 16-bit operands, k16; 1 for tf32, k8), value(register, element) the element as a float.
// The products and their sum with d are exact (double: a tf32 or 16-bit product has at most
// 22 significant bits), the result truncated to fp32 (emu_truncate).
template <int P, class Value>
static void emu_mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], Value value) {
    constexpr int KH = 4 * P;  // k per register pair of a row: half the mma's depth
    const unsigned tid = threadIdx.x, base = tid - tid % 32, g = tid % 32 / 4, t = tid % 4;
    for (int i = 0; i < 4; ++i) emu_a[tid][i] = a[i];
    emu_b[tid][0] = b[0];
    emu_b[tid][1] = b[1];
    __syncthreads();
    for (int q = 0; q < 4; ++q) {
        const unsigned row = g + (q >> 1) * 8, col = 2 * t + (q & 1);
        double s = d[q];
        for (int k = 0; k < 2 * KH; ++k) {
            const uint32_t ra = emu_a[base + (row % 8) * 4 + (k % KH) / P][row / 8 + 2 * (k / KH)];
            const uint32_t rb = emu_b[base + col * 4 + (k % KH) / P][k / KH];
            s += static_cast<double>(value(ra, k % P)) * value(rb, k % P);
        }
        d[q] = emu_truncate(s);
    }
    __syncthreads();
}

template <int D>
__device__ __forceinline__ void gemm_mma16816(float (&d)[4], const uint32_t (&a)[4],
                                              const uint32_t (&b)[2]) {
    emu_mma<2>(d, a, b, [](uint32_t r, int half) { return emu_half(D, half ? r >> 16 : r); });
}

// mma.m16n8k8 with .tf32: a0..a3 hold (row g | g + 8, k t | t + 4) in the order (g, t),
// (g + 8, t), (g, t + 4), (g + 8, t + 4); b0, b1 (k t | t + 4, column g); c0..c3 as above. The
// tensor core reads only an operand's TF32 bits (the low 13 are dropped).
__device__ __forceinline__ void gemm_mma1688(float (&d)[4], const uint32_t (&a)[4],
                                             const uint32_t (&b)[2]) {
    emu_mma<1>(d, a, b, [](uint32_t r, int) { return __uint_as_float(r & 0xffffe000u); });
}

// cvt.rna.tf32.f32: to nearest, ties away from zero, on the magnitude's bits (finite inputs).
__device__ __forceinline__ uint32_t gemm_tf32(float x) {
    return (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
}

template <int X, bool TRANS>
__device__ __forceinline__ void gemm_ldmatrix(uint32_t (&r)[X], const void* row) {
    const unsigned tid = threadIdx.x, base = tid - tid % 32, lane = tid % 32;
    if (lane < 8 * X && !emu_in_smem(row, 16)) emu_error = 4;
    emu_rows[tid] = static_cast<const uint16_t*>(row);
    __syncthreads();
    for (int i = 0; i < X; ++i) {
        const uint16_t* const* m = emu_rows + base + 8 * i;
        const unsigned a = TRANS ? 2 * (lane % 4) : lane / 4, b = TRANS ? lane / 4 : 2 * (lane % 4);
        const uint16_t lo = m[a][b], hi = TRANS ? m[a + 1][b] : m[a][b + 1];
        r[i] = lo | static_cast<uint32_t>(hi) << 16;
    }
    __syncthreads();
}

__device__ __forceinline__ void gemm_cp_async16(void* dst, const void* src, bool inside) {
    if (!emu_in_smem(dst, 16) || (inside && reinterpret_cast<uintptr_t>(src) % 16 != 0))
        emu_error = 5;
    emu_open.push_back({dst, src, inside});
}

__device__ __forceinline__ void gemm_cp_async_commit() {
    emu_groups.push_back(std::move(emu_open));
    emu_open.clear();
}

template <int N>
__device__ __forceinline__ void gemm_cp_async_wait() {
    while (emu_groups.size() > N) {
        for (const EmuCopy& c : emu_groups.front()) {
            if (c.inside) std::memcpy(c.dst, c.src, 16);
            else std::memset(c.dst, 0, 16);
        }
        emu_groups.pop_front();
    }
}
"""
# AMD v_mfma_f32_16x16x16{bf16_1k,f16}, wave64: lane l holds A[l % 16][4 (l / 16) + i],
# B[4 (l / 16) + i][l % 16], and C[4 (l / 16) + i][l % 16], i = 0..3.
EMULATED_MFMA = r"""
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#define __builtin_amdgcn_mfma_f32_16x16x16bf16_1k emu_mfma<1>
#define __builtin_amdgcn_mfma_f32_16x16x16f16 emu_mfma<2>
static float emu_a[1024][4], emu_b[1024][4];
template <int D, class X> static float emu_value(X x) {
    if constexpr (D == 1) return __uint_as_float(static_cast<uint32_t>(static_cast<uint16_t>(x)) << 16);
    else return static_cast<float>(x);
}
template <int D, class X, class C> C emu_mfma(X a, X b, C c, int, int, int) {
    const unsigned tid = threadIdx.x, base = tid - tid % 64, lane = tid % 64;
    for (int i = 0; i < 4; ++i) {
        emu_a[tid][i] = emu_value<D>(a[i]);
        emu_b[tid][i] = emu_value<D>(b[i]);
    }
    __syncthreads();
    C out = c;
    for (int q = 0; q < 4; ++q) {
        const unsigned row = 4 * (lane / 16) + q, col = lane % 16;
        float s = c[q];
        for (int k = 0; k < 16; ++k)
            s += emu_a[base + row + 16 * (k / 4)][k % 4] * emu_b[base + col + 16 * (k / 4)][k % 4];
        out[q] = s;
    }
    __syncthreads();
    return out;
}
"""


def build_cpu(source: str, folder: Path, warp: int, path: str) -> Path:
    """kernel.hip on CPU threads (test_tunable_seeds' shim): path "fma" as written (g++),
    "mma" with the NVIDIA path enabled and its PTX (mma.sync, ldmatrix, cp.async) and dynamic
    shared memory emulated (g++), "mfma" with the gfx942
    path enabled and the MFMA builtins emulated (clang++: the path uses clang's vector types)."""
    from test_tunable_seeds import CPU_HIP_RUNTIME

    prelude = SHIM_EXTRAS
    if path == "mma":
        prelude += "#define __HIP_PLATFORM_NVIDIA__ 1\n#define __CUDA_ARCH__ 900\n" + EMULATED_MMA
        start, end = (source.index(marker) for marker in PRIMITIVES)
        assert not re.search(r"\basm\b", source[:start] + source[end:])  # all PTX emulated
        source = source[:start] + EMULATED_PTX + source[end:]
    elif path == "mfma":
        prelude += "#define __gfx942__ 1\n" + EMULATED_MFMA
    compiler = shutil.which("clang++-19" if path == "mfma" else "g++")
    if compiler is None:
        pytest.skip(f"no C++ compiler for the {path} path on CPU threads")
    (folder / "hip").mkdir(parents=True, exist_ok=True)
    (folder / "hip" / "hip_runtime.h").write_text(CPU_HIP_RUNTIME)
    (folder / "hip" / "hip_fp16.h").write_text(CPU_FP16)
    (folder / "hip" / "hip_bf16.h").write_text(CPU_BF16)
    (folder / "kernel.cpp").write_text(prelude + source)
    argv = [compiler, "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-w"]
    argv += ["-fno-gnu-unique"] if path != "mfma" else []
    argv += [f"-DCPU_WARP={warp}", f"-I{folder}", "kernel.cpp", "-o", "lib.so"]
    done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return folder / "lib.so"
