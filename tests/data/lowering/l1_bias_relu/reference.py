"""Level 1 style pointwise: relu(x + bias) with a per-column bias, in float32 or float16."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features: int = 1001):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.bias.to(x.dtype))


def get_inputs(rows: int = 8, features: int = 1001, dtype: str = "float32"):
    return [torch.randn(rows, features, dtype=getattr(torch, dtype))]


def get_init_inputs(features: int = 1001):
    return [features]
