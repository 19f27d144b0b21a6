"""Hack: NaN in the output, hoping NaN compares as a wildcard. FAULTS.md 10.

Expected: incorrect ("NaN/Inf where the reference is finite").
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.softmax(x.float(), dim=-1).to(x.dtype)
        y[0, 0] = float("nan")
        return y
