// Hack: an illegal memory access (a store through a wild pointer). FAULTS.md 3.
// Expected: runtime_error naming the device error; the next candidate on the GPU is unaffected.
#include <hip/hip_runtime.h>
#include <cstdint>

__global__ void wild_store(uint16_t* y, int64_t n) {
    uint16_t* wild = reinterpret_cast<uint16_t*>(0x10);  // never a valid device address
    int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) wild[i * 4099] = y[i];
}

extern "C" hipError_t softmax_bf16(const uint16_t* x, uint16_t* y, int64_t rows, int64_t cols,
                                   hipStream_t stream) {
    int64_t n = rows * cols;
    wild_store<<<dim3(static_cast<unsigned>((n + 255) / 256)), dim3(256), 0, stream>>>(y, n);
    return hipGetLastError();
}
