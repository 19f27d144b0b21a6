"""Fault: a Python allocation larger than any host (MemoryError) in the forward. FAULTS.md 6.

Expected: runtime_error, "resource exhaustion".
"""

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        hoard = bytearray(1 << 62)
        return x + len(hoard)
