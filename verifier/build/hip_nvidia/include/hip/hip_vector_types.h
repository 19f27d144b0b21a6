// hipevolve HIP-on-NVIDIA layer: <hip/hip_vector_types.h> is CUDA's vector_types.h (float4,
// int2, uint4, ... and make_float4 and friends). HIP's vector types also define arithmetic
// operators (a + b on float4); CUDA's do not, and this layer does not add them.
#ifndef HIPEVOLVE_HIP_VECTOR_TYPES_H
#define HIPEVOLVE_HIP_VECTOR_TYPES_H

#include <hip/hip_common.h>

#include <vector_types.h>
#include <vector_functions.h>

#endif
