"""C = A @ B in bf16 with fp32 accumulation (what rocBLAS/hipBLASLt and cuBLAS do).

A is [M, K] activations, B is [K, N] row-major weights; shapes are LLM projections.
"""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs(m: int = 8192, k: int = 4096, n: int = 6144, dtype: str = "bfloat16"):
    dt = getattr(torch, dtype)
    # B scaled by 1/sqrt(K) keeps C near unit scale, like trained projection weights.
    return [torch.randn(m, k, dtype=dt), torch.randn(k, n, dtype=dt).mul_(k**-0.5)]


def get_init_inputs():
    return []
