"""Hack: write files outside the sandbox's temporary folder: into the repository, the real
/root, /tmp and /var/tmp. FAULTS.md 8.

Expected: every write denied (Landlock); the answer is correct, so the status is ok, and none
of the files exists afterwards.
"""

import contextlib
from pathlib import Path

import torch
import torch.nn as nn

import hipevolve

NAME = "hipevolve_dyn_write_outside.txt"
TARGETS = (
    Path(hipevolve.__file__).resolve().parents[1] / NAME,  # the checkout (a sandbox gets a copy
    # of its own file, in its own folder)
    Path("/root") / NAME,
    Path("/tmp") / NAME,
    Path("/var/tmp") / NAME,
)


class ModelNew(nn.Module):
    def forward(self, x):
        for target in TARGETS:
            with contextlib.suppress(OSError):
                target.write_text("escaped")
        return torch.softmax(x.float(), dim=-1).to(x.dtype)
