"""ReLU as a KernelBench candidate whose plain C++ extension (runs on the CPU) does no work of
its own: it calls torch.relu through Python from C++ (pybind11's module import), imports only
what any extension's bindings import, and so passes the build stage's library check. The call
goes through the dispatcher, where the executor's watch sees aten.relu: it must be hacked."""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>

torch::Tensor relu_forward(torch::Tensor x) {
    auto mod = pybind11::module_::import("tor" "ch");
    return mod.attr("re" "lu")(x).cast<torch::Tensor>();
}
"""

relu_ext = load_inline(
    name="hipevolve_test_cpu_relu_python_call",
    cpp_sources=cpp_source,
    functions=["relu_forward"],
    extra_cflags=["-O2"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return relu_ext.relu_forward(x.contiguous())
