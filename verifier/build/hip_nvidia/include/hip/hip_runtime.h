// hipevolve HIP-on-NVIDIA layer: <hip/hip_runtime.h> for nvcc.
//
// The same HIP source compiles with hipcc for AMD and, through these headers, with nvcc for
// NVIDIA. What is covered is listed in ../../COVERAGE.md; everything else is left undeclared
// so that nvcc names it ("identifier ... is undefined"). Semantics that differ by platform:
// warpSize is 32 here and 64 on CDNA, so kernels read warpSize or guard platform code with
// __HIP_PLATFORM_AMD__ / __HIP_PLATFORM_NVIDIA__.
#ifndef HIPEVOLVE_HIP_RUNTIME_H
#define HIPEVOLVE_HIP_RUNTIME_H

#include <hip/hip_runtime_api.h>

#include <stdint.h>

// ---- launches -----------------------------------------------------------------------------
// As in HIP, a templated kernel name with commas goes through HIP_KERNEL_NAME(...).
#define HIP_KERNEL_NAME(...) __VA_ARGS__
#define HIP_SYMBOL(X) X
#define hipLaunchKernelGGLInternal(kernelName, numBlocks, numThreads, memPerBlock, streamId, ...) \
  do {                                                                                          \
    kernelName<<<(numBlocks), (numThreads), (memPerBlock), (streamId)>>>(__VA_ARGS__);          \
  } while (0)
#define hipLaunchKernelGGL(kernelName, ...) hipLaunchKernelGGLInternal((kernelName), __VA_ARGS__)

#define HIP_DYNAMIC_SHARED(type, var) extern __shared__ type var[];
#define HIP_DYNAMIC_SHARED_ATTRIBUTE

// HIP's __launch_bounds__(MAX_THREADS, MIN_WAVES_PER_EU): the second argument asks an AMD
// SIMD for that many resident waves. CUDA's second argument (min blocks per SM) is a
// different quantity, and passing it through would cap registers and could force spills, so
// with exactly two arguments the second is dropped and the thread limit kept. Any other count
// passes through unchanged: one argument, CUDA's three-argument form, and CUDA code whose
// single argument holds template commas (CUB's kernels).
#undef __launch_bounds__
#define HIPEVOLVE_LB_PASS(...) __annotate__(launch_bounds(__VA_ARGS__))
#define HIPEVOLVE_LB_HIP2(max_threads, min_waves_per_eu) __annotate__(launch_bounds(max_threads))
// Picks argument 33 of (__VA_ARGS__, 30 x PASS, HIP2, PASS): HIP2 exactly when __VA_ARGS__
// has two arguments, PASS for 1 and for 3..32.
#define HIPEVOLVE_LB_PICK(                                                                     \
    _1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, _17, _18, _19, _20, \
    _21, _22, _23, _24, _25, _26, _27, _28, _29, _30, _31, _32, impl, ...)                      \
  impl
#define __launch_bounds__(...)                                                                  \
  HIPEVOLVE_LB_PICK(__VA_ARGS__,                                                                \
      HIPEVOLVE_LB_PASS, HIPEVOLVE_LB_PASS, HIPEVOLVE_LB_PASS, HIPEVOLVE_LB_PASS, HIPEVOLVE_LB_PASS, \
      HIPEVOLVE_LB_PASS, HIPEVOLVE_LB_PASS, HIPEVOLVE_LB_PASS, HIPEVOLVE_LB_PASS, HIPEVOLVE_LB_PASS, \
      HIPEVOLVE_LB_PASS, HIPEVOLVE_LB_PASS, HIPEVOLVE_LB_PASS, HIPEVOLVE_LB_PASS, HIPEVOLVE_LB_PASS, \
      HIPEVOLVE_LB_PASS, HIPEVOLVE_LB_PASS, HIPEVOLVE_LB_PASS, HIPEVOLVE_LB_PASS, HIPEVOLVE_LB_PASS, \
      HIPEVOLVE_LB_PASS, HIPEVOLVE_LB_PASS, HIPEVOLVE_LB_PASS, HIPEVOLVE_LB_PASS, HIPEVOLVE_LB_PASS, \
      HIPEVOLVE_LB_PASS, HIPEVOLVE_LB_PASS, HIPEVOLVE_LB_PASS, HIPEVOLVE_LB_PASS, HIPEVOLVE_LB_PASS, \
      HIPEVOLVE_LB_HIP2, HIPEVOLVE_LB_PASS, )(__VA_ARGS__)

