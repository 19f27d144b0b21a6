"""Level 1 style reduction: sum over the last dimension (no keepdim)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=-1)


def get_inputs(batch: int = 4, rows: int = 3, cols: int = 1000):
    return [torch.randn(batch, rows, cols)]


def get_init_inputs():
    return []
