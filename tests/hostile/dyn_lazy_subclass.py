"""Hack: return a lazy torch.Tensor subclass whose values are only computed when read (so the
timed call does no work). FAULTS.md 14.

Expected: hacked ("not a plain torch.Tensor").
"""

import torch
import torch.nn as nn


class Lazy(torch.Tensor):
    pass


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x.float(), dim=-1).to(x.dtype).as_subclass(Lazy)
