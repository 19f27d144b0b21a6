"""Hack: a gigabyte written to stdout (once), then a correct answer. FAULTS.md 7.

Expected: the output is drained and truncated, nothing blocks, and the candidate scores ok.
"""

import sys

import torch
import torch.nn as nn

_printed = False


class ModelNew(nn.Module):
    def forward(self, x):
        global _printed
        if not _printed:
            _printed = True
            chunk = b"x" * (1 << 20)
            for _ in range(1024):
                sys.stdout.buffer.write(chunk)
            sys.stdout.flush()
        return torch.softmax(x.float(), dim=-1).to(x.dtype)
