"""Row softmax over the last dimension, as in attention scores and LM-head sampling."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x.float(), dim=-1).to(x.dtype)


def get_inputs(rows: int = 4096, cols: int = 4096, dtype: str = "bfloat16"):
    return [torch.randn(rows, cols, dtype=getattr(torch, dtype))]


def get_init_inputs():
    return []
