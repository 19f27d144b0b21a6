// hipevolve HIP-on-NVIDIA layer: the HIP runtime API subset, mapped onto the CUDA runtime.
//
// Types are CUDA's own (hipError_t is cudaError_t, hipStream_t is cudaStream_t, ...), so a
// launcher's hipError_t is a CUDA error code on this backend. Only what COVERAGE.md lists is
// declared: any other hip* name stays undeclared, and nvcc's "identifier ... is undefined"
// then names it.
#ifndef HIPEVOLVE_HIP_RUNTIME_API_H
#define HIPEVOLVE_HIP_RUNTIME_API_H

#include <hip/hip_common.h>
#include <hip/hip_version.h>

#include <cuda_runtime.h>
#include <stddef.h>
#include <string.h>

#include <type_traits>

typedef cudaError_t hipError_t;
typedef cudaStream_t hipStream_t;
typedef cudaEvent_t hipEvent_t;
typedef void* hipDeviceptr_t;

// ---- errors -------------------------------------------------------------------------------

inline constexpr hipError_t hipSuccess = cudaSuccess;
inline constexpr hipError_t hipErrorInvalidValue = cudaErrorInvalidValue;
inline constexpr hipError_t hipErrorOutOfMemory = cudaErrorMemoryAllocation;
inline constexpr hipError_t hipErrorMemoryAllocation = cudaErrorMemoryAllocation;
inline constexpr hipError_t hipErrorNotInitialized = cudaErrorInitializationError;
inline constexpr hipError_t hipErrorInitializationError = cudaErrorInitializationError;
inline constexpr hipError_t hipErrorDeinitialized = cudaErrorCudartUnloading;
inline constexpr hipError_t hipErrorInvalidConfiguration = cudaErrorInvalidConfiguration;
inline constexpr hipError_t hipErrorInvalidPitchValue = cudaErrorInvalidPitchValue;
inline constexpr hipError_t hipErrorInvalidSymbol = cudaErrorInvalidSymbol;
inline constexpr hipError_t hipErrorInvalidDevicePointer = cudaErrorInvalidDevicePointer;
inline constexpr hipError_t hipErrorInvalidMemcpyDirection = cudaErrorInvalidMemcpyDirection;
inline constexpr hipError_t hipErrorInsufficientDriver = cudaErrorInsufficientDriver;
inline constexpr hipError_t hipErrorMissingConfiguration = cudaErrorMissingConfiguration;
inline constexpr hipError_t hipErrorInvalidDeviceFunction = cudaErrorInvalidDeviceFunction;
inline constexpr hipError_t hipErrorNoDevice = cudaErrorNoDevice;
inline constexpr hipError_t hipErrorInvalidDevice = cudaErrorInvalidDevice;
inline constexpr hipError_t hipErrorInvalidImage = cudaErrorInvalidKernelImage;
inline constexpr hipError_t hipErrorInvalidContext = cudaErrorDeviceUninitialized;
inline constexpr hipError_t hipErrorNoBinaryForGpu = cudaErrorNoKernelImageForDevice;
inline constexpr hipError_t hipErrorInvalidHandle = cudaErrorInvalidResourceHandle;
inline constexpr hipError_t hipErrorInvalidResourceHandle = cudaErrorInvalidResourceHandle;
inline constexpr hipError_t hipErrorNotFound = cudaErrorSymbolNotFound;
inline constexpr hipError_t hipErrorNotReady = cudaErrorNotReady;
inline constexpr hipError_t hipErrorIllegalAddress = cudaErrorIllegalAddress;
inline constexpr hipError_t hipErrorLaunchOutOfResources = cudaErrorLaunchOutOfResources;
inline constexpr hipError_t hipErrorLaunchTimeOut = cudaErrorLaunchTimeout;
inline constexpr hipError_t hipErrorLaunchFailure = cudaErrorLaunchFailure;
inline constexpr hipError_t hipErrorCooperativeLaunchTooLarge = cudaErrorCooperativeLaunchTooLarge;
inline constexpr hipError_t hipErrorPeerAccessAlreadyEnabled = cudaErrorPeerAccessAlreadyEnabled;
inline constexpr hipError_t hipErrorPeerAccessNotEnabled = cudaErrorPeerAccessNotEnabled;
inline constexpr hipError_t hipErrorSetOnActiveProcess = cudaErrorSetOnActiveProcess;
inline constexpr hipError_t hipErrorAssert = cudaErrorAssert;
inline constexpr hipError_t hipErrorHostMemoryAlreadyRegistered = cudaErrorHostMemoryAlreadyRegistered;
inline constexpr hipError_t hipErrorHostMemoryNotRegistered = cudaErrorHostMemoryNotRegistered;
inline constexpr hipError_t hipErrorNotSupported = cudaErrorNotSupported;
inline constexpr hipError_t hipErrorUnknown = cudaErrorUnknown;

