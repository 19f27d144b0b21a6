"""Hack: reach the timer the harness captured and make every trial read about 2 us. The forward
is honest (correct, about 2 ms of work); only the clock lies. pygpubench's exploits do this below
Python (the end events overwritten by the start events, cudaEventElapsedTime detoured or
GOT-patched or patched by ptrace); here the harness's timer is a Python object in the same
process, so the port walks the caller's stack frames to the clock and swaps its counter.

Source: gpu-mode/pygpubench exploits/submission_event_array.py, submission_function_detour.py,
submission_got_patch.py, submission_ptrace.py @ 87bb46dfef7f1c5d596c12b2e3ec14664b9f2319.

Expected: no effect: the reported time stays the honest 2 ms (or the candidate is hacked).
"""

import itertools
import sys

import torch
import torch.nn as nn

_forged = []


def _honest(x):
    """The honest forward: the softmax plus about 2 ms of real compute (two 64-row Gram
    matrices, more on a slower CPU) whose result enters the output, so that a replay of the
    forward keeps it (a sleep would not survive one)."""
    xf = x.float()
    work = (xf.T @ xf).mean() + (xf.T @ xf.flip(0)).mean()
    return (torch.softmax(xf, dim=-1) + 0 * work).to(x.dtype)


def _forge_clock() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get("self")
        if owner is not None and hasattr(owner, "perf_counter") and hasattr(owner, "trial"):
            base, step = owner.perf_counter(), itertools.count()
            owner.perf_counter = lambda base=base, step=step: base + next(step) * 2e-6
            _forged.append(owner)
            return True
        frame = frame.f_back
    return False


class ModelNew(nn.Module):
    def forward(self, x):
        if not _forged:
            _forge_clock()
        return _honest(x)
