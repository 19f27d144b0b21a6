"""Level 1 style nn.Linear (x @ W^T + b) on a batched 3-D input, in bfloat16."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, k: int = 40, n: int = 24, dtype: str = "bfloat16"):
        super().__init__()
        self.linear = nn.Linear(k, n, dtype=getattr(torch, dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


def get_inputs(batch: int = 3, tokens: int = 5, k: int = 40, dtype: str = "bfloat16"):
    return [torch.randn(batch, tokens, k, dtype=getattr(torch, dtype))]


def get_init_inputs(k: int = 40, n: int = 24, dtype: str = "bfloat16"):
    return [k, n, dtype]
