"""Level 2 style chain into a GEMM: linear(layer_norm(relu(x))), float32: the relu fuses into
the LayerNorm kernel, whose output the GEMM reads."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, k: int = 64, n: int = 48):
        super().__init__()
        self.norm = nn.LayerNorm(k)
        self.linear = nn.Linear(k, n)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.norm(torch.relu(x)))


def get_inputs(m: int = 20, k: int = 64):
    return [torch.randn(m, k)]


def get_init_inputs(k: int = 64, n: int = 48):
    return [k, n]
