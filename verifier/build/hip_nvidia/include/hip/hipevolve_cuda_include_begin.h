// hipevolve HIP-on-NVIDIA layer, internal: include before a CUDA header that may be reached
// after <hip/hip_runtime.h>, and hipevolve_cuda_include_end.h after it. HIP's vote macros
// (__any, __all, __ballot) rename those tokens and HIP's __launch_bounds__ reads two arguments
// its own way; CUDA's headers are read with CUDA's meanings instead. No include guard: it is
// used once per CUDA header.
#pragma push_macro("__any")
#pragma push_macro("__all")
#pragma push_macro("__ballot")
#pragma push_macro("__launch_bounds__")
#undef __any
#undef __all
#undef __ballot
#undef __launch_bounds__
#define __launch_bounds__(...) __annotate__(launch_bounds(__VA_ARGS__))
