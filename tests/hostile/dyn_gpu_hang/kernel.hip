// Hack: a kernel that never finishes (`while (1)` on a flag nobody sets). FAULTS.md 1.
// Expected: timeout in stage check, the process killed within the timeout + 2 s, GPU memory
// freed with the process, and the next candidate on the GPU unaffected.
#include <hip/hip_runtime.h>
#include <cstdint>

__global__ void spin(volatile int* flag, uint16_t* y) {
    while (*flag == 0) {
    }
    y[threadIdx.x] = 0;
}

extern "C" hipError_t softmax_bf16(const uint16_t* x, uint16_t* y, int64_t rows, int64_t cols,
                                   hipStream_t stream) {
    // A word of device memory that stays zero: the kernel waits for it forever.
    static int* flag = nullptr;
    if (flag == nullptr) {
        hipMalloc(reinterpret_cast<void**>(&flag), sizeof(int));
        hipMemset(flag, 0, sizeof(int));
    }
    spin<<<dim3(1), dim3(32), 0, stream>>>(flag, y);
    return hipGetLastError();
}
