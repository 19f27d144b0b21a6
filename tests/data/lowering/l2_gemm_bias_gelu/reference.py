"""Level 2 style GEMM + epilogue: gelu(x @ W^T + b), in bfloat16."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, k: int = 64, n: int = 48, dtype: str = "bfloat16"):
        super().__init__()
        self.linear = nn.Linear(k, n, dtype=getattr(torch, dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.linear(x))


def get_inputs(m: int = 20, k: int = 64, dtype: str = "bfloat16"):
    return [torch.randn(m, k, dtype=getattr(torch, dtype))]


def get_init_inputs(k: int = 64, n: int = 48, dtype: str = "bfloat16"):
    return [k, n, dtype]
