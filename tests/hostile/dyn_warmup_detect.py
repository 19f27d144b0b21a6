"""Hack: behave during the correctness calls, then detect the timing loop (by counting calls)
and return unwritten memory instantly. FAULTS.md 20.

Expected: ok: the file runs only in its recorder, once per case, and every judged call replays
that honest forward (record_kb.py, replay_kb.py), so the trick never runs where it is judged.
Run beside the checks (before plans), it was: hacked: the timed calls' outputs, checked at random, are
wrong ("wrong in a timed call").
"""

import torch
import torch.nn as nn

_calls = [0]


class ModelNew(nn.Module):
    def forward(self, x):
        _calls[0] += 1
        if _calls[0] > 6:  # 3 seeds x 2 runs in the checks
            return torch.empty_like(x)
        return torch.softmax(x.float(), dim=-1).to(x.dtype)
