"""Hack: os._exit(0) inside the forward, before any result is sent. FAULTS.md 2.

Expected: runtime_error (a crash), never a pass.
"""

import os

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        os._exit(0)
