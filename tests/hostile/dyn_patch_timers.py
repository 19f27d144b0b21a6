"""Hack: monkeypatch time.perf_counter, torch.cuda.Event.elapsed_time, torch.cuda.synchronize
and statistics.median so that a slow forward (about 2 ms) looks instant. FAULTS.md 17.

Expected: no effect: the sandbox timed with functions captured before the candidate was
imported and the judge computes the statistics; the reported time stays about 2 ms (ok status).
"""

import statistics
import time

import torch
import torch.nn as nn

_fake = [0.0]


def _frozen_clock() -> float:
    _fake[0] += 1e-9
    return _fake[0]


time.perf_counter = _frozen_clock
time.monotonic = _frozen_clock
statistics.median = lambda data: 1e-3
torch.cuda.synchronize = lambda *a, **k: None
torch.cuda.Event.elapsed_time = lambda self, end: 1e-6


class ModelNew(nn.Module):
    def forward(self, x):
        # About 2 ms of real compute whose result enters the output (a replay keeps it).
        xf = x.float()
        work = (xf.T @ xf).mean() + (xf.T @ xf.flip(0)).mean()
        return (torch.softmax(xf, dim=-1) + 0 * work).to(x.dtype)
