"""Hack: return at once and finish the work on a thread afterwards (the timer stops before the
work is done). FAULTS.md 18.

Expected: incorrect: the thread runs in the recorder only, so the replayed forward returns
unwritten (poisoned) memory; run beside the checks, it was hacked ("a thread started by the
call is still running").
"""

import threading
import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)

        def finish() -> None:
            time.sleep(0.05)
            out.copy_(torch.softmax(x.float(), dim=-1))

        threading.Thread(target=finish).start()
        return out
