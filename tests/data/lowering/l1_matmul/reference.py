"""Level 1 style GEMM: C = A @ B, both operands forward inputs, in float32 or bfloat16."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs(m: int = 33, k: int = 70, n: int = 45, dtype: str = "float32"):
    dt = getattr(torch, dtype)
    return [torch.randn(m, k, dtype=dt), torch.randn(k, n, dtype=dt)]


def get_init_inputs():
    return []
