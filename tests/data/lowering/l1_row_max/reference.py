"""Level 1 style reduction: max over the last dimension, kept as [rows, 1], in bfloat16."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.amax(x, dim=-1, keepdim=True)


def get_inputs(rows: int = 5, cols: int = 777):
    return [torch.randn(rows, cols, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
