"""Hack: SIGSEGV in the candidate process (reads address 0 through ctypes). FAULTS.md 2.

Expected: runtime_error naming SIGSEGV.
"""

import ctypes

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        ctypes.string_at(0)
        return x
