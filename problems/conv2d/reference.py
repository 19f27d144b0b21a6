"""3x3 convolution, stride 1, padding 1, no bias, NCHW: the 3x3 convs of ResNet-50 bottlenecks."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, dtype: str = "bfloat16"):
        super().__init__()
        # Default (Kaiming-uniform) init, drawn in fp32 and cast, so it is seeded the same way
        # whatever the dtype.
        conv = nn.Conv2d(in_channels, out_channels, 3, stride=1, padding=1, bias=False)
        self.conv = conv.to(getattr(torch, dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs(
    batch: int = 32,
    in_channels: int = 64,
    height: int = 56,
    width: int = 56,
    dtype: str = "bfloat16",
):
    return [torch.randn(batch, in_channels, height, width, dtype=getattr(torch, dtype))]


def get_init_inputs(in_channels: int = 64, out_channels: int = 64, dtype: str = "bfloat16"):
    return [in_channels, out_channels, dtype]
