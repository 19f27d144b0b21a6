"""Row softmax over the last dimension, as in attention scores and LM-head sampling."""

import math

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x.float(), dim=-1).to(x.dtype)


def get_inputs(rows: int = 4096, cols: int = 4096, dtype: str = "bfloat16"):
    """Logits as models emit them: each row at its own scale (0.5 to 8) and offset (-20 to 100),
    with one peak at a random column, 2 to 10 above the rest of its row."""
    scale = torch.empty(rows, 1).uniform_(math.log(0.5), math.log(8.0)).exp()
    x = torch.randn(rows, cols) * scale
    if cols:
        peaks = x.max(dim=-1).values + torch.empty(rows).uniform_(2.0, 10.0)
        x[torch.arange(rows), torch.randint(cols, (rows,))] = peaks
    x += torch.empty(rows, 1).uniform_(-20.0, 100.0)
    return [x.to(getattr(torch, dtype))]


def get_init_inputs():
    return []
