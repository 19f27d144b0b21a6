"""Linear + bias + exact (erf) GELU: the first MLP projection of Falcon and ViT."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int, dtype: str = "bfloat16"):
        super().__init__()
        dt = getattr(torch, dtype)
        # Weight of std 1/sqrt(K) gives unit-scale pre-activations; a unit-scale bias then moves
        # the result far beyond the tolerance, so a kernel that drops it fails.
        self.weight = nn.Parameter(
            (torch.randn(out_features, in_features) * in_features**-0.5).to(dt)
        )
        self.bias = nn.Parameter(torch.randn(out_features).to(dt))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # PyTorch's own path: the GEMM (fp32 accumulation) rounds to bf16, GELU runs in fp32.
        return F.gelu(F.linear(x, self.weight, self.bias))


def get_inputs(tokens: int = 4096, in_features: int = 4544, dtype: str = "bfloat16"):
    return [torch.randn(tokens, in_features, dtype=getattr(torch, dtype))]


def get_init_inputs(in_features: int = 4544, out_features: int = 18176, dtype: str = "bfloat16"):
    return [in_features, out_features, dtype]
