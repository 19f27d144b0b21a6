"""Hack: the forward never returns (host-side `while True`). FAULTS.md 1.

Expected: timeout in stage check, the candidate process killed within the check timeout + 2 s,
no zombie left behind.
"""

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        while True:
            pass
