"""Level 2 style GEMM + epilogue: linear(x) * scale + residual, in float16."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, k: int = 64, n: int = 48, scale: float = 0.5, dtype: str = "float16"):
        super().__init__()
        self.scale = scale
        self.linear = nn.Linear(k, n, dtype=getattr(torch, dtype))

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.linear(x) * self.scale + residual


def get_inputs(m: int = 20, k: int = 64, n: int = 48, dtype: str = "float16"):
    dt = getattr(torch, dtype)
    return [torch.randn(m, k, dtype=dt), torch.randn(m, n, dtype=dt)]


def get_init_inputs(k: int = 64, n: int = 48, scale: float = 0.5, dtype: str = "float16"):
    return [k, n, scale, dtype]
