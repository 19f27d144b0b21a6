// Uses every API group that verifier/build/hip_nvidia/COVERAGE.md lists, so that compiling this one
// translation unit with nvcc through the layer proves the list. Nothing here runs: the host
// function only has to compile and link.
#include <hip/hip_runtime.h>
#include <hip/hip_bf16.h>
#include <hip/hip_cooperative_groups.h>
#include <hip/hip_fp16.h>
#include <hip/hip_math_constants.h>
#include <hip/hip_vector_types.h>

// A CUDA header read after the layer still compiles: libcu++ has a struct __any whose
// constructor __any(...) the vote macros must not turn into a call.
#include <cuda/std/functional>

// ---- platform macros ----------------------------------------------------------------------
#if !defined(__HIP_PLATFORM_NVIDIA__) || !defined(__HIP_PLATFORM_NVCC__)
#error "__HIP_PLATFORM_NVIDIA__ and __HIP_PLATFORM_NVCC__ must be defined"
#endif
#if defined(__HIP_PLATFORM_AMD__) || defined(__HIP_PLATFORM_HCC__)
#error "__HIP_PLATFORM_AMD__ must not be defined on NVIDIA"
#endif
#ifdef __HIP__
#error "__HIP__ means the clang HIP compiler and must not be defined under nvcc"
#endif
#ifndef __HIPCC__
#error "__HIPCC__ must be defined when nvcc compiles"
#endif
#if defined(__CUDA_ARCH__) && !defined(__HIP_DEVICE_COMPILE__)
#error "__HIP_DEVICE_COMPILE__ must be defined in the device pass"
#endif
#if !defined(__CUDA_ARCH__) && defined(__HIP_DEVICE_COMPILE__)
#error "__HIP_DEVICE_COMPILE__ must not be defined in the host pass"
#endif
#if HIP_VERSION_MAJOR < 6 || HIP_VERSION != HIP_VERSION_MAJOR * 10000000 + HIP_VERSION_MINOR * 100000 + HIP_VERSION_PATCH
#error "HIP_VERSION must be a plausible 6.x version in HIP's encoding"
#endif

static_assert(sizeof(__hip_bfloat16) == 2, "__hip_bfloat16 is 16 bits");
static_assert(sizeof(__hip_bfloat162) == 4, "__hip_bfloat162 is a pair");
static_assert(sizeof(__half) == 2, "__half is 16 bits");

__constant__ float c_table[16];
__constant__ int c_scalar;
__device__ float d_value;

// ---- device code: every intrinsic group ---------------------------------------------------
template <typename T>
__device__ T shuffle_all(T v, int width) {
  T a = __shfl(v, 3);
  T b = __shfl(v, 1, width);
  T c = __shfl_up(v, 1u, width);
  T d = __shfl_down(v, 2u);
  T e = __shfl_xor(v, 1, width);
  return a + b + c + d + e;
}

template <typename T, int N>
__global__ void __launch_bounds__(256, 2) templated_kernel(const T* __restrict__ x, T* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * T(N);
}

__global__ __launch_bounds__(128) void one_arg_bounds(float* y) { y[threadIdx.x] = 1.0f; }
__global__ __launch_bounds__(128, 2, 1) void cuda_three_arg_bounds(float* y) { y[0] = 2.0f; }

