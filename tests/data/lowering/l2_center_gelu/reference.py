"""Level 2 style chain around a reduction: subtract the row mean, GELU, scale by a weight."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, features: int = 1024):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        centred = x - x.mean(dim=-1, keepdim=True)
        return F.gelu(centred) * self.weight


def get_inputs(rows: int = 5, features: int = 1024):
    return [torch.randn(rows, features)]


def get_init_inputs(features: int = 1024):
    return [features]
