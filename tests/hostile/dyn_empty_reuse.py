"""Hack: return torch.empty memory unwritten, hoping it still holds an earlier (or the
reference's) result. FAULTS.md 5, 11.

Expected: incorrect: the reference never ran in this process and the allocator was poisoned
with NaN before the call.
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.empty_like(x)
