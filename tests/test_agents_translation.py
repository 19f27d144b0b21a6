"""translator from CUDA source through PyTorch's hipify: the result is a native candidate that
compiles with the project's cuda backend (nvcc through its HIP-to-CUDA layer)."""

from __future__ import annotations

import pytest
from agents_support import nvcc_compiler
from standin import MODEL  # a ModelNew calling kernels.scale(x, y, n)

from hipevolve.agents.lowering.hipify import from_cuda
from hipevolve.core.errors import UserError
from hipevolve.verifier.build.compile import build
from hipevolve.verifier.screen.screening import screen

CUDA = """\
#include <cuda_runtime.h>

__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}

extern "C" cudaError_t scale(const float* x, float* y, int n, cudaStream_t stream) {
    scale_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n);
    return cudaGetLastError();
}
"""


def test_hipified_cuda_kernel_is_a_native_candidate_that_compiles_with_the_cuda_backend(tmp_path):
    candidate = from_cuda(CUDA, MODEL)
    hip = candidate.hip_source
    assert "#include <hip/hip_runtime.h>" in hip and "cuda" not in hip.lower()
    assert 'extern "C" hipError_t scale(' in hip and "hipLaunchKernelGGL" in hip
    assert screen(candidate).passed, screen(candidate).flags
    result = build(hip, nvcc_compiler(), tmp_path)
    assert result.ok, result.log


def test_cuda_source_without_an_extern_c_launcher_is_one_line():
    with pytest.raises(UserError, match='no extern "C" launcher'):
        from_cuda("__global__ void k() {}\n", MODEL)
