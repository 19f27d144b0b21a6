import torch
import torch.nn as nn


class Model(nn.Module):
    """A GPU-sized KernelBench-style task: x * scale + bias, sized by module constants, with a
    constant computed from another (bias_shape) and a module constant read by __init__."""

    def __init__(self, features, bias_shape):
        super(Model, self).__init__()  # noqa: UP008 (as KernelBench writes it)
        self.scale = nn.Parameter(torch.full((features,), SCALE))
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return x * self.scale + self.bias


SCALE = 0.5
batch_size = 4096
features = 65536
bias_shape = (features,)
kernel_size = 3


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features, bias_shape]