static inline hipError_t hipGetLastError(void) { return cudaGetLastError(); }
static inline hipError_t hipPeekAtLastError(void) { return cudaPeekAtLastError(); }
static inline const char* hipGetErrorString(hipError_t error) { return cudaGetErrorString(error); }
static inline const char* hipGetErrorName(hipError_t error) { return cudaGetErrorName(error); }

// ---- devices ------------------------------------------------------------------------------

static inline hipError_t hipDeviceSynchronize(void) { return cudaDeviceSynchronize(); }
static inline hipError_t hipDeviceReset(void) { return cudaDeviceReset(); }
static inline hipError_t hipGetDeviceCount(int* count) { return cudaGetDeviceCount(count); }
static inline hipError_t hipGetDevice(int* device) { return cudaGetDevice(device); }
static inline hipError_t hipSetDevice(int device) { return cudaSetDevice(device); }
static inline hipError_t hipDriverGetVersion(int* version) { return cudaDriverGetVersion(version); }
static inline hipError_t hipRuntimeGetVersion(int* version) { return cudaRuntimeGetVersion(version); }
static inline hipError_t hipMemGetInfo(size_t* free, size_t* total) { return cudaMemGetInfo(free, total); }

// Values are CUDA's, so hipDeviceGetAttribute forwards them unchanged; the few AMD-only
// attributes that have an NVIDIA meaning sit above the CUDA range and are answered below.
typedef enum hipDeviceAttribute_t {
  hipDeviceAttributeMaxThreadsPerBlock = cudaDevAttrMaxThreadsPerBlock,
  hipDeviceAttributeMaxBlockDimX = cudaDevAttrMaxBlockDimX,
  hipDeviceAttributeMaxBlockDimY = cudaDevAttrMaxBlockDimY,
  hipDeviceAttributeMaxBlockDimZ = cudaDevAttrMaxBlockDimZ,
  hipDeviceAttributeMaxGridDimX = cudaDevAttrMaxGridDimX,
  hipDeviceAttributeMaxGridDimY = cudaDevAttrMaxGridDimY,
  hipDeviceAttributeMaxGridDimZ = cudaDevAttrMaxGridDimZ,
  hipDeviceAttributeMaxSharedMemoryPerBlock = cudaDevAttrMaxSharedMemoryPerBlock,
  hipDeviceAttributeSharedMemPerBlockOptin = cudaDevAttrMaxSharedMemoryPerBlockOptin,
  hipDeviceAttributeSharedMemPerMultiprocessor = cudaDevAttrMaxSharedMemoryPerMultiprocessor,
  hipDeviceAttributeMaxSharedMemoryPerMultiprocessor = cudaDevAttrMaxSharedMemoryPerMultiprocessor,
  hipDeviceAttributeReservedSharedMemPerBlock = cudaDevAttrReservedSharedMemoryPerBlock,
  hipDeviceAttributeTotalConstantMemory = cudaDevAttrTotalConstantMemory,
  hipDeviceAttributeWarpSize = cudaDevAttrWarpSize,
  hipDeviceAttributeMaxPitch = cudaDevAttrMaxPitch,
  hipDeviceAttributeMaxRegistersPerBlock = cudaDevAttrMaxRegistersPerBlock,
  hipDeviceAttributeMaxRegistersPerMultiprocessor = cudaDevAttrMaxRegistersPerMultiprocessor,
  hipDeviceAttributeClockRate = cudaDevAttrClockRate,
  hipDeviceAttributeMemoryClockRate = cudaDevAttrMemoryClockRate,
  hipDeviceAttributeMemoryBusWidth = cudaDevAttrGlobalMemoryBusWidth,
  hipDeviceAttributeMultiprocessorCount = cudaDevAttrMultiProcessorCount,
  hipDeviceAttributeComputeCapabilityMajor = cudaDevAttrComputeCapabilityMajor,
  hipDeviceAttributeComputeCapabilityMinor = cudaDevAttrComputeCapabilityMinor,
  hipDeviceAttributeL2CacheSize = cudaDevAttrL2CacheSize,
  hipDeviceAttributePersistingL2CacheMaxSize = cudaDevAttrMaxPersistingL2CacheSize,
  hipDeviceAttributeMaxThreadsPerMultiProcessor = cudaDevAttrMaxThreadsPerMultiProcessor,
  hipDeviceAttributeMaxBlocksPerMultiProcessor = cudaDevAttrMaxBlocksPerMultiprocessor,
  hipDeviceAttributeComputeMode = cudaDevAttrComputeMode,
  hipDeviceAttributeConcurrentKernels = cudaDevAttrConcurrentKernels,
  hipDeviceAttributeAsyncEngineCount = cudaDevAttrAsyncEngineCount,
  hipDeviceAttributePciBusId = cudaDevAttrPciBusId,
  hipDeviceAttributePciDeviceId = cudaDevAttrPciDeviceId,
  hipDeviceAttributePciDomainID = cudaDevAttrPciDomainId,
  hipDeviceAttributeIntegrated = cudaDevAttrIntegrated,
  hipDeviceAttributeIsMultiGpuBoard = cudaDevAttrIsMultiGpuBoard,
  hipDeviceAttributeCanMapHostMemory = cudaDevAttrCanMapHostMemory,
  hipDeviceAttributeCooperativeLaunch = cudaDevAttrCooperativeLaunch,
  hipDeviceAttributeManagedMemory = cudaDevAttrManagedMemory,
  hipDeviceAttributeConcurrentManagedAccess = cudaDevAttrConcurrentManagedAccess,
  hipDeviceAttributePageableMemoryAccess = cudaDevAttrPageableMemoryAccess,
  hipDeviceAttributeUnifiedAddressing = cudaDevAttrUnifiedAddressing,
  hipDeviceAttributeEccEnabled = cudaDevAttrEccEnabled,
  hipDeviceAttributeKernelExecTimeout = cudaDevAttrKernelExecTimeout,
  hipDeviceAttributeStreamPrioritiesSupported = cudaDevAttrStreamPrioritiesSupported,
  hipDeviceAttributeGlobalL1CacheSupported = cudaDevAttrGlobalL1CacheSupported,
  hipDeviceAttributeLocalL1CacheSupported = cudaDevAttrLocalL1CacheSupported,
  hipDeviceAttributeMemoryPoolsSupported = cudaDevAttrMemoryPoolsSupported,
  // AMD-only in HIP; answered with the NVIDIA equivalent in hipDeviceGetAttribute.
  hipDeviceAttributeClockInstructionRate = 0x10000,
  hipDeviceAttributeWallClockRate,
  hipDeviceAttributePhysicalMultiProcessorCount,
} hipDeviceAttribute_t;

