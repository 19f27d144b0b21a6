"""A reference (not a candidate) that kills the judge process itself: os._exit(3)."""

import os

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        os._exit(3)


def get_inputs(rows: int = 64, cols: int = 1024, dtype: str = "float32"):
    return [torch.randn(rows, cols, dtype=getattr(torch, dtype))]


def get_init_inputs():
    return []
