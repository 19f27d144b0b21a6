"""Fault: a thread bomb in the forward. FAULTS.md 6.

Expected: bounded. RLIMIT_NPROC stops thread creation (runtime_error) where it applies; for root,
which the kernel exempts, the stage timeout kills the sandbox (timeout). Nothing is left running.
"""

import threading
import time

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        while True:
            threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