static inline hipError_t hipDeviceGetAttribute(int* value, hipDeviceAttribute_t attr, int device) {
  switch (attr) {
    case hipDeviceAttributeClockInstructionRate:
      return cudaDeviceGetAttribute(value, cudaDevAttrClockRate, device);
    case hipDeviceAttributeWallClockRate:
      // wall_clock64() reads %globaltimer, which counts nanoseconds: 1e6 kHz.
      *value = 1000000;
      return cudaSuccess;
    case hipDeviceAttributePhysicalMultiProcessorCount:
      return cudaDeviceGetAttribute(value, cudaDevAttrMultiProcessorCount, device);
    default:
      return cudaDeviceGetAttribute(value, static_cast<cudaDeviceAttr>(attr), device);
  }
}

// HIP's commonly read fields; CUDA 13 dropped the clock and mode fields from cudaDeviceProp,
// so those are filled from device attributes. gcnArchName holds "sm_XY" on this backend.
typedef struct hipDeviceProp_t {
  char name[256];
  char gcnArchName[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  size_t sharedMemPerBlockOptin;
  size_t sharedMemPerMultiprocessor;
  size_t maxSharedMemoryPerMultiProcessor;
  size_t totalConstMem;
  size_t memPitch;
  int regsPerBlock;
  int regsPerMultiprocessor;
  int warpSize;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int maxThreadsPerMultiProcessor;
  int maxBlocksPerMultiProcessor;
  int clockRate;
  int clockInstructionRate;
  int memoryClockRate;
  int memoryBusWidth;
  int major;
  int minor;
  int multiProcessorCount;
  int l2CacheSize;
  int persistingL2CacheMaxSize;
  int computeMode;
  int concurrentKernels;
  int asyncEngineCount;
  int pciDomainID;
  int pciBusID;
  int pciDeviceID;
  int isMultiGpuBoard;
  int integrated;
  int canMapHostMemory;
  int cooperativeLaunch;
  int managedMemory;
  int concurrentManagedAccess;
  int pageableMemoryAccess;
  int unifiedAddressing;
  int ECCEnabled;
  int kernelExecTimeoutEnabled;
  int streamPrioritiesSupported;
} hipDeviceProp_t;

static inline hipError_t hipGetDeviceProperties(hipDeviceProp_t* prop, int device) {
  cudaDeviceProp p;
  hipError_t err = cudaGetDeviceProperties(&p, device);
  if (err != cudaSuccess) return err;
  memset(prop, 0, sizeof(*prop));
  memcpy(prop->name, p.name, sizeof(prop->name));
  prop->name[sizeof(prop->name) - 1] = '\0';
  // "sm_" + up to three digits each: bounded well inside 256 bytes.
  char* arch = prop->gcnArchName;
  int n = 0;
  arch[n++] = 's';
  arch[n++] = 'm';
  arch[n++] = '_';
  int parts[2] = {p.major, p.minor};
  for (int part : parts) {
    char digits[12];
    int d = 0;
    unsigned v = part < 0 ? 0u : static_cast<unsigned>(part);
    do {
      digits[d++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v && d < 11);
    while (d) arch[n++] = digits[--d];
  }
  arch[n] = '\0';
  prop->totalGlobalMem = p.totalGlobalMem;
  prop->sharedMemPerBlock = p.sharedMemPerBlock;
  prop->sharedMemPerBlockOptin = p.sharedMemPerBlockOptin;
  prop->sharedMemPerMultiprocessor = p.sharedMemPerMultiprocessor;
  prop->maxSharedMemoryPerMultiProcessor = p.sharedMemPerMultiprocessor;
  prop->totalConstMem = p.totalConstMem;
  prop->memPitch = p.memPitch;
  prop->regsPerBlock = p.regsPerBlock;
  prop->regsPerMultiprocessor = p.regsPerMultiprocessor;
  prop->warpSize = p.warpSize;
  prop->maxThreadsPerBlock = p.maxThreadsPerBlock;
  for (int i = 0; i < 3; ++i) {
    prop->maxThreadsDim[i] = p.maxThreadsDim[i];
    prop->maxGridSize[i] = p.maxGridSize[i];
  }
  prop->maxThreadsPerMultiProcessor = p.maxThreadsPerMultiProcessor;
  prop->maxBlocksPerMultiProcessor = p.maxBlocksPerMultiProcessor;
  prop->memoryBusWidth = p.memoryBusWidth;
  prop->major = p.major;
  prop->minor = p.minor;
  prop->multiProcessorCount = p.multiProcessorCount;
  prop->l2CacheSize = p.l2CacheSize;
  prop->persistingL2CacheMaxSize = p.persistingL2CacheMaxSize;
  prop->concurrentKernels = p.concurrentKernels;
  prop->asyncEngineCount = p.asyncEngineCount;
  prop->pciDomainID = p.pciDomainID;
  prop->pciBusID = p.pciBusID;
  prop->pciDeviceID = p.pciDeviceID;
  prop->isMultiGpuBoard = p.isMultiGpuBoard;
  prop->integrated = p.integrated;
  prop->canMapHostMemory = p.canMapHostMemory;
  prop->cooperativeLaunch = p.cooperativeLaunch;
  prop->managedMemory = p.managedMemory;
  prop->concurrentManagedAccess = p.concurrentManagedAccess;
  prop->pageableMemoryAccess = p.pageableMemoryAccess;
  prop->unifiedAddressing = p.unifiedAddressing;
  prop->ECCEnabled = p.ECCEnabled;
  prop->streamPrioritiesSupported = p.streamPrioritiesSupported;
  const struct {
    int* field;
    cudaDeviceAttr attr;
  } from_attributes[] = {
      {&prop->clockRate, cudaDevAttrClockRate},
      {&prop->clockInstructionRate, cudaDevAttrClockRate},
      {&prop->memoryClockRate, cudaDevAttrMemoryClockRate},
      {&prop->computeMode, cudaDevAttrComputeMode},
      {&prop->kernelExecTimeoutEnabled, cudaDevAttrKernelExecTimeout},
  };
  for (const auto& f : from_attributes) {
    err = cudaDeviceGetAttribute(f.field, f.attr, device);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

// ---- memory -------------------------------------------------------------------------------
typedef cudaMemcpyKind hipMemcpyKind;
inline constexpr hipMemcpyKind hipMemcpyHostToHost = cudaMemcpyHostToHost;
inline constexpr hipMemcpyKind hipMemcpyHostToDevice = cudaMemcpyHostToDevice;
inline constexpr hipMemcpyKind hipMemcpyDeviceToHost = cudaMemcpyDeviceToHost;
inline constexpr hipMemcpyKind hipMemcpyDeviceToDevice = cudaMemcpyDeviceToDevice;
inline constexpr hipMemcpyKind hipMemcpyDefault = cudaMemcpyDefault;

#define hipHostMallocDefault 0x0
#define hipHostMallocPortable 0x1
#define hipHostMallocMapped 0x2
#define hipHostMallocWriteCombined 0x4
#define hipMemAttachGlobal 0x01
#define hipMemAttachHost 0x02

static inline hipError_t hipMalloc(void** ptr, size_t size) { return cudaMalloc(ptr, size); }
template <class T>
static inline hipError_t hipMalloc(T** ptr, size_t size) {
  return cudaMalloc(reinterpret_cast<void**>(ptr), size);
}
static inline hipError_t hipFree(void* ptr) { return cudaFree(ptr); }
static inline hipError_t hipMallocAsync(void** ptr, size_t size, hipStream_t stream) {
  return cudaMallocAsync(ptr, size, stream);
}
template <class T>
static inline hipError_t hipMallocAsync(T** ptr, size_t size, hipStream_t stream) {
  return cudaMallocAsync(reinterpret_cast<void**>(ptr), size, stream);
}
static inline hipError_t hipFreeAsync(void* ptr, hipStream_t stream) {
  return cudaFreeAsync(ptr, stream);
}
static inline hipError_t hipMallocManaged(void** ptr, size_t size,
                                          unsigned int flags = hipMemAttachGlobal) {
  return cudaMallocManaged(ptr, size, flags);
}
template <class T>
static inline hipError_t hipMallocManaged(T** ptr, size_t size,
                                          unsigned int flags = hipMemAttachGlobal) {
  return cudaMallocManaged(reinterpret_cast<void**>(ptr), size, flags);
}
// hipHostMallocPortable/Mapped/WriteCombined have CUDA's cudaHostAlloc* values.
static inline hipError_t hipHostMalloc(void** ptr, size_t size,
                                       unsigned int flags = hipHostMallocDefault) {
  return cudaHostAlloc(ptr, size, flags);
}
template <class T>
static inline hipError_t hipHostMalloc(T** ptr, size_t size,
                                       unsigned int flags = hipHostMallocDefault) {
  return cudaHostAlloc(reinterpret_cast<void**>(ptr), size, flags);
}
static inline hipError_t hipHostFree(void* ptr) { return cudaFreeHost(ptr); }

static inline hipError_t hipMemcpy(void* dst, const void* src, size_t bytes, hipMemcpyKind kind) {
  return cudaMemcpy(dst, src, bytes, kind);
}
static inline hipError_t hipMemcpyAsync(void* dst, const void* src, size_t bytes,
                                        hipMemcpyKind kind, hipStream_t stream = 0) {
  return cudaMemcpyAsync(dst, src, bytes, kind, stream);
}
static inline hipError_t hipMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch,
                                     size_t width, size_t height, hipMemcpyKind kind) {
  return cudaMemcpy2D(dst, dpitch, src, spitch, width, height, kind);
}
static inline hipError_t hipMemcpy2DAsync(void* dst, size_t dpitch, const void* src,
                                          size_t spitch, size_t width, size_t height,
                                          hipMemcpyKind kind, hipStream_t stream = 0) {
  return cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, kind, stream);
}
static inline hipError_t hipMemset(void* dst, int value, size_t bytes) {
  return cudaMemset(dst, value, bytes);
}
static inline hipError_t hipMemsetAsync(void* dst, int value, size_t bytes,
                                        hipStream_t stream = 0) {
  return cudaMemsetAsync(dst, value, bytes, stream);
}

// Symbols: HIP_SYMBOL(x) is x. A variable binds by reference (its own address is the symbol);
// a pointer argument is taken to be the symbol's address, as (const void*)&x is.
template <class T, class = std::enable_if_t<!std::is_pointer<T>::value>>
static inline hipError_t hipMemcpyToSymbol(const T& symbol, const void* src, size_t bytes,
                                           size_t offset = 0,
                                           hipMemcpyKind kind = hipMemcpyHostToDevice) {
  return cudaMemcpyToSymbol(static_cast<const void*>(&symbol), src, bytes, offset, kind);
}
static inline hipError_t hipMemcpyToSymbol(const void* symbol, const void* src, size_t bytes,
                                           size_t offset = 0,
                                           hipMemcpyKind kind = hipMemcpyHostToDevice) {
  return cudaMemcpyToSymbol(symbol, src, bytes, offset, kind);
}
template <class T, class = std::enable_if_t<!std::is_pointer<T>::value>>
static inline hipError_t hipMemcpyToSymbolAsync(const T& symbol, const void* src, size_t bytes,
                                                size_t offset, hipMemcpyKind kind,
                                                hipStream_t stream = 0) {
  return cudaMemcpyToSymbolAsync(static_cast<const void*>(&symbol), src, bytes, offset, kind,
                                 stream);
}
static inline hipError_t hipMemcpyToSymbolAsync(const void* symbol, const void* src,
                                                size_t bytes, size_t offset, hipMemcpyKind kind,
                                                hipStream_t stream = 0) {
  return cudaMemcpyToSymbolAsync(symbol, src, bytes, offset, kind, stream);
}
template <class T, class = std::enable_if_t<!std::is_pointer<T>::value>>
static inline hipError_t hipMemcpyFromSymbol(void* dst, const T& symbol, size_t bytes,
                                             size_t offset = 0,
                                             hipMemcpyKind kind = hipMemcpyDeviceToHost) {
  return cudaMemcpyFromSymbol(dst, static_cast<const void*>(&symbol), bytes, offset, kind);
}
static inline hipError_t hipMemcpyFromSymbol(void* dst, const void* symbol, size_t bytes,
                                             size_t offset = 0,
                                             hipMemcpyKind kind = hipMemcpyDeviceToHost) {
  return cudaMemcpyFromSymbol(dst, symbol, bytes, offset, kind);
}
template <class T, class = std::enable_if_t<!std::is_pointer<T>::value>>
static inline hipError_t hipMemcpyFromSymbolAsync(void* dst, const T& symbol, size_t bytes,
                                                  size_t offset, hipMemcpyKind kind,
                                                  hipStream_t stream = 0) {
  return cudaMemcpyFromSymbolAsync(dst, static_cast<const void*>(&symbol), bytes, offset, kind,
                                   stream);
}
static inline hipError_t hipMemcpyFromSymbolAsync(void* dst, const void* symbol, size_t bytes,
                                                  size_t offset, hipMemcpyKind kind,
                                                  hipStream_t stream = 0) {
  return cudaMemcpyFromSymbolAsync(dst, symbol, bytes, offset, kind, stream);
}
template <class T, class = std::enable_if_t<!std::is_pointer<T>::value>>
static inline hipError_t hipGetSymbolAddress(void** devPtr, const T& symbol) {
  return cudaGetSymbolAddress(devPtr, static_cast<const void*>(&symbol));
}
static inline hipError_t hipGetSymbolAddress(void** devPtr, const void* symbol) {
  return cudaGetSymbolAddress(devPtr, symbol);
}
template <class T, class = std::enable_if_t<!std::is_pointer<T>::value>>
static inline hipError_t hipGetSymbolSize(size_t* size, const T& symbol) {
  return cudaGetSymbolSize(size, static_cast<const void*>(&symbol));
}
static inline hipError_t hipGetSymbolSize(size_t* size, const void* symbol) {
  return cudaGetSymbolSize(size, symbol);
}

// ---- streams and events -------------------------------------------------------------------

#define hipStreamDefault 0x00
#define hipStreamNonBlocking 0x01
#define hipStreamPerThread cudaStreamPerThread
#define hipEventDefault 0x0
#define hipEventBlockingSync 0x1
#define hipEventDisableTiming 0x2
#define hipEventInterprocess 0x4

static inline hipError_t hipStreamCreate(hipStream_t* stream) { return cudaStreamCreate(stream); }
static inline hipError_t hipStreamCreateWithFlags(hipStream_t* stream, unsigned int flags) {
  return cudaStreamCreateWithFlags(stream, flags);
}
static inline hipError_t hipStreamCreateWithPriority(hipStream_t* stream, unsigned int flags,
                                                     int priority) {
  return cudaStreamCreateWithPriority(stream, flags, priority);
}
static inline hipError_t hipDeviceGetStreamPriorityRange(int* least, int* greatest) {
  return cudaDeviceGetStreamPriorityRange(least, greatest);
}
static inline hipError_t hipStreamDestroy(hipStream_t stream) { return cudaStreamDestroy(stream); }
static inline hipError_t hipStreamSynchronize(hipStream_t stream) {
  return cudaStreamSynchronize(stream);
}
static inline hipError_t hipStreamQuery(hipStream_t stream) { return cudaStreamQuery(stream); }
static inline hipError_t hipStreamWaitEvent(hipStream_t stream, hipEvent_t event,
                                            unsigned int flags = 0) {
  return cudaStreamWaitEvent(stream, event, flags);
}

static inline hipError_t hipEventCreate(hipEvent_t* event) { return cudaEventCreate(event); }
static inline hipError_t hipEventCreateWithFlags(hipEvent_t* event, unsigned int flags) {
  return cudaEventCreateWithFlags(event, flags);
}
static inline hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream = 0) {
  return cudaEventRecord(event, stream);
}
static inline hipError_t hipEventSynchronize(hipEvent_t event) {
  return cudaEventSynchronize(event);
}
static inline hipError_t hipEventQuery(hipEvent_t event) { return cudaEventQuery(event); }
static inline hipError_t hipEventElapsedTime(float* ms, hipEvent_t start, hipEvent_t stop) {
  return cudaEventElapsedTime(ms, start, stop);
}
static inline hipError_t hipEventDestroy(hipEvent_t event) { return cudaEventDestroy(event); }

// ---- kernels: attributes, occupancy, launches ---------------------------------------------
// HIP's values equal cudaFuncAttribute's for these two, so they pass through unchanged.
typedef enum hipFuncAttribute {
  hipFuncAttributeMaxDynamicSharedMemorySize = cudaFuncAttributeMaxDynamicSharedMemorySize,
  hipFuncAttributePreferredSharedMemoryCarveout = cudaFuncAttributePreferredSharedMemoryCarveout,
} hipFuncAttribute;
typedef cudaFuncAttributes hipFuncAttributes;

static inline hipError_t hipFuncSetAttribute(const void* func, hipFuncAttribute attr, int value) {
  return cudaFuncSetAttribute(func, static_cast<cudaFuncAttribute>(attr), value);
}
template <class F>
static inline hipError_t hipFuncSetAttribute(F* func, hipFuncAttribute attr, int value) {
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(func),
                              static_cast<cudaFuncAttribute>(attr), value);
}
static inline hipError_t hipFuncGetAttributes(hipFuncAttributes* attr, const void* func) {
  return cudaFuncGetAttributes(attr, func);
}
template <class F>
static inline hipError_t hipFuncGetAttributes(hipFuncAttributes* attr, F* func) {
  return cudaFuncGetAttributes(attr, reinterpret_cast<const void*>(func));
}

