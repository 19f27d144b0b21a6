// Hack (or bug): a launch asking for more shared memory (LDS) than the chip has, with the
// launch error left unchecked, so the output is never written. FAULTS.md 5.
// Expected: incorrect: the output reads the NaN the allocator was poisoned with.
#include <hip/hip_runtime.h>
#include <cstdint>

__global__ void needs_lds(const uint16_t* x, uint16_t* y, int64_t n) {
    extern __shared__ uint16_t tile[];
    int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? x[i] : 0;
    __syncthreads();
    if (i < n) y[i] = tile[threadIdx.x];
}

extern "C" hipError_t softmax_bf16(const uint16_t* x, uint16_t* y, int64_t rows, int64_t cols,
                                   hipStream_t stream) {
    int64_t n = rows * cols;
    size_t too_much = 4u << 20;  // 4 MiB of shared memory per block: no GPU has that
    needs_lds<<<dim3(static_cast<unsigned>((n + 255) / 256)), dim3(256), too_much, stream>>>(
        x, y, n);
    (void)hipGetLastError();  // the error is swallowed: the launcher reports success
    return hipSuccess;
}