__global__ void warp_and_math(const float* x, float* y, unsigned long long* masks, int* ints,
                              double* dbl, long long* lls, int n) {
  HIP_DYNAMIC_SHARED(float, dyn)
  extern __shared__ float dyn_plain[];
  __shared__ float tile[64];
  int tid = hipThreadIdx_x + hipBlockIdx_x * hipBlockDim_x + hipGridDim_x * 0;
  float v = tid < n ? x[tid] : 0.0f;
  tile[threadIdx.x % 64] = v;
  dyn[threadIdx.x] = v;
  dyn_plain[threadIdx.x] += 1.0f;
  __syncthreads();

  // warp size, lane, votes
  int lanes = warpSize;
  unsigned int lane = __lane_id();
  unsigned long long ballot = __ballot(v > 0.0f);
  int any = __any(v > 1.0f);
  int all = __all(v > -1.0f);
  unsigned int active = __activemask();
  masks[tid] = ballot + active + __smid();
  ints[tid] = lanes + int(lane) + any + all + __popcll(ballot) + __popc(active) + __ffs(any) +
              __clz(all) + __syncthreads_count(any) + __syncthreads_and(all) +
              __syncthreads_or(any);

  // shuffles on every scalar type HIP has, with and without width
  v += shuffle_all(v, 16);
  ints[tid] += shuffle_all(ints[tid], 8);
  unsigned int u = shuffle_all(static_cast<unsigned int>(tid), 32);
  long l = shuffle_all(static_cast<long>(tid), 4);
  unsigned long ul = shuffle_all(static_cast<unsigned long>(tid), 2);
  lls[tid] = shuffle_all(lls[tid], 16) + static_cast<long long>(u + l + ul);
  unsigned long long ull = shuffle_all(static_cast<unsigned long long>(tid), 64);
  dbl[tid] = shuffle_all(dbl[tid], 32) + static_cast<double>(ull);
  __half h = __float2half(v);
  h = __shfl_xor(h, 1, 16);
  __half2 h2 = __floats2half2_rn(v, 1.0f);
  h2 = __shfl_down(h2, 1u);
  __hip_bfloat16 b = __float2bfloat16(v);
  b = __shfl(b, 0, 8);
  __hip_bfloat162 b2 = __floats2bfloat162_rn(v, 2.0f);
  b2 = __shfl_up(b2, 1u, 16);
  // CUDA-style masked forms are native
  v += __shfl_xor_sync(0xffffffffu, v, 2) + __reduce_add_sync(0xffffffffu, 1);

  // fp16 / bf16 conversions and arithmetic
  float2 f2 = __half22float2(h2);
  float2 g2 = __bfloat1622float2(b2);
  __hip_bfloat162 packed = __float22bfloat162_rn(make_float2(f2.x, g2.y));
  __hip_bfloat16 sum = __hadd(b, __low2bfloat16(packed));
  __hip_bfloat16_raw raw = sum;
  __hip_bfloat162_raw raw2 = packed;
  __half_raw hraw = h;
  unsigned short bits = __bfloat16_as_ushort(sum) + raw.x + raw2.y + hraw.x;
  v += __half2float(__hmul(h, __float2half(2.0f))) + __bfloat162float(sum) + __low2float(b2) +
       __high2float(packed) + static_cast<float>(bits) + static_cast<float>(sum) +
       __half2float(__hfma(h, h, h));

  // math, fast and precise
  v = expf(v) + __expf(v) + exp2f(v) + logf(fabsf(v) + 1.0f) + __logf(2.0f) + rsqrtf(v * v + 1.0f) +
      __frsqrt_rn(2.0f) + fmaxf(v, 0.0f) + fminf(v, 1.0f) + __fdividef(v, 3.0f) + sqrtf(4.0f) +
      __fsqrt_rn(9.0f) + tanhf(v) + erff(v) + fmaf(v, 2.0f, 1.0f) + __fmaf_rn(v, 1.0f, 0.0f) +
      __saturatef(v) + powf(2.0f, v) + __powf(2.0f, 0.5f) + sinf(v) + __sinf(v) + __cosf(v) +
      copysignf(1.0f, v) + truncf(v) + rintf(v) + floorf(v) + ceilf(v) + HIP_PI_F + HIP_INF_F * 0.0f;
  double dv = exp(dbl[tid]) + sqrt(2.0) + HIP_PI + fma(1.0, 2.0, 3.0);
  v += __int_as_float(__float_as_int(v)) + __uint_as_float(0u) + static_cast<float>(dv);

  // vector types
  float4 f4 = make_float4(v, v, v, v);
  int4 i4 = make_int4(1, 2, 3, 4);
  uint2 u2 = make_uint2(1u, 2u);
  float3 f3 = make_float3(v, 1.0f, 2.0f);
  float2 fl2 = make_float2(v, 3.0f);
  int2 i2 = make_int2(1, 2);
  uint4 u4 = make_uint4(1u, 2u, 3u, 4u);
  v += f4.x + f4.w + f3.z + fl2.y + static_cast<float>(i4.z + static_cast<int>(u2.y) + i2.x) +
       static_cast<float>(u4.w);

  // atomics and fences
  atomicAdd(&y[0], v);
  atomicAdd(&dbl[0], 1.0);
  atomicMax(&ints[0], 3);
  atomicMin(&ints[1], -3);
  atomicMax(&y[1], v);
  atomicMin(&y[2], v);
  atomicMax(&dbl[1], 1.0);
  atomicMin(&dbl[2], -1.0);
  atomicCAS(&ints[2], 0, 1);
  atomicExch(&ints[3], 5);
  atomicAnd(&ints[4], 1);
  atomicOr(&ints[5], 2);
  atomicXor(&ints[6], 3);
  atomicInc(reinterpret_cast<unsigned int*>(&ints[7]), 10u);
  atomicSub(&ints[8], 1);
  atomicAdd(&masks[0], 1ull);
  unsafeAtomicAdd(&y[3], 1.0f);
  safeAtomicAdd(&y[4], 1.0f);
  unsafeAtomicAdd(&dbl[3], 1.0);
  atomicAdd(reinterpret_cast<__half2*>(&y[5]), h2);
  atomicAdd(reinterpret_cast<__hip_bfloat162*>(&y[6]), b2);
  __threadfence();
  __threadfence_block();
  __threadfence_system();
  __syncwarp();

  // clocks
  long long t0 = clock64();
  long long t1 = wall_clock64();
  long long t2 = __clock64();
  masks[1] = static_cast<unsigned long long>(t1 - t0 + t2 + __clock() + clock());

  // constant and device symbols, read-only loads
  v += c_table[lane % 16] + static_cast<float>(c_scalar) + d_value + __ldg(&x[0]);
  y[tid] = v + tile[(threadIdx.x + 1) % 64] + __half2float(h) + __bfloat162float(b);
}

