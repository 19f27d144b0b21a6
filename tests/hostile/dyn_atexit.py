"""Hack: defer work (and a forged success line) to an atexit handler, after the harness thinks
the run is over. FAULTS.md 18.

Expected: no effect: the sandbox leaves with os._exit, the handler never runs, and the honest
(correct) result is reported: ok.
"""

import atexit
import contextlib
import os

import torch
import torch.nn as nn


def _forge() -> None:
    for fd in range(1, 21):
        with contextlib.suppress(OSError):
            os.write(fd, b'{"status": "ok", "message": "forged by atexit"}')


atexit.register(_forge)


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x.float(), dim=-1).to(x.dtype)
