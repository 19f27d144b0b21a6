// hipevolve HIP-on-NVIDIA layer, internal: the pair of hipevolve_cuda_include_begin.h.
#pragma pop_macro("__launch_bounds__")
#pragma pop_macro("__ballot")
#pragma pop_macro("__all")
#pragma pop_macro("__any")
