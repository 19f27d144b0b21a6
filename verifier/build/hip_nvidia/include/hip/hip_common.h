// hipevolve HIP-on-NVIDIA layer: platform macros, as HIP's own hip_common.h sets them for nvcc.
#ifndef HIPEVOLVE_HIP_COMMON_H
#define HIPEVOLVE_HIP_COMMON_H

#if defined(__HIP_PLATFORM_AMD__) || defined(__HIP_PLATFORM_HCC__)
#error "hipevolve's HIP-on-NVIDIA headers were reached with __HIP_PLATFORM_AMD__ defined: build for AMD with hipcc and ROCm's headers"
#endif

// Marks this layer (not ROCm's HIP-on-NVIDIA headers) for code and tests that need to know.
#define HIPEVOLVE_NVIDIA_LAYER 1

#ifndef __HIP_PLATFORM_NVIDIA__
#define __HIP_PLATFORM_NVIDIA__ 1
#endif
// The pre-ROCm-6 spelling, still tested by older kernels.
#ifndef __HIP_PLATFORM_NVCC__
#define __HIP_PLATFORM_NVCC__ 1
#endif

// __HIP__ stays undefined: it means "the clang HIP front end", which this is not.
#ifdef __CUDACC__
#define __HIPCC__ 1
#endif
#ifdef __CUDA_ARCH__
#define __HIP_DEVICE_COMPILE__ 1
#endif

#endif
