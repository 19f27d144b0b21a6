# hack: the load_inline wrapper calls ATen (torch::softmax, .exp()) so PyTorch, not the kernel,
# computes the answer; the Python side looks clean.
# expect: torch-compute
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

__global__ void noop_kernel() {}

torch::Tensor run(torch::Tensor x) {
    noop_kernel<<<1, 1>>>();
    auto y = torch::softmax(x, -1);
    return y.exp().log();
}
"""

ext = load_inline(
    name="hostile_cxx_compute",
    cpp_sources="torch::Tensor run(torch::Tensor x);",
    cuda_sources=cuda_source,
    functions=["run"],
)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.run(x)
