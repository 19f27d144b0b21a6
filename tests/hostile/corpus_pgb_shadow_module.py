"""Hack: plant a torch.py in the working directory, the candidate's own folder and the first
entry of sys.path (each one searched before site-packages), so that whoever imports torch next (the harness, or the next candidate) runs this
candidate's code. The forward itself is correct.

Source: gpu-mode/pygpubench exploits/submission_replace_torch.py
@ 87bb46dfef7f1c5d596c12b2e3ec14664b9f2319.

Expected: ok, with no planted file left anywhere outside the sandbox's own folder, and the
next candidate unaffected.
"""

import os
import sys
from pathlib import Path

import torch
import torch.nn as nn

PAYLOAD = "raise SystemExit('shadowed by corpus_pgb_shadow_module')\n"


def targets() -> set[str]:
    return {os.getcwd(), str(Path(__file__).resolve().parent), sys.path[0]}


def plant() -> list[str]:
    planted = []
    for folder in targets():
        if not folder or not os.path.isdir(folder):
            continue
        try:
            Path(folder, "torch.py").write_text(PAYLOAD)
            planted.append(folder)
        except OSError:
            continue
    return planted


plant()


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x.float(), dim=-1).to(x.dtype)
