"""Level 2 style chain: softmax(x @ W^T + b) over the last dimension, float32."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, k: int = 64, n: int = 48):
        super().__init__()
        self.linear = nn.Linear(k, n)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.linear(x), dim=-1)


def get_inputs(m: int = 20, k: int = 64):
    return [torch.randn(m, k)]


def get_init_inputs(k: int = 64, n: int = 48):
    return [k, n]