// Pre-HIP-1.0 index spellings, still seen in ported code.
#define hipThreadIdx_x threadIdx.x
#define hipThreadIdx_y threadIdx.y
#define hipThreadIdx_z threadIdx.z
#define hipBlockIdx_x blockIdx.x
#define hipBlockIdx_y blockIdx.y
#define hipBlockIdx_z blockIdx.z
#define hipBlockDim_x blockDim.x
#define hipBlockDim_y blockDim.y
#define hipBlockDim_z blockDim.z
#define hipGridDim_x gridDim.x
#define hipGridDim_y gridDim.y
#define hipGridDim_z gridDim.z

#ifdef __CUDA_ARCH__
#define __HIP_ARCH_HAS_GLOBAL_INT32_ATOMICS__ 1
#define __HIP_ARCH_HAS_GLOBAL_FLOAT_ATOMIC_EXCH__ 1
#define __HIP_ARCH_HAS_SHARED_INT32_ATOMICS__ 1
#define __HIP_ARCH_HAS_SHARED_FLOAT_ATOMIC_EXCH__ 1
#define __HIP_ARCH_HAS_FLOAT_ATOMIC_ADD__ 1
#define __HIP_ARCH_HAS_GLOBAL_INT64_ATOMICS__ 1
#define __HIP_ARCH_HAS_SHARED_INT64_ATOMICS__ 1
#define __HIP_ARCH_HAS_DOUBLES__ 1
#define __HIP_ARCH_HAS_WARP_VOTE__ 1
#define __HIP_ARCH_HAS_WARP_BALLOT__ 1
#define __HIP_ARCH_HAS_WARP_SHUFFLE__ 1
#define __HIP_ARCH_HAS_WARP_FUNNEL_SHIFT__ 1
#define __HIP_ARCH_HAS_THREAD_FENCE_SYSTEM__ 1
#define __HIP_ARCH_HAS_SYNC_THREAD_EXT__ 1
#define __HIP_ARCH_HAS_3DGRID__ 1
#endif

// ---- lane queries, warp votes and shuffles ------------------------------------------------
__device__ __forceinline__ unsigned int __lane_id() {
  unsigned int lane;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
  return lane;
}
__device__ __forceinline__ unsigned int __smid() {
  unsigned int sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  return sm;
}

namespace hipevolve_nv {
// Every lane of the warp: HIP's mask-free intrinsics act on the whole wavefront. As on CUDA,
// all lanes must reach the call together (no shuffles inside lane-divergent branches).
constexpr unsigned int kFullMask = 0xffffffffu;
// Code written for wave64 may pass width 64; on a 32-lane warp the whole warp is the group.
__device__ __forceinline__ int width(int w) { return w < warpSize ? w : warpSize; }
}  // namespace hipevolve_nv

// HIP's mask-free votes over the whole warp. __ballot returns 64 bits as in HIP (the upper
// half is 0 on a 32-lane warp).
__device__ __forceinline__ unsigned long long __hip_ballot(int predicate) {
  return __ballot_sync(hipevolve_nv::kFullMask, predicate);
}
__device__ __forceinline__ int __hip_any(int predicate) {
  return __any_sync(hipevolve_nv::kFullMask, predicate);
}
__device__ __forceinline__ int __hip_all(int predicate) {
  return __all_sync(hipevolve_nv::kFullMask, predicate);
}
// CUDA declares its own mask-free __any/__all/__ballot (32-bit, rejected by ptxas since sm_70)
// as builtins that no overload can outrank, so the names are redirected. The macros are
// object-like on purpose: a header read later that uses these names for something else
// (libcu++ has a struct __any with a constructor __any(...)) is renamed consistently and
// still compiles, where a function-like macro would rewrite the constructor into a call.
#define __ballot __hip_ballot
#define __any __hip_any
#define __all __hip_all

