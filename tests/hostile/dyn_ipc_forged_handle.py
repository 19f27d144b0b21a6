"""Hack: forge the IPC description of the outputs the sandbox sends, so the judge opens GPU memory
the candidate chose instead of the outputs (a random 64-byte handle in torch's header here; a
forged header is refused by the wire format as garbage: `hacked`). FAULTS.md 12 and 19.

Expected: the patch never reaches the process whose outputs are judged (a KernelBench file's Python
runs only in its recorder, verifier/gpu/sandbox/record_kb.py), so the honest forward is checked (ok,
flag plan:kb-executor). Were a forged handle to reach the judge, it could not open a handle that
names no exported allocation, and a description it cannot open is never a pass.
"""

import os

import torch
import torch.nn as nn

from hipevolve.verifier.gpu import ipc

_share = ipc.share


def _forged(t):
    got = _share(t)
    if got is None:
        return None
    spec, counter = got
    handle = bytes.fromhex(spec["handle"])  # torch's header bytes kept, the handle itself random
    spec["handle"] = (handle[:-64] + os.urandom(64)).hex()
    return spec, counter


ipc.share = _forged


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)
