// hipevolve HIP-on-NVIDIA layer: <hip/hip_bf16.h> on CUDA's cuda_bf16.h. HIP's bf16 API uses
// CUDA's function names (__float2bfloat16, __bfloat162float, __float22bfloat162_rn,
// __bfloat1622float2, __floats2bfloat162_rn, __low2float, __hadd2, ...); only the type names
// differ, and they are aliases here. The older hip_bfloat16 class (hip/hip_bfloat16.h, with a
// .data member) is not covered: read raw bits with __bfloat16_as_ushort.
#ifndef HIPEVOLVE_HIP_BF16_H
#define HIPEVOLVE_HIP_BF16_H

#include <hip/hip_common.h>

#include <hip/hipevolve_cuda_include_begin.h>
#include <cuda_bf16.h>
#include <hip/hipevolve_cuda_include_end.h>

typedef __nv_bfloat16 __hip_bfloat16;
typedef __nv_bfloat162 __hip_bfloat162;
typedef __nv_bfloat16_raw __hip_bfloat16_raw;
typedef __nv_bfloat162_raw __hip_bfloat162_raw;

#endif
