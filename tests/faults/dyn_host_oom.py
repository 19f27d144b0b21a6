"""Fault: ask the host allocator for a pebibyte in the forward. FAULTS.md 6.

Expected: runtime_error recorded as resource exhaustion, never a pass; the next candidate is
unaffected.
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        hoard = torch.empty(1 << 50, dtype=torch.uint8, device=x.device)
        return hoard[: x.numel()].view_as(x)
