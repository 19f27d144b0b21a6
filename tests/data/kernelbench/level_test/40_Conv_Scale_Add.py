import torch
import torch.nn as nn


class Model(nn.Module):
    """Level-2 style chain: conv2d, scale, add a learned bias, then GELU."""

    def __init__(self, in_channels, out_channels, kernel_size, scale):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.02)
        self.scale = scale

    def forward(self, x):
        return torch.nn.functional.gelu(self.conv(x) * self.scale + self.bias)


def get_inputs():
    return [torch.randn(2, 3, 16, 16)]


def get_init_inputs():
    return [3, 8, 3, 0.5]