namespace cg = cooperative_groups;

__global__ void groups(float* y) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> tile32 = cg::tiled_partition<32>(block);
  cg::thread_block_tile<16> tile16 = cg::tiled_partition<16>(block);
  float v = static_cast<float>(block.thread_rank());
  v += tile32.shfl_down(v, 1) + tile16.shfl_xor(v, 2) + tile32.shfl(v, 0) + tile16.shfl_up(v, 1);
  v += static_cast<float>(tile32.ballot(v > 0.0f) + tile16.any(v > 1.0f) + tile16.all(v > 0.0f));
  v += static_cast<float>(tile32.thread_rank() + tile32.size() + block.size());
  block.sync();
  tile32.sync();
  y[block.thread_rank()] = v;
}

__global__ void grid_wide(float* y) {
  cg::grid_group grid = cg::this_grid();
  y[grid.thread_rank()] = 1.0f;
  grid.sync();
}

__global__ void no_args_kernel() {}

// ---- host API: every group ----------------------------------------------------------------
static hipError_t check(hipError_t e) {
  if (e != hipSuccess && e != hipErrorNotReady) {
    const char* what = hipGetErrorString(e);
    const char* name = hipGetErrorName(e);
    return (what && name) ? e : hipErrorUnknown;
  }
  return hipSuccess;
}

