"""A Level-2 style fusion chain: projection GEMM, residual add, RMSNorm (Llama's o_proj or
down_proj followed by the next sublayer's input norm). Returns (normed, new_residual)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features: int, hidden: int, eps: float = 1e-5, dtype: str = "bfloat16"):
        super().__init__()
        self.eps = eps
        dt = getattr(torch, dtype)
        # Weight of std 1/sqrt(K) puts the projection at the residual's scale, so dropping the
        # residual or the GEMM both fail.
        self.weight = nn.Parameter((torch.randn(hidden, in_features) * in_features**-0.5).to(dt))
        self.norm_weight = nn.Parameter((1.0 + 0.5 * torch.randn(hidden)).to(dt))

    def forward(self, x: torch.Tensor, residual: torch.Tensor):
        # As a Llama layer stores it: the projection and the new residual are activation dtype.
        h = residual + F.linear(x, self.weight)
        hf = h.float()
        inv_rms = torch.rsqrt(hf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (hf * inv_rms * self.norm_weight.float()).to(h.dtype), h


def get_inputs(
    tokens: int = 4096, in_features: int = 4096, hidden: int = 4096, dtype: str = "bfloat16"
):
    dt = getattr(torch, dtype)
    return [torch.randn(tokens, in_features, dtype=dt), torch.randn(tokens, hidden, dtype=dt)]


def get_init_inputs(
    in_features: int = 4096, hidden: int = 4096, eps: float = 1e-5, dtype: str = "bfloat16"
):
    return [in_features, hidden, eps, dtype]