// HIP's shuffles take a width (a power of two up to warpSize, default warpSize) and have the
// same lane rules as CUDA's *_sync forms: __shfl reads lane srcLane % width of the caller's
// group; __shfl_up/__shfl_down keep the caller's value when the source falls outside its
// group; __shfl_xor may read earlier groups but keeps its own value for later ones.
// Templates, so that CUDA's per-type __shfl_sync overloads (int, unsigned, long, long long
// and their unsigned forms, float, double, __half, __half2, __nv_bfloat16, __nv_bfloat162)
// are all reached, and so that the deprecated mask-free CUDA declarations do not clash.
template <typename T>
__device__ __forceinline__ T __shfl(T var, int srcLane, int width = warpSize) {
  return __shfl_sync(hipevolve_nv::kFullMask, var, srcLane, hipevolve_nv::width(width));
}
template <typename T>
__device__ __forceinline__ T __shfl_up(T var, unsigned int delta, int width = warpSize) {
  return __shfl_up_sync(hipevolve_nv::kFullMask, var, delta, hipevolve_nv::width(width));
}
template <typename T>
__device__ __forceinline__ T __shfl_down(T var, unsigned int delta, int width = warpSize) {
  return __shfl_down_sync(hipevolve_nv::kFullMask, var, delta, hipevolve_nv::width(width));
}
template <typename T>
__device__ __forceinline__ T __shfl_xor(T var, int laneMask, int width = warpSize) {
  return __shfl_xor_sync(hipevolve_nv::kFullMask, var, laneMask, hipevolve_nv::width(width));
}

// ---- clocks -------------------------------------------------------------------------------
#define __clock() clock()
#define __clock64() clock64()
// HIP's constant-rate counter; %globaltimer counts nanoseconds (hipDeviceAttributeWallClockRate
// reports 1e6 kHz to match).
__device__ __forceinline__ long long int wall_clock64() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return static_cast<long long int>(t);
}

// ---- HIP-only atomics ---------------------------------------------------------------------
// Float and double min/max are HIP extensions; CUDA has them only for integers. The CAS loop
// stops as soon as the stored value already wins, so uncontended calls cost one load.
__device__ __forceinline__ float atomicMax(float* address, float val) {
  int* bits = reinterpret_cast<int*>(address);
  int old = *bits;
  while (__int_as_float(old) < val) {
    int seen = atomicCAS(bits, old, __float_as_int(val));
    if (seen == old) break;
    old = seen;
  }
  return __int_as_float(old);
}
__device__ __forceinline__ float atomicMin(float* address, float val) {
  int* bits = reinterpret_cast<int*>(address);
  int old = *bits;
  while (__int_as_float(old) > val) {
    int seen = atomicCAS(bits, old, __float_as_int(val));
    if (seen == old) break;
    old = seen;
  }
  return __int_as_float(old);
}
__device__ __forceinline__ double atomicMax(double* address, double val) {
  unsigned long long* bits = reinterpret_cast<unsigned long long*>(address);
  unsigned long long old = *bits;
  while (__longlong_as_double(static_cast<long long>(old)) < val) {
    unsigned long long seen =
        atomicCAS(bits, old, static_cast<unsigned long long>(__double_as_longlong(val)));
    if (seen == old) break;
    old = seen;
  }
  return __longlong_as_double(static_cast<long long>(old));
}
__device__ __forceinline__ double atomicMin(double* address, double val) {
  unsigned long long* bits = reinterpret_cast<unsigned long long*>(address);
  unsigned long long old = *bits;
  while (__longlong_as_double(static_cast<long long>(old)) > val) {
    unsigned long long seen =
        atomicCAS(bits, old, static_cast<unsigned long long>(__double_as_longlong(val)));
    if (seen == old) break;
    old = seen;
  }
  return __longlong_as_double(static_cast<long long>(old));
}
// On AMD these pick hardware float atomics with or without fine-grained-memory safety; NVIDIA
// has one float atomicAdd, correct for both.
__device__ __forceinline__ float unsafeAtomicAdd(float* address, float val) {
  return atomicAdd(address, val);
}
__device__ __forceinline__ double unsafeAtomicAdd(double* address, double val) {
  return atomicAdd(address, val);
}
__device__ __forceinline__ float safeAtomicAdd(float* address, float val) {
  return atomicAdd(address, val);
}
__device__ __forceinline__ double safeAtomicAdd(double* address, double val) {
  return atomicAdd(address, val);
}

#endif
