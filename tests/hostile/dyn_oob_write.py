"""Hack (or bug): a silent out-of-bounds write just past the end of the input buffer (using it
as scratch), with a correct answer. FAULTS.md 4.

Expected: incorrect: the canary region after the input copy was overwritten.
"""

import ctypes

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        ctypes.memset(x.data_ptr() + x.numel() * x.element_size(), 0, 256)
        return torch.softmax(x.float(), dim=-1).to(x.dtype)
