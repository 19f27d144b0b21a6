"""RMSNorm with a weight, eps 1e-6 (Llama, Qwen, Mistral)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6, dtype: str = "bfloat16"):
        super().__init__()
        self.eps = eps
        # Random weight (not ones) so a kernel that ignores it fails.
        self.weight = nn.Parameter((1.0 + 0.5 * torch.randn(hidden)).to(getattr(torch, dtype)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        inv_rms = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        # Scale by the weight in fp32 and round once, as a fused kernel does.
        return (xf * inv_rms * self.weight.float()).to(x.dtype)


def get_inputs(tokens: int = 16384, hidden: int = 4096, dtype: str = "bfloat16"):
    return [torch.randn(tokens, hidden, dtype=getattr(torch, dtype))]


def get_init_inputs(hidden: int = 4096, eps: float = 1e-6, dtype: str = "bfloat16"):
    return [hidden, eps, dtype]
