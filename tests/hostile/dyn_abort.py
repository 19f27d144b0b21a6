"""Hack: SIGABRT in the candidate process (os.abort, as a failed assert in native code). FAULTS.md 2.

Expected: runtime_error naming SIGABRT.
"""

import os

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        os.abort()