static inline hipError_t hipOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks,
                                                                      const void* func,
                                                                      int blockSize,
                                                                      size_t dynamicSharedBytes) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, func, blockSize,
                                                       dynamicSharedBytes);
}
template <class F>
static inline hipError_t hipOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, F* func,
                                                                      int blockSize,
                                                                      size_t dynamicSharedBytes) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      blocks, reinterpret_cast<const void*>(func), blockSize, dynamicSharedBytes);
}
template <class F>
static inline hipError_t hipOccupancyMaxPotentialBlockSize(int* gridSize, int* blockSize, F func,
                                                           size_t dynamicSharedBytes = 0,
                                                           int blockSizeLimit = 0) {
  return cudaOccupancyMaxPotentialBlockSize(gridSize, blockSize, func, dynamicSharedBytes,
                                            blockSizeLimit);
}

static inline hipError_t hipLaunchKernel(const void* func, dim3 grid, dim3 block, void** args,
                                         size_t sharedBytes, hipStream_t stream) {
  return cudaLaunchKernel(func, grid, block, args, sharedBytes, stream);
}
template <class F>
static inline hipError_t hipLaunchKernel(F* func, dim3 grid, dim3 block, void** args,
                                         size_t sharedBytes, hipStream_t stream) {
  return cudaLaunchKernel(reinterpret_cast<const void*>(func), grid, block, args, sharedBytes,
                          stream);
}
static inline hipError_t hipLaunchCooperativeKernel(const void* func, dim3 grid, dim3 block,
                                                    void** args, unsigned int sharedBytes,
                                                    hipStream_t stream) {
  return cudaLaunchCooperativeKernel(func, grid, block, args, sharedBytes, stream);
}
template <class F>
static inline hipError_t hipLaunchCooperativeKernel(F* func, dim3 grid, dim3 block, void** args,
                                                    unsigned int sharedBytes,
                                                    hipStream_t stream) {
  return cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(func), grid, block, args,
                                     sharedBytes, stream);
}

#endif
