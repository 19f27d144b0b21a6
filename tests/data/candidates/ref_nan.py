"""A broken reference (not a candidate): its output holds NaN, so it cannot judge anything."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        y = x.clone()
        y[0, 0] = float("nan")
        return y


def get_inputs(rows: int = 64, cols: int = 1024, dtype: str = "float32"):
    return [torch.randn(rows, cols, dtype=getattr(torch, dtype))]


def get_init_inputs():
    return []
