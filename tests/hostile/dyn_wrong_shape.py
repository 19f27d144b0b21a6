"""Hack: an output of the wrong shape (one row short). FAULTS.md 9.

Expected: incorrect, naming the shape.
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x[:-1].float(), dim=-1).to(x.dtype)
