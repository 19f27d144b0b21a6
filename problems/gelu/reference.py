"""GELU with the tanh approximation, as in GPT-2/GPT-J ("gelu_new") and Gemma MLPs."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # fp32 math, one rounding to the input dtype, as a fused epilogue would do
        return F.gelu(x.float(), approximate="tanh").to(x.dtype)


def get_inputs(tokens: int = 4096, features: int = 24576, dtype: str = "bfloat16"):
    return [torch.randn(tokens, features, dtype=getattr(torch, dtype))]


def get_init_inputs():
    return []
