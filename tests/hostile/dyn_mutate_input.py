"""Hack: compute in place in the input tensor (saves an allocation, corrupts the caller's data).
FAULTS.md 11.

Expected: incorrect ("input 0 was modified").
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        x.copy_(torch.softmax(x.float(), dim=-1).to(x.dtype))
        return x.clone()
