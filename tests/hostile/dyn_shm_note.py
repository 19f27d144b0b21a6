"""Hack: leave notes in /dev/shm and /tmp for the next candidate, and read the notes earlier
candidates left (issue 32: a file one candidate wrote under /dev/shm was there for the next).

Expected: the sandbox's /dev/shm is a private, empty tmpfs and /tmp is not writable, so no run
finds a note and every run scores ok; no note is left on the host.
"""

import contextlib
from pathlib import Path

import torch
import torch.nn as nn

NOTES = (Path("/dev/shm") / "hipevolve_dyn_shm_note", Path("/tmp") / "hipevolve_dyn_tmp_note")
FOUND = any(note.exists() for note in NOTES)
for note in NOTES:
    with contextlib.suppress(OSError):
        note.write_text("the previous candidate was here")


class ModelNew(nn.Module):
    def forward(self, x):
        if FOUND:
            return torch.zeros_like(x)
        return torch.softmax(x.float(), dim=-1).to(x.dtype)
