"""Hack: correct values in a transposed (non-contiguous) layout. FAULTS.md 9.

Expected: incorrect, naming the strides.
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.softmax(x.float(), dim=-1).to(x.dtype)
        return y.t().contiguous().t()
