"""Enough of HIP to run the GDN seeds' kernel sources on CPU threads (tests/test_gdn_seeds.py,
test_gdn_amd_matrix_cores.py, test_gdn_tensor_core.py with tc_emulation.py, test_seed_spaces.py)."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

# Enough of HIP to run the seeds' source on CPU threads: one std::thread per GPU thread, blocks one
# after another, __syncthreads a std::barrier, shuffles exchanged through memory between two
# barriers (right only when every thread of the block shuffles together, as in the seeds), LDS
# from HIP_DYNAMIC_SHARED filled with NaN before each block. warpSize is CPU_WARP; the device has
# CPU_SMS (16) multiprocessors.
CPU_HIP_RUNTIME = r"""
#pragma once
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __restrict__
struct dim3 { unsigned x, y, z; dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
struct cpu_index { unsigned x, y, z; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
inline uint2 make_uint2(unsigned a, unsigned b) { return {a, b}; }
inline thread_local cpu_index threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
inline int warpSize = CPU_WARP;
typedef int hipError_t;
typedef void* hipStream_t;
constexpr hipError_t hipSuccess = 0;
constexpr hipError_t hipErrorInvalidValue = 1;
inline hipError_t hipGetLastError() { return hipSuccess; }
enum hipFuncAttribute { hipFuncAttributeMaxDynamicSharedMemorySize };
inline hipError_t hipFuncSetAttribute(const void*, hipFuncAttribute, int) { return hipSuccess; }
enum hipDeviceAttribute_t { hipDeviceAttributeMultiprocessorCount };
inline hipError_t hipGetDevice(int* device) { *device = 0; return hipSuccess; }
inline hipError_t hipDeviceGetAttribute(int* value, hipDeviceAttribute_t, int) {
    *value = CPU_SMS;
    return hipSuccess;
}
inline float __uint_as_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t __float_as_uint(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline std::barrier<>* cpu_barrier;
inline std::vector<float> cpu_exchange;
inline std::vector<float4> cpu_lds;
inline void __syncthreads() { cpu_barrier->arrive_and_wait(); }
inline float __shfl_xor(float value, int mask, int width = warpSize) {
    const unsigned t = threadIdx.x;
    cpu_exchange[t] = value;
    __syncthreads();
    const float out = cpu_exchange[t - t % width + ((t % width) ^ mask) % width];
    __syncthreads();
    return out;
}
#define HIP_DYNAMIC_SHARED(type, var) type* var = reinterpret_cast<type*>(cpu_lds.data());
template <class F> void cpu_launch(dim3 grid, dim3 block, size_t lds_bytes, F body) {
    blockDim = block;
    gridDim = grid;
    const unsigned n = block.x * block.y * block.z;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) {
                std::barrier<> bar(n);
                cpu_barrier = &bar;
                cpu_exchange.assign(n, nan);
                cpu_lds.assign(lds_bytes / 16 + 1, float4{nan, nan, nan, nan});
                std::vector<std::thread> threads;
                for (unsigned i = 0; i < n; ++i)
                    threads.emplace_back([&, i] {
                        threadIdx = {i % block.x, (i / block.x) % block.y, i / (block.x * block.y)};
                        blockIdx = {x, y, z};
                        body();
                    });
                for (auto& th : threads) th.join();
            }
}
#define hipLaunchKernelGGL(kernel, grid, block, lds, stream, ...) \
    cpu_launch((grid), (block), (lds), [=] { kernel(__VA_ARGS__); })
"""


CPU_SMS = 16


def cpu_library(source: str, folder: Path, warp: int) -> ctypes.CDLL:
    """kernel.hip built by g++ against the CPU shim (NVIDIA's code path: dynamic, poisoned LDS)."""
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is not installed")
    (folder / "hip").mkdir(parents=True, exist_ok=True)
    (folder / "hip" / "hip_runtime.h").write_text(CPU_HIP_RUNTIME)
    (folder / "kernel.cpp").write_text(source)
    argv = [gxx, "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-Wno-unknown-pragmas"]
    argv += ["-fno-gnu-unique"]  # each library keeps its own template statics (LDS arrays)
    argv += [f"-DCPU_WARP={warp}", f"-DCPU_SMS={CPU_SMS}", f"-I{folder}"]
    argv += ["kernel.cpp", "-o", "lib.so"]
    done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return ctypes.CDLL(str(folder / "lib.so"))


def launcher(lib: ctypes.CDLL, name: str, pointers: int, ints: int):
    fn = getattr(lib, name)
    fn.argtypes = [ctypes.c_void_p] * pointers + [ctypes.c_int] * ints + [ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return fn
