"""Level 2 style chain: layer_norm(relu(x @ W^T + b)) over the last dimension, float32."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, k: int = 64, n: int = 48):
        super().__init__()
        self.linear = nn.Linear(k, n)
        self.norm = nn.LayerNorm(n)
        with torch.no_grad():  # a non-trivial affine part, so that it is checked
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(torch.relu(self.linear(x)))


def get_inputs(m: int = 20, k: int = 64):
    return [torch.randn(m, k)]


def get_init_inputs(k: int = 64, n: int = 48):
    return [k, n]
