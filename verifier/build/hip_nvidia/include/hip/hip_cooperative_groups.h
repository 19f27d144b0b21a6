// hipevolve HIP-on-NVIDIA layer: <hip/hip_cooperative_groups.h> is CUDA's cooperative_groups.h.
// HIP's API uses the same namespace (cooperative_groups) and names: this_thread_block(),
// tiled_partition<N>(), thread_block_tile<N> with shfl/shfl_down/shfl_up/shfl_xor/ballot/any/
// all, sync(), thread_rank(), size(), this_grid() with sync() after hipLaunchCooperativeKernel.
// Tiles are at most 32 lanes here (64 on CDNA).
#ifndef HIPEVOLVE_HIP_COOPERATIVE_GROUPS_H
#define HIPEVOLVE_HIP_COOPERATIVE_GROUPS_H

#include <hip/hip_runtime.h>

#include <hip/hipevolve_cuda_include_begin.h>
#include <cooperative_groups.h>
#include <hip/hipevolve_cuda_include_end.h>

#endif
