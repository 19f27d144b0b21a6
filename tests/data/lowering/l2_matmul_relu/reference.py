"""Level 2 style GEMM with an epilogue: relu(x @ W^T + b), float32."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, k: int = 64, n: int = 32):
        super().__init__()
        self.linear = nn.Linear(k, n)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def get_inputs(m: int = 16, k: int = 64):
    return [torch.randn(m, k)]


def get_init_inputs(k: int = 64, n: int = 32):
    return [k, n]
