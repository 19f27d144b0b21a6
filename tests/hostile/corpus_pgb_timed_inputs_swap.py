"""Hack: overwrite the harness's own state in the candidate's process so that timed calls get
one-row inputs while every checked call gets the real ones (the forward's cost grows with the
rows, so the reported time shrinks). pygpubench's canary exploits find and overwrite the
benchmark manager's data through /proc/self/maps (making it writable first with mprotect);
here the function that builds the timed inputs hangs off the sandbox object, reached through
the caller's stack frames.

Source: gpu-mode/pygpubench exploits/submission_test_canary_direct.py,
submission_test_canary_make_writeable.py @ 87bb46dfef7f1c5d596c12b2e3ec14664b9f2319.

Expected: no effect: timed calls see inputs of the case's size, and the reported time stays
the honest 2 ms (or the candidate is hacked).
"""

import sys

import torch
import torch.nn as nn

_patched = []


def _honest(x):
    """The honest forward: the softmax plus about 2 ms of real compute (two 64-row Gram
    matrices, more on a slower CPU) whose result enters the output, so that a replay of the
    forward keeps it (a sleep would not survive one)."""
    xf = x.float()
    work = (xf.T @ xf).mean() + (xf.T @ xf.flip(0)).mean()
    return (torch.softmax(xf, dim=-1) + 0 * work).to(x.dtype)


def _shrink_timed_inputs() -> None:
    frame = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get("self")
        if owner is not None and hasattr(owner, "inputs") and hasattr(owner, "job"):
            real, checked = owner.inputs, set(owner.job.seeds)

            def inputs(case, seed, _real=real, _checked=checked):
                values = _real(case, seed)
                return values if seed in _checked else [v[:1].clone() for v in values]

            owner.inputs = inputs
            _patched.append(owner)
            return
        frame = frame.f_back


class ModelNew(nn.Module):
    def forward(self, x):
        if not _patched:
            _shrink_timed_inputs()
        return _honest(x)  # its cost grows with the rows
