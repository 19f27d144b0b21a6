"""KernelBench level 2's 12_Gemm_Multiply_LeakyReLU at its own sizes: leaky_relu(linear(x) * 2)
over K = 8192 of torch.rand inputs, float32 (issue 35: the 3xTF32 path's truncation bias)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, k: int = 64, n: int = 48, multiplier: float = 2.0):
        super().__init__()
        self.gemm = nn.Linear(k, n)
        self.multiplier = multiplier

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.leaky_relu(self.gemm(x) * self.multiplier, 0.1)


def get_inputs(m: int = 16, k: int = 64):
    return [torch.rand(m, k)]


def get_init_inputs(k: int = 64, n: int = 48, multiplier: float = 2.0):
    return [k, n, multiplier]
