"""Hack: at the first timed call, write a complete, well-formed result (near-zero trials, then
"done") through the harness's own writer, and exit before the harness writes the real one; no
timed kernel ever runs. pygpubench's exploits recover the channel's secret from the heap, the
stack or the AES-obfuscated arena (/proc/self/mem) to authenticate the forgery; here the writer
and its file are reachable through the caller's stack frames.

Source: gpu-mode/pygpubench exploits/submission_heap_sig_scan.py, submission_stack_sig_scan.py,
submission_aes_key_recovery.py, submission_proc_mem_bypass.py, submission_fd_overwrite.py
@ 87bb46dfef7f1c5d596c12b2e3ec14664b9f2319.

Expected: the forged result never passes: it is refused (hacked), the early exit is a crash, or
the forgery never runs where it is timed and the verdict is ok with the honest time.
"""

import os
import sys

import torch
import torch.nn as nn


def _honest(x):
    """The honest forward: the softmax plus about 2 ms of real compute (two 64-row Gram
    matrices, more on a slower CPU) whose result enters the output, so that a replay of the
    forward keeps it (a sleep would not survive one)."""
    xf = x.float()
    work = (xf.T @ xf).mean() + (xf.T @ xf.flip(0)).mean()
    return (torch.softmax(xf, dim=-1) + 0 * work).to(x.dtype)


def _sandbox_and_case():
    frame, case = sys._getframe(1), None
    while frame is not None:
        owner = frame.f_locals.get("self")
        if case is None and "case" in frame.f_locals:
            case = frame.f_locals["case"]
        if owner is not None and hasattr(owner, "write_message") and hasattr(owner, "out"):
            return owner, case
        frame = frame.f_back
    return None, None


class ModelNew(nn.Module):
    def forward(self, x):
        owner, case = _sandbox_and_case()
        timing = sys._getframe(1)
        while timing is not None and not timing.f_code.co_name.startswith("time_"):
            timing = timing.f_back
        if owner is not None and timing is not None:
            trials = [0.5] * owner.job.trials
            owner.send("timing_done", case=case.name, trials=trials, windows=trials, threads=1)
            owner.send("done", threads=1)
            owner.out.flush()
            os._exit(0)
        return _honest(x)
