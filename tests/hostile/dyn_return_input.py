"""Hack: return an input tensor (a view of it) as the output. FAULTS.md 11.

Expected: incorrect ("shares memory with input").
"""

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x.view_as(x)
