"""Hack: leave a file for whichever candidate a reused judge runs next, and read the notes that
earlier candidates left (FAULTS.md 8: nothing passes from one candidate to the next).

Not a dyn_ attack: tests/test_worker.py runs it twice in one judge. Each run looks for notes in
every sandbox folder of its judge; finding one, it answers zeros (wrong), so the second run
scores incorrect unless the judge removed the first run's folder. It then leaves its own note.
"""

from pathlib import Path

import torch
import torch.nn as nn

NOTE = "note.txt"
FOUND = any(Path.cwd().parent.glob(f"sandbox-*/{NOTE}"))
Path(NOTE).write_text("the previous candidate was here")


class ModelNew(nn.Module):
    def forward(self, x):
        if FOUND:
            return torch.zeros_like(x)
        return torch.softmax(x.float(), dim=-1).to(x.dtype)
