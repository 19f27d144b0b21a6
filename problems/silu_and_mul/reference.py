"""SwiGLU gate of Llama/Qwen/Mistral MLPs: silu(x[..., :d]) * x[..., d:], with x = [gate | up]."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1] // 2
        xf = x.float()
        # fp32 math, one rounding to the input dtype (vLLM's silu_and_mul does the same)
        return (F.silu(xf[..., :d]) * xf[..., d:]).to(x.dtype)


def get_inputs(tokens: int = 4096, d: int = 14336, dtype: str = "bfloat16"):
    return [torch.randn(tokens, 2 * d, dtype=getattr(torch, dtype))]


def get_init_inputs():
    return []