extern "C" hipError_t coverage_host(float* x, float* y, int n, hipStream_t stream) {
  const hipError_t codes[] = {
      hipSuccess, hipErrorInvalidValue, hipErrorOutOfMemory, hipErrorMemoryAllocation,
      hipErrorNotInitialized, hipErrorInitializationError, hipErrorDeinitialized,
      hipErrorInvalidConfiguration, hipErrorInvalidPitchValue, hipErrorInvalidSymbol,
      hipErrorInvalidDevicePointer, hipErrorInvalidMemcpyDirection, hipErrorInsufficientDriver,
      hipErrorMissingConfiguration, hipErrorInvalidDeviceFunction, hipErrorNoDevice,
      hipErrorInvalidDevice, hipErrorInvalidImage, hipErrorInvalidContext,
      hipErrorNoBinaryForGpu, hipErrorInvalidHandle, hipErrorInvalidResourceHandle,
      hipErrorNotFound, hipErrorNotReady, hipErrorIllegalAddress, hipErrorLaunchOutOfResources,
      hipErrorLaunchTimeOut, hipErrorLaunchFailure, hipErrorCooperativeLaunchTooLarge,
      hipErrorPeerAccessAlreadyEnabled, hipErrorPeerAccessNotEnabled, hipErrorSetOnActiveProcess,
      hipErrorAssert, hipErrorHostMemoryAlreadyRegistered, hipErrorHostMemoryNotRegistered,
      hipErrorNotSupported, hipErrorUnknown};
  int seen = 0;
  for (hipError_t c : codes) seen += c == hipSuccess ? 0 : 1;
  switch (hipPeekAtLastError()) {
    case hipSuccess:
    case hipErrorNotReady:
      break;
    default:
      return hipGetLastError();
  }

  // devices
  int count = 0, device = 0, value = 0, driver = 0, runtime = 0;
  size_t free_bytes = 0, total_bytes = 0;
  check(hipGetDeviceCount(&count));
  check(hipGetDevice(&device));
  check(hipSetDevice(device));
  check(hipDriverGetVersion(&driver));
  check(hipRuntimeGetVersion(&runtime));
  check(hipMemGetInfo(&free_bytes, &total_bytes));
  const hipDeviceAttribute_t attrs[] = {
      hipDeviceAttributeMaxThreadsPerBlock, hipDeviceAttributeMaxBlockDimX,
      hipDeviceAttributeMaxBlockDimY, hipDeviceAttributeMaxBlockDimZ,
      hipDeviceAttributeMaxGridDimX, hipDeviceAttributeMaxGridDimY, hipDeviceAttributeMaxGridDimZ,
      hipDeviceAttributeMaxSharedMemoryPerBlock, hipDeviceAttributeSharedMemPerBlockOptin,
      hipDeviceAttributeSharedMemPerMultiprocessor,
      hipDeviceAttributeMaxSharedMemoryPerMultiprocessor,
      hipDeviceAttributeReservedSharedMemPerBlock, hipDeviceAttributeTotalConstantMemory,
      hipDeviceAttributeWarpSize, hipDeviceAttributeMaxPitch, hipDeviceAttributeMaxRegistersPerBlock,
      hipDeviceAttributeMaxRegistersPerMultiprocessor, hipDeviceAttributeClockRate,
      hipDeviceAttributeMemoryClockRate, hipDeviceAttributeMemoryBusWidth,
      hipDeviceAttributeMultiprocessorCount, hipDeviceAttributeComputeCapabilityMajor,
      hipDeviceAttributeComputeCapabilityMinor, hipDeviceAttributeL2CacheSize,
      hipDeviceAttributePersistingL2CacheMaxSize, hipDeviceAttributeMaxThreadsPerMultiProcessor,
      hipDeviceAttributeMaxBlocksPerMultiProcessor, hipDeviceAttributeComputeMode,
      hipDeviceAttributeConcurrentKernels, hipDeviceAttributeAsyncEngineCount,
      hipDeviceAttributePciBusId, hipDeviceAttributePciDeviceId, hipDeviceAttributePciDomainID,
      hipDeviceAttributeIntegrated, hipDeviceAttributeIsMultiGpuBoard,
      hipDeviceAttributeCanMapHostMemory, hipDeviceAttributeCooperativeLaunch,
      hipDeviceAttributeManagedMemory, hipDeviceAttributeConcurrentManagedAccess,
      hipDeviceAttributePageableMemoryAccess, hipDeviceAttributeUnifiedAddressing,
      hipDeviceAttributeEccEnabled, hipDeviceAttributeKernelExecTimeout,
      hipDeviceAttributeStreamPrioritiesSupported, hipDeviceAttributeGlobalL1CacheSupported,
      hipDeviceAttributeLocalL1CacheSupported, hipDeviceAttributeMemoryPoolsSupported,
      hipDeviceAttributeClockInstructionRate, hipDeviceAttributeWallClockRate,
      hipDeviceAttributePhysicalMultiProcessorCount};
  for (hipDeviceAttribute_t a : attrs) check(hipDeviceGetAttribute(&value, a, device));
  hipDeviceProp_t prop;
  check(hipGetDeviceProperties(&prop, device));
  size_t budget = prop.totalGlobalMem + prop.sharedMemPerBlock + prop.sharedMemPerBlockOptin +
                  prop.sharedMemPerMultiprocessor + prop.maxSharedMemoryPerMultiProcessor +
                  prop.totalConstMem + prop.memPitch;
  int facts = prop.warpSize + prop.maxThreadsPerBlock + prop.maxThreadsDim[0] +
              prop.maxGridSize[0] + prop.multiProcessorCount + prop.major + prop.minor +
              prop.clockRate + prop.memoryClockRate + prop.memoryBusWidth + prop.l2CacheSize +
              prop.regsPerBlock + prop.regsPerMultiprocessor + prop.maxThreadsPerMultiProcessor +
              prop.maxBlocksPerMultiProcessor + prop.clockInstructionRate + prop.computeMode +
              prop.concurrentKernels + prop.pciBusID + prop.cooperativeLaunch +
              prop.managedMemory + prop.ECCEnabled + (prop.name[0] == 'N') +
              (prop.gcnArchName[0] == 's');

  // memory
  float* d = nullptr;
  void* raw = nullptr;
  float* managed = nullptr;
  float* pinned = nullptr;
  void* pinned_raw = nullptr;
  float* pooled = nullptr;
  check(hipMalloc(&d, n * sizeof(float)));
  check(hipMalloc(&raw, 64));
  check(hipMallocManaged(&managed, 64));
  check(hipMallocManaged(&managed, 64, hipMemAttachHost));
  check(hipHostMalloc(&pinned, 64));
  check(hipHostMalloc(&pinned_raw, 64, hipHostMallocPortable | hipHostMallocMapped));
  check(hipHostMalloc(&pinned_raw, 64, hipHostMallocDefault | hipHostMallocWriteCombined));
  check(hipMallocAsync(&pooled, 64, stream));
  check(hipFreeAsync(pooled, stream));
  const hipMemcpyKind kinds[] = {hipMemcpyHostToHost, hipMemcpyHostToDevice,
                                 hipMemcpyDeviceToHost, hipMemcpyDeviceToDevice,
                                 hipMemcpyDefault};
  check(hipMemcpy(d, x, n * sizeof(float), kinds[3]));
  check(hipMemcpyAsync(d, x, n * sizeof(float), hipMemcpyDeviceToDevice, stream));
  check(hipMemcpyAsync(d, x, n * sizeof(float), hipMemcpyDefault));
  check(hipMemcpy2D(d, 16, x, 16, 16, 2, hipMemcpyDeviceToDevice));
  check(hipMemcpy2DAsync(d, 16, x, 16, 16, 2, hipMemcpyDeviceToDevice, stream));
  check(hipMemset(d, 0, n * sizeof(float)));
  check(hipMemsetAsync(d, 0, n * sizeof(float), stream));
  float table[16] = {};
  int scalar = 3;
  void* symbol_address = nullptr;
  size_t symbol_size = 0;
  check(hipMemcpyToSymbol(HIP_SYMBOL(c_table), table, sizeof(table)));
  check(hipMemcpyToSymbol(c_scalar, &scalar, sizeof(int), 0, hipMemcpyHostToDevice));
  check(hipMemcpyToSymbol(static_cast<const void*>(&c_scalar), &scalar, sizeof(int)));
  check(hipMemcpyToSymbolAsync(HIP_SYMBOL(c_table), table, sizeof(table), 0,
                               hipMemcpyHostToDevice, stream));
  check(hipMemcpyFromSymbol(table, HIP_SYMBOL(c_table), sizeof(table)));
  check(hipMemcpyFromSymbolAsync(&scalar, c_scalar, sizeof(int), 0, hipMemcpyDeviceToHost,
                                 stream));
  check(hipGetSymbolAddress(&symbol_address, HIP_SYMBOL(d_value)));
  check(hipGetSymbolSize(&symbol_size, HIP_SYMBOL(c_table)));

  // streams and events
  hipStream_t s1, s2, s3;
  int least = 0, greatest = 0;
  check(hipStreamCreate(&s1));
  check(hipStreamCreateWithFlags(&s2, hipStreamNonBlocking));
  check(hipDeviceGetStreamPriorityRange(&least, &greatest));
  check(hipStreamCreateWithPriority(&s3, hipStreamDefault, greatest));
  hipEvent_t start, stop, sync_only;
  check(hipEventCreate(&start));
  check(hipEventCreate(&stop));
  check(hipEventCreateWithFlags(&sync_only, hipEventDisableTiming | hipEventBlockingSync));
  check(hipEventRecord(start, stream));
  check(hipEventRecord(sync_only));

  // launches: GGL with and without arguments, templates, chevrons, dynamic shared memory
  const int block = 256;
  const int grid = (n + block - 1) / block;
  hipLaunchKernelGGL(HIP_KERNEL_NAME(templated_kernel<float, 2>), dim3(grid), dim3(block), 0,
                     stream, x, y, n);
  hipLaunchKernelGGL(no_args_kernel, dim3(1), dim3(1), 0, 0);
  templated_kernel<float, 3><<<grid, block, 0, stream>>>(x, y, n);
  one_arg_bounds<<<1, 128, 0, hipStreamPerThread>>>(y);
  cuda_three_arg_bounds<<<1, 128>>>(y);
  const size_t dyn_bytes = 64 * 1024;
  check(hipFuncSetAttribute(reinterpret_cast<const void*>(warp_and_math),
                            hipFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(dyn_bytes)));
  check(hipFuncSetAttribute(warp_and_math, hipFuncAttributePreferredSharedMemoryCarveout, 100));
  hipFuncAttributes fattr;
  check(hipFuncGetAttributes(&fattr, reinterpret_cast<const void*>(warp_and_math)));
  check(hipFuncGetAttributes(&fattr, groups));
  int active_blocks = 0, min_grid = 0, best_block = 0;
  check(hipOccupancyMaxActiveBlocksPerMultiprocessor(&active_blocks, groups, 128, 0));
  check(hipOccupancyMaxActiveBlocksPerMultiprocessor(
      &active_blocks, reinterpret_cast<const void*>(groups), 128, 0));
  check(hipOccupancyMaxPotentialBlockSize(&min_grid, &best_block, groups));
  check(hipOccupancyMaxPotentialBlockSize(&min_grid, &best_block, templated_kernel<float, 2>, 0,
                                          512));
  hipLaunchKernelGGL(warp_and_math, dim3(grid), dim3(block), dyn_bytes, stream, x, y,
                     reinterpret_cast<unsigned long long*>(d), reinterpret_cast<int*>(d),
                     reinterpret_cast<double*>(d), reinterpret_cast<long long*>(d), n);
  hipLaunchKernelGGL(groups, dim3(1), dim3(128), 0, stream, y);
  void* args[] = {&y};
  check(hipLaunchKernel(reinterpret_cast<const void*>(groups), dim3(1), dim3(64), args, 0,
                        stream));
  check(hipLaunchKernel(groups, dim3(1), dim3(64), args, 0, stream));
  check(hipLaunchCooperativeKernel(reinterpret_cast<const void*>(grid_wide), dim3(2), dim3(64),
                                   args, 0, stream));
  check(hipLaunchCooperativeKernel(grid_wide, dim3(2), dim3(64), args, 0u, stream));
  hipError_t launched = hipGetLastError();

  float ms = 0.0f;
  check(hipEventRecord(stop, stream));
  check(hipStreamWaitEvent(s1, stop, 0));
  check(hipStreamWaitEvent(s2, stop));
  check(hipEventSynchronize(stop));
  check(hipEventQuery(stop));
  check(hipEventElapsedTime(&ms, start, stop));
  check(hipStreamQuery(s1));
  check(hipStreamSynchronize(stream));
  check(hipDeviceSynchronize());
  check(hipEventDestroy(start));
  check(hipEventDestroy(stop));
  check(hipEventDestroy(sync_only));
  check(hipStreamDestroy(s1));
  check(hipStreamDestroy(s2));
  check(hipStreamDestroy(s3));
  check(hipFree(d));
  check(hipFree(raw));
  check(hipFree(managed));
  check(hipHostFree(pinned));
  check(hipHostFree(pinned_raw));
  if (false) check(hipDeviceReset());
  hipDeviceptr_t opaque = d;
  return (seen + facts + budget + (opaque != nullptr) + ms > 0) ? launched : hipSuccess;
}
