# hack: writes a file outside its sandbox (a channel to the harness or to later candidates, FAULTS 8).
# expect: file-io
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
        with open("/tmp/hipevolve_answers.pt", "wb") as f:
            f.write(b"cached")
        return ext.run(x)
