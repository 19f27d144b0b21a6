"""Hack: compute on the device, hand the output back on the host. FAULTS.md 9.

Expected (GPU): incorrect, "on device cpu".
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1).cpu()
