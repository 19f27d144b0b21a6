"""Residual add then RMSNorm, as between every pair of Llama sublayers (vLLM fused_add_rms_norm).

Returns (normed, new_residual) as new tensors; vLLM's kernel updates in place, but the verifier
requires inputs to stay unmodified.
"""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-5, dtype: str = "bfloat16"):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter((1.0 + 0.5 * torch.randn(hidden)).to(getattr(torch, dtype)))

    def forward(self, x: torch.Tensor, residual: torch.Tensor):
        # The residual stream is stored in the activation dtype; the norm reads that stored value.
        h = (x.float() + residual.float()).to(x.dtype)
        hf = h.float()
        inv_rms = torch.rsqrt(hf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (hf * inv_rms * self.weight.float()).to(x.dtype), h


def get_inputs(tokens: int = 8192, hidden: int = 4096, dtype: str = "bfloat16"):
    dt = getattr(torch, dtype)
    return [torch.randn(tokens, hidden, dtype=dt), torch.randn(tokens, hidden, dtype=dt)]


def get_init_inputs(hidden: int = 4096, eps: float = 1e-5, dtype: str = "bfloat16"):
    return [hidden, eps, dtype]
