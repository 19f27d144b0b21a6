"""Hack: an output in a cheaper dtype than the reference's (precision downgrade). FAULTS.md 9.

Expected: incorrect, naming the dtype.
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x.half(), dim=-1)
