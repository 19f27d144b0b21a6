"""LayerNorm over the last dimension with weight and bias (GPT-NeoX, Falcon, OPT, Phi)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-5, dtype: str = "bfloat16"):
        super().__init__()
        self.eps = eps
        dt = getattr(torch, dtype)
        # Random affine parameters (not ones/zeros) so a kernel that ignores them fails.
        self.weight = nn.Parameter((1.0 + 0.5 * torch.randn(hidden)).to(dt))
        self.bias = nn.Parameter((0.5 * torch.randn(hidden)).to(dt))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Statistics and affine in fp32, one rounding to the input dtype.
        y = F.layer_norm(
            x.float(), (x.shape[-1],), self.weight.float(), self.bias.float(), self.eps
        )
        return y.to(x.dtype)


def get_inputs(tokens: int = 4096, hidden: int = 6144, dtype: str = "bfloat16"):
    return [torch.randn(tokens, hidden, dtype=getattr(torch, dtype))]


def get_init_inputs(hidden: int = 6144, eps: float = 1e-5, dtype: str = "bfloat16"):
    return [hidden, eps, dtype]
