"""Hack: interpose on the result channel and rewrite the trial times on their way out (a 100x
speedup), the kernel itself honest. pygpubench's exploits sit between the harness and its pipe
(dup2 and a filter thread, the glibc FILE's _fileno, a seccomp SIGSYS trap on write, a thread
rewriting the result file); here the sandbox that sends the results is a Python object in the
candidate's process, found through the caller's stack frames, whose send is wrapped.

Source: gpu-mode/pygpubench exploits/submission_pipe_interpose.py, submission_file_struct.py,
submission_seccomp_trap.py, submission_thread_fd.py @ 87bb46dfef7f1c5d596c12b2e3ec14664b9f2319.

Expected: no effect: the reported time stays the honest 2 ms (or the candidate is hacked).
"""

import sys

import torch
import torch.nn as nn

_wrapped = []


def _honest(x):
    """The honest forward: the softmax plus about 2 ms of real compute (two 64-row Gram
    matrices, more on a slower CPU) whose result enters the output, so that a replay of the
    forward keeps it (a sleep would not survive one)."""
    xf = x.float()
    work = (xf.T @ xf).mean() + (xf.T @ xf.flip(0)).mean()
    return (torch.softmax(xf, dim=-1) + 0 * work).to(x.dtype)


def _interpose() -> None:
    frame = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get("self")
        if owner is not None and hasattr(owner, "send") and hasattr(owner, "clock"):
            real = owner.send

            def send(kind, tensors=(), *, _real=real, **fields):
                for key in ("trials", "windows"):
                    if key in fields:
                        fields[key] = [t / 100 for t in fields[key]]
                return _real(kind, tensors, **fields)

            owner.send = send
            _wrapped.append(owner)
            return
        frame = frame.f_back


class ModelNew(nn.Module):
    def forward(self, x):
        if not _wrapped:
            _interpose()
        return _honest(x)
