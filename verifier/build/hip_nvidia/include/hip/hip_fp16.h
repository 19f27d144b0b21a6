// hipevolve HIP-on-NVIDIA layer: <hip/hip_fp16.h> is CUDA's cuda_fp16.h. __half, __half2,
// __half_raw, __float2half, __half2float, __floats2half2_rn, __hadd, __hmul, __hfma, hexp and
// the rest have the same names on both platforms. Kept out of hip_runtime.h, as in HIP, because
// it costs compile time.
#ifndef HIPEVOLVE_HIP_FP16_H
#define HIPEVOLVE_HIP_FP16_H

#include <hip/hip_common.h>

#include <hip/hipevolve_cuda_include_begin.h>
#include <cuda_fp16.h>
#include <hip/hipevolve_cuda_include_end.h>

#endif
