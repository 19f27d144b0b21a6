"""Hack: a fork bomb in the forward. FAULTS.md 6.

Expected: bounded: no process is ever created (seccomp denies fork for candidates that do not
build a PyTorch inline extension), the call raises, status runtime_error, nothing left running.
"""

import os

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        while True:
            os.fork()
