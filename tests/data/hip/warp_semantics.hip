// Warp intrinsics with HIP's signatures, run by tests/test_hip_nvidia_layer.py, which checks each
// lane's result against HIP's lane rules. Every launch is one block; lane values are 1000 + tid
// (and 1000.5 + tid as float and double, 2^40 + tid as 64-bit), so a wrong source lane shows.
#include <hip/hip_runtime.h>

enum Op { kShfl = 0, kShflUp = 1, kShflDown = 2, kShflXor = 3 };

template <typename T>
__device__ T shuffle(int op, T v, int arg, int width) {
  // width <= 0 means "leave it out", to test the default (warpSize).
  switch (op) {
    case kShfl:
      return width > 0 ? __shfl(v, arg, width) : __shfl(v, arg);
    case kShflUp:
      return width > 0 ? __shfl_up(v, static_cast<unsigned int>(arg), width)
                       : __shfl_up(v, static_cast<unsigned int>(arg));
    case kShflDown:
      return width > 0 ? __shfl_down(v, static_cast<unsigned int>(arg), width)
                       : __shfl_down(v, static_cast<unsigned int>(arg));
    default:
      return width > 0 ? __shfl_xor(v, arg, width) : __shfl_xor(v, arg);
  }
}

template <typename T>
__global__ void shuffle_kernel(int op, int arg, int width, T base, T* out) {
  const int tid = threadIdx.x;
  out[tid] = shuffle(op, static_cast<T>(base + static_cast<T>(tid)), arg, width);
}

template <typename T>
static hipError_t launch(int op, int arg, int width, T base, T* out, int threads,
                         hipStream_t stream) {
  hipLaunchKernelGGL(HIP_KERNEL_NAME(shuffle_kernel<T>), dim3(1), dim3(threads), 0, stream, op,
                     arg, width, base, out);
  return hipGetLastError();
}

extern "C" hipError_t shuffle_int(int op, int arg, int width, int* out, int threads,
                                  hipStream_t stream) {
  return launch<int>(op, arg, width, 1000, out, threads, stream);
}

extern "C" hipError_t shuffle_float(int op, int arg, int width, float* out, int threads,
                                    hipStream_t stream) {
  return launch<float>(op, arg, width, 1000.5f, out, threads, stream);
}

extern "C" hipError_t shuffle_double(int op, int arg, int width, double* out, int threads,
                                     hipStream_t stream) {
  return launch<double>(op, arg, width, 1000.5, out, threads, stream);
}

extern "C" hipError_t shuffle_int64(int op, int arg, int width, int64_t* out, int threads,
                                    hipStream_t stream) {
  return launch<long long>(op, arg, width, 1LL << 40, reinterpret_cast<long long*>(out), threads,
                           stream);
}

// Per thread: __ballot(tid % 3 == 0) (64-bit), __any(tid == 5), __all(tid < 40), __lane_id(),
// warpSize, and the 32-bit __activemask().
__global__ void vote_kernel(unsigned long long* ballot, int* any, int* all, int* lane,
                            int* warp_size, unsigned long long* active) {
  const int tid = threadIdx.x;
  ballot[tid] = __ballot(tid % 3 == 0);
  any[tid] = __any(tid == 5);
  all[tid] = __all(tid < 40);
  lane[tid] = static_cast<int>(__lane_id());
  warp_size[tid] = warpSize;
  active[tid] = __activemask();
}

extern "C" hipError_t votes(uint64_t* ballot, int* any, int* all, int* lane, int* warp_size,
                            uint64_t* active, int threads, hipStream_t stream) {
  vote_kernel<<<1, threads, 0, stream>>>(reinterpret_cast<unsigned long long*>(ballot), any, all,
                                         lane, warp_size,
                                         reinterpret_cast<unsigned long long*>(active));
  return hipGetLastError();
}
