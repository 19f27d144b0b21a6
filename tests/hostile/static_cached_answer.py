# hack: caches the answer on self and replays it on the next call (FAULTS 13).
# expect: state-in-forward
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
__global__ void copy_kernel(const float* x, float* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
torch::Tensor run(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    copy_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
ext = load_inline(
    name="hostile",
    cpp_sources="torch::Tensor run(torch::Tensor x);",
    cuda_sources=cuda_source,
    functions=["run"],
)


class ModelNew(nn.Module):
    def forward(self, x):
        if getattr(self, "cached", None) is None:
            self.cached = ext.run(x)
        return self.cached
